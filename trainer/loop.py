"""The one training loop of every MiniMind trainer, and the start of a run around it.

A training script reads top to bottom like upstream MiniMind's:

    run = loop.start("sft")                                    # 1. options, SIGTERM, processes, seed
    model, tokenizer = tu.load_model(run.args, run.args.from_weight)   # 2. its model(s) and data
    dataset = tu.load_dataset(SFTDataset, run.args, tokenizer)
    part = run.part("model", model, run.args.learning_rate)   # 3. what trains: optimizer (+ DDP)
    loop.train(run, [part], dataset, collate_fn, step_fn, run_name=...)   # 4. the loop

`train` is written once for all nine types: the cosine schedule per micro-step, gradient accumulation,
clipping, mixed precision, the progress line with its ETA, the experiment tracker, saves, resume and
SIGTERM handling (`trainer.stopping`). What differs between types is only `step_fn(batch) -> (loss,
metrics)` (the supervised loss, or an RL rollout/reward/advantage step) and, for RL, the progress line. Supervised
training is the one-part case; PPO trains two parts (actor and critic), each with its own optimizer
and learning rate.
"""
import math
import os
import time
from contextlib import ExitStack
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from trainer import trainer_utils as tu
from trainer.checkpoint import load_resume, resume_path, rng_states, save_resume, save_weights, set_rng_states
from trainer.rules import specs, weight_meta
from trainer.rules.parsing import parse_args
from trainer.rules.records import Recorder, RunRecords, default_run_dir
from trainer.stopping import StopSignal, stopped_message

# ----------------------------------------------------------------------------------------------------
# A run and the parts it trains


def start(train_type):
    """The first steps of every script, in this order: parse the options of `train_type`, catch SIGTERM,
    start the processes, seed each rank. Returns a `Run`."""
    args = parse_args(train_type, cuda_available=torch.cuda.is_available)
    stop = StopSignal()
    info = tu.init_distributed(args)
    tu.setup_seed(tu.run_seed(args) + info.rank)
    return Run(train_type, args, info, stop)


def make_optimizer(params, learning_rate):
    """The optimizer of every trained part: AdamW with torch's defaults, like upstream - the same
    update, computed by torch's fused kernel on CPU and CUDA (one pass over the parameters instead
    of a chain of per-tensor operations; about 6x faster for a 512x8 model on CPU)."""
    params = list(params)
    fused = bool(params) and all(getattr(p, "device", None) is not None and p.device.type in ("cpu", "cuda")
                                 for p in params)  # tensors on CPU or CUDA (not param-group dicts)
    return torch.optim.AdamW(params, lr=learning_rate, fused=fused or None)


@dataclass
class Part:
    """One trained module: `model` is what the loss runs on (DDP-wrapped under torchrun), with its
    optimizer and its peak learning rate. The first part's state is the resume file's `model`;
    a further part's is stored under its `name` (PPO: `critic`, `critic_optimizer`)."""
    name: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    learning_rate: float

    @property
    def module(self):
        """The plain module (no DDP wrapper): sampling and state dicts use it."""
        return tu.unwrap_model(self.model)


@dataclass
class Run:
    """One training run: its type, parsed options, process info and SIGTERM handler."""
    train_type: str
    args: object
    info: tu.DistInfo
    stop: "StopSignal"
    spec: specs.TypeSpec = field(init=False)
    records: object = field(default=None, init=False)  # trainer.rules.records.Recorder, set when `train` starts

    def __post_init__(self):
        self.spec = specs.spec(self.train_type)

    def weight_paths(self):
        """Where the trained parts are saved, in part order (`trainer.rules.specs` names the files)."""
        return [os.path.join(self.args.save_dir, name) for name in self.spec.weight_files(vars(self.args))]

    def resume_path(self):
        return resume_path(self.spec, vars(self.args))

    def part(self, name, model, learning_rate, params=None):
        """A `Part` training `params` (default: all of `model`'s) with its own optimizer; under torchrun
        the model is wrapped in DDP (MoE models may leave experts unused in a step)."""
        optimizer = make_optimizer(model.parameters() if params is None else params, learning_rate)
        model = tu.wrap_ddp(model, self.info, find_unused_parameters=bool(self.args.use_moe))
        return Part(name, model, optimizer, learning_rate)


