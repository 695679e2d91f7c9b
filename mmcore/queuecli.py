"""`python -m mmcore queue`: the queue from a shell (list it, move a job, change a priority)."""
from mmcore import api


def add_queue(sub):
    p = sub.add_parser("queue", help="jobs waiting in the queue, with their place and reason; move or prioritise one")
    p.add_argument("job_id", nargs="?", help="a waiting job to move or prioritise")
    p.add_argument("--move", choices=("up", "down", "top", "bottom"), help="move the job among jobs of its priority")
    p.add_argument("--priority", type=int, help="set the job's priority (admins; higher starts first)")
    p.add_argument("--user", default=None, help="acting user (default: the OS user)")

    def run(args):
        if args.job_id is None:
            if args.move or args.priority is not None:
                p.error("--move and --priority need a job id")
            for job in api.queue():
                print(f"{job['id']:>5}  {job['train_type']:<14} {job['owner']:<16} p={job['priority']:<4} "
                      f"{job['backend']:<6} {job['queue_reason'] or ''}")
            return None
        if args.move is None and args.priority is None:
            p.error("give --move or --priority with a job id")
        done = True
        if args.priority is not None:
            done = api.set_priority(args.job_id, args.priority, user=args.user) and done
        if args.move:
            done = api.move(args.job_id, args.move, user=args.user) and done
        if not done:
            print(f"job {args.job_id} is not waiting in the queue")
            return 1
        return None
    p.set_defaults(handler=run)
