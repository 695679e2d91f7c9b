"""A training run's SIGTERM handling: finish the current step, save the resume state, say how to go on.

`trainer.loop.start` installs a `StopSignal` before anything else; `trainer.loop.train` arms it when
training starts, asks `should_stop()` after each step and prints `stopped_message` before it exits.
"""
import os
import signal

import torch
import torch.distributed as dist

from trainer import trainer_utils as tu


class StopSignal:
    """SIGTERM handling for a training loop.

    Before `arm()` a SIGTERM exits at once with status 143 (there is nothing to save yet). After it,
    the handler only sets a flag; the loop calls `should_stop()` after each step, saves its resume
    state, prints `stopped_message` and exits with `SIGTERM_EXIT`. Under torchrun every rank takes
    part in `should_stop()` (an all-reduce), so all ranks stop after the same step.
    """

    def __init__(self):
        self.requested = False
        self.armed = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame):
        if not self.armed:
            raise SystemExit(tu.SIGTERM_EXIT)
        self.requested = True

    def arm(self):
        """From now on, a SIGTERM lets the current step finish."""
        self.armed = True

    def should_stop(self):
        """True when any process got a SIGTERM (collective under torchrun: call it on every rank)."""
        if dist.is_available() and dist.is_initialized():
            device = "cuda" if dist.get_backend() == "nccl" else "cpu"
            flag = torch.tensor([1.0 if self.requested else 0.0], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            return bool(flag.item())
        return self.requested


def stopped_message(epoch, epochs, step, iters, path, resume_step=None, resume_epoch=None):
    """The line printed when a run stops on SIGTERM: where it stopped and how to go on.

    `resume_step` (of `resume_epoch`, 0-based, default `epoch`), when it differs from `step`, is where
    the resume state continues: the last optimizer step under gradient accumulation, which may lie in
    the previous epoch (an epoch's last micro-batches join the next epoch's first window)."""
    resume_epoch = epoch if resume_epoch is None else resume_epoch
    if resume_step is None or (resume_epoch, resume_step) == (epoch, step):
        where = ""
    elif resume_epoch == epoch:
        where = f" (resumes after step {resume_step})"
    else:
        where = f" (resumes after epoch {resume_epoch + 1} step {resume_step})"
    return (f"Stopped by SIGTERM at epoch {epoch + 1}/{epochs}, step {step}/{iters}{where}; resume state saved to "
            f"{os.path.abspath(path)}. Run the same command with --from_resume 1 to continue.")