def get_lr(current_step, total_steps, lr):
    """Upstream MiniMind's learning rate of the supervised trainers: lr/10 + lr/2 * (1 + cos(pi * t / T)),
    i.e. 1.1*lr at the start, 0.6*lr half-way and 0.1*lr at the end (upstream's trainer_utils.get_lr)."""
    return lr / 10 + 0.5 * lr * (1 + math.cos(math.pi * current_step / total_steps))


def annealed_lr(current_step, total_steps, lr):
    """The RL trainers' learning rate: cosine annealing from lr down to lr/10, the curve of upstream's
    `CosineAnnealingLR(T_max, eta_min=lr/10)` (here evaluated per micro-step, like `get_lr`)."""
    return lr * (0.1 + 0.45 * (1 + math.cos(math.pi * current_step / total_steps)))


# ----------------------------------------------------------------------------------------------------
# Progress lines


@dataclass
class Progress:
    """What a progress line may show: `epoch` 0-based, `step` 1-based in the epoch, one learning rate
    per part, the step's loss and metrics (floats), the epoch's remaining minutes."""
    epoch: int
    epochs: int
    step: int
    iters: int
    loss: float
    metrics: dict
    lrs: list
    eta_min: float


def format_progress(epoch, epochs, step, iters, loss, lr, eta_min, extra=None):
    """A progress line in the upstream format, e.g.

    `Epoch:[1/2](100/44160) loss:8.896761 lr:0.000549999999 epoch_Time:332.0min:`

    `epoch` is 0-based (printed 1-based), `step` 1-based within the epoch. `extra` (name -> float) is
    written between loss and lr, like distillation's `ce:` and `distill:` fields.
    """
    fields = "".join(f" {name}:{value:.6f}" for name, value in (extra or {}).items())
    return (f"Epoch:[{epoch + 1}/{epochs}]({step}/{iters}) loss:{loss:.6f}{fields} "
            f"lr:{lr:.12f} epoch_Time:{eta_min}min:")


def template_line(template):
    """A `progress_line` that fills `template` (str.format) with a `Progress`'s fields: `epoch` (1-based),
    `epochs`, `step`, `iters`, `loss`, `lr` (the first part's), `lr_1`, `lr_2`... (further parts') and
    the metrics by name. The RL scripts write their upstream lines this way."""
    def line(p):
        lrs = {"lr": p.lrs[0], **{f"lr_{i}": lr for i, lr in enumerate(p.lrs[1:], start=1)}}
        return template.format(epoch=p.epoch + 1, epochs=p.epochs, step=p.step, iters=p.iters, loss=p.loss,
                               **lrs, **p.metrics)
    return line


def supervised_line(p):
    """The supervised scripts' progress line (`format_progress` of a `Progress`)."""
    return format_progress(p.epoch, p.epochs, p.step, p.iters, p.loss, p.lrs[0], p.eta_min, p.metrics)


# ----------------------------------------------------------------------------------------------------
# Experiment tracking


def init_tracker(args, run_name, resume_state=None):
    """wandb if installed, else swanlab (same API), else None with a warning. Rank 0 only.

    With a `resume_state` that recorded a run id, the same tracker run is continued. Returns the
    module (with `.log(dict)`), or None when tracking is off or unavailable.
    """
    resume_id = (resume_state or {}).get("wandb_id")
    if not getattr(args, "use_wandb", False) or not tu.is_main_process():
        return None
    try:
        import wandb as tracker
    except ImportError:
        try:
            import swanlab as tracker
        except ImportError:
            tu.warn("--use_wandb was given but neither wandb nor swanlab is installed; training without a tracker")
            return None
    try:
        tracker.init(project=args.wandb_project, name=run_name, id=resume_id, resume="must" if resume_id else None)
    except Exception as e:  # a tracker outage (no network, no login) must not stop the training
        tu.warn(f"could not start {tracker.__name__} ({e}); training without a tracker")
        return None
    return tracker


def tracker_run_id(tracker):
    """The tracker run's id (stored in the resume state so the run continues in the same chart)."""
    if tracker is None:
        return None
    run = tracker.get_run() if hasattr(tracker, "get_run") else getattr(tracker, "run", None)
    return getattr(run, "id", None)


# ----------------------------------------------------------------------------------------------------
# The loop


def _restore(resume, parts, scaler, extras):
    """Load a resume state into the parts, their optimizers, the scaler and `extras` (the RNGs are set
    once the resumed epoch's loader has started: see `train`)."""
    for i, part in enumerate(parts):
        part.module.load_state_dict(resume["model" if i == 0 else part.name])
        part.optimizer.load_state_dict(resume["optimizer" if i == 0 else f"{part.name}_optimizer"])
    if resume.get("scaler"):
        scaler.load_state_dict(resume["scaler"])
    for name, obj in extras.items():
        if resume.get(name) is not None:
            obj.load_state_dict(resume[name])


def is_update_step(step, accumulation_steps):
    """Upstream MiniMind's accumulation boundary: the optimizer steps after micro-batch `step` (1-based
    within the epoch) when `(step + 1) % accumulation_steps == 0`, i.e. after micro-batches acc-1,
    2acc-1, ...: the first window holds acc-1 micro-batches. An epoch's micro-batches after its last
    boundary are not applied at the epoch's end: their gradients join the next epoch's first window
    (after the last epoch they are never applied)."""
    return (step + 1) % accumulation_steps == 0


def _optimizer_step(parts, scaler, grad_clip):
    """Unscale, clip each part's trainable gradients to `grad_clip`, step, and clear the gradients."""
    for part in parts:
        scaler.unscale_(part.optimizer)
        torch.nn.utils.clip_grad_norm_([p for p in part.model.parameters() if p.requires_grad], grad_clip)
        scaler.step(part.optimizer)
    scaler.update()
    for part in parts:
        part.optimizer.zero_grad(set_to_none=True)


def train(run, parts, dataset, collate_fn, step_fn, *, run_name, progress_line=supervised_line, schedule=get_lr,
          save_fn=None, extras=None, after_update=None, after_step=None, after_resume=None, evaluation=None):
    """Train `parts` (list of `Part`) on `dataset` for `args.epochs` epochs.

    - `step_fn(batch) -> (loss, metrics)`: one micro-batch (already on the device): `loss` is the
      scalar to minimise (MoE aux loss included where the type counts it); `metrics` an ordered dict
      of floats or 0-d tensors, for the progress line and the tracker.
    - `progress_line(Progress) -> str`; default: the supervised upstream format (`supervised_line`).
    - `schedule(step, total_steps, peak_lr) -> lr`: `get_lr` (supervised) or `annealed_lr` (RL).
    - `save_fn()` writes the weight files (rank 0 only); default: each part's half-precision weights
      to `run.weight_paths()`. The resume state goes to `run.resume_path()` with each part and
      `extras` (name -> object with state_dict/load_state_dict, e.g. SPO's value tracker).
    - `run_name`: the experiment tracker's run name.
    - `after_update(step)` runs after each optimizer step; `after_step(step)` after every micro-step
      (after its update, if any: PPO refreshes its old actor there); `after_resume()` after a resume
      state was loaded into the parts.
    - `evaluation` (`trainer.held_out.Evaluation`, None without a held-out set): evaluated before the first
      step of a fresh run (step 0), after every `--eval_interval` optimizer steps and after the last step;
      its `eval/...` means join that step's record of the metrics stream.

    As upstream: the learning rate follows `schedule` per micro-step; gradients are summed over the
    micro-steps of an accumulation window (each loss divided by `args.accumulation_steps`), clipped
    to `args.grad_clip` and applied at upstream's boundary (`is_update_step`: after micro-batches acc-1,
    2acc-1, ... of each epoch; an epoch's tail joins the next epoch's first window, the last epoch's
    tail is never applied); a progress line every `args.log_interval` steps and at each epoch's last
    step; saves every `args.save_interval` steps and at each epoch's end.

    With `--from_resume 1` the parts, optimizers, scaler, `extras` and RNGs are restored and the
    consumed batches skipped. Resume states always record the last optimizer-step boundary (its epoch,
    step and RNG states): the micro-batches after it (their gradients were not yet applied) are run
    again on resume, so results match an uninterrupted run. A SIGTERM (see `StopSignal`) saves the
    resume state after the current step and raises SystemExit(143).
    """
    args, info, extras = run.args, run.info, extras or {}
    ckpt = run.resume_path()
    resume = load_resume(ckpt, info.world_size) if args.from_resume else None
    tracker = init_tracker(args, run_name, resume)
    scaler = tu.make_grad_scaler(info.device, args.dtype)
    save_fn = save_fn or (lambda: [save_weights(p.model, path) for p, path in zip(parts, run.weight_paths())])
    start_epoch, start_step = 0, 0
    if resume is not None:
        _restore(resume, parts, scaler, extras)
        start_epoch, start_step = resume["epoch"], resume["step"]
        if after_resume is not None:
            after_resume()
    iters = tu.batches_per_epoch(len(dataset), args.batch_size, info.world_size)
    if start_step >= iters:  # the saved epoch was complete
        start_epoch, start_step = start_epoch + 1, 0
    if start_epoch >= args.epochs:
        tu.log(f"Nothing to do: the resume state at {os.path.abspath(ckpt)} is already past epoch {args.epochs}")
        return
    if args.accumulation_steps > 1 and iters < args.accumulation_steps - 1:
        tu.warn(f"--accumulation_steps {args.accumulation_steps} with {iters} steps per epoch: as upstream, the "
                f"optimizer steps after micro-batches {args.accumulation_steps - 1}, {2 * args.accumulation_steps - 1}"
                f", ... of each epoch, so this run never updates the weights")
    autocast = tu.autocast_context(info.device, args.dtype)
    wandb_id = tracker_run_id(tracker)
    run.records = recorder = open_records(run, resume)
    extras = {**extras, "records": recorder}  # its sample and token counts travel in the resume state

    def save(epoch, boundary_step, rng):
        """Weights, and the resume state at the last optimizer boundary (`epoch`, `boundary_step`, the
        RNG states `rng` of that moment)."""
        if tu.is_main_process():
            save_fn()
            further = {key: value for p in parts[1:] for key, value in
                       ((p.name, p.model), (f"{p.name}_optimizer", p.optimizer))}
            global_step = epoch * iters + boundary_step
            save_resume(ckpt, model=parts[0].model, optimizer=parts[0].optimizer, scaler=scaler, epoch=epoch,
                        step=boundary_step, world_size=info.world_size, global_step=global_step,
                        wandb_id=wandb_id, **further, **extras, rng=rng)
            # The metadata file beside each weight just written (and --keep_checkpoints snapshots).
            weight_meta.after_save(vars(args), run.train_type, [p for p in run.weight_paths() if os.path.isfile(p)],
                                   epoch=epoch, step=boundary_step, global_step=global_step)

    def at(epoch, step):  # a boundary: (epoch, step, RNG states), the states only where they are saved
        return epoch, step, rng_states() if tu.is_main_process() else None

    if evaluation is not None:
        recorder.records.write_split(evaluation.split)
        if resume is None:  # the baseline; a resumed run has its records up to the resume step
            baseline = evaluation.evaluate(parts, 0)
            recorder.log_at(0, start_epoch, 0, baseline)
            if tracker is not None:
                tracker.log(baseline)

    run.stop.arm()
    for part in parts:
        part.model.train()
    boundary = None  # (epoch, step, RNG states) of the last optimizer step: where a resume state continues
    for epoch in range(start_epoch, args.epochs):
        skip = start_step if epoch == start_epoch else 0
        loader = tu.make_loader(dataset, args.batch_size, epoch, info, collate_fn, args.num_workers, skip,
                                    seed=tu.run_seed(args))
        if skip:
            tu.log(f"Epoch [{epoch + 1}/{args.epochs}]: skipping the first {skip} steps, starting at step {skip + 1}")
        start_time = time.time()
        batches = iter(loader)  # starting the loader draws a random seed: restore the RNGs after it
        if boundary is None:
            if resume is not None:
                set_rng_states(resume.get("rng"))
            boundary = at(epoch, skip)
        for step, batch in enumerate(batches, start=skip + 1):
            recorder.begin(epoch * iters + step, batch)
            lrs = [schedule(epoch * iters + step, args.epochs * iters, part.learning_rate) for part in parts]
            for part, lr in zip(parts, lrs):
                for group in part.optimizer.param_groups:
                    group["lr"] = lr
            is_boundary = is_update_step(step, args.accumulation_steps)
            with ExitStack() as no_sync:
                if info.distributed and not is_boundary:  # all-reduce gradients once per optimizer step
                    for part in parts:
                        no_sync.enter_context(part.model.no_sync())
                with autocast:
                    loss, metrics = step_fn(tu.to_device(batch, info.device))
                scaler.scale(loss / args.accumulation_steps).backward()
            if is_boundary:
                _optimizer_step(parts, scaler, args.grad_clip)
                if after_update is not None:
                    after_update(step)
            if after_step is not None:
                after_step(step)
            if is_boundary:
                boundary = at(epoch, step)
            recorder.end(epoch, is_boundary)
            global_step = epoch * iters + step
            measured = {}
            if evaluation is not None and (
                    (is_boundary and evaluation.due(updates_done(epoch, step, iters, args.accumulation_steps)))
                    or (epoch == args.epochs - 1 and step == iters)):
                measured = evaluation.evaluate(parts, global_step)

            if step % args.log_interval == 0 or step == iters:
                spent = time.time() - start_time
                eta_min = spent / max(step - skip, 1) * (iters - step) // 60
                loss_value = loss.item()
                metrics = {name: float(value) for name, value in metrics.items()}
                tu.log(progress_line(Progress(epoch, args.epochs, step, iters, loss_value, metrics, lrs, eta_min)))
                # The same names in the run's metrics stream and the tracker.
                named = {"loss": loss_value, **metrics, "lr": lrs[0],
                         **{f"{p.name}_lr": lr for p, lr in zip(parts[1:], lrs[1:])}, **recorder.timings(),
                         **measured}
                recorder.log(epoch, step, named)
                if tracker is not None:
                    tracker.log({**named, "epoch_Time": eta_min})
            elif measured:  # an evaluation at a step without a progress line: a record of its own
                recorder.log(epoch, step, measured)
                if tracker is not None:
                    tracker.log(measured)
            if step % args.save_interval == 0 or step == iters:
                save(*boundary)
            if run.stop.should_stop():
                save(*boundary)
                if info.distributed:
                    dist.barrier()  # the other ranks wait for rank 0's save before tearing down
                tu.log(stopped_message(epoch, args.epochs, step, iters, ckpt, resume_step=boundary[1],
                                       resume_epoch=boundary[0]))
                raise SystemExit(tu.SIGTERM_EXIT)
        start_step = 0
    recorder.close()
    if info.distributed:
        dist.barrier()


def updates_done(epoch, step, iters, accumulation_steps):
    """Optimizer steps taken up to micro-batch `step` (1-based) of `epoch` (0-based), with `iters`
    micro-batches per epoch (`is_update_step`'s boundaries: the same count on resume)."""
    def within(s):  # boundaries among micro-batches 1..s of one epoch: s+1 in 2..s+1 divisible by acc
        return (s + 1) // accumulation_steps - 1 // accumulation_steps
    return epoch * within(iters) + within(step)


def open_records(run, resume):
    """The run's records (`trainer.rules.records`) in --run_dir, or the default folder of a command-line run:
    metrics for every type, the rollout store for RL. Rank 0 writes; a resumed run drops the records
    after its resume state's step and counts on."""
    args = run.args
    run_dir = args.run_dir or default_run_dir(args, run.train_type)
    resume_step = (resume.get("scheduler") or {}).get("global_step") if resume else None
    records = RunRecords(
        run_dir, run.train_type, resume_step=resume_step, rollouts=run.spec.rl, keep_groups=getattr(args, "rollout_groups", -1),
        max_mb=getattr(args, "rollout_max_mb", 2048.0), enabled=tu.is_main_process(),
        meta={"group_size": getattr(args, "num_generations", 1) if run.train_type == "grpo" else 1,
              "reasoning": getattr(args, "reasoning", None), "reward_model_path": getattr(args, "reward_model_path", None)})
    return Recorder(records, run.info.world_size, (resume or {}).get("records"))
