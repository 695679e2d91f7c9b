"""A trainer's command line, parsed and checked: what each training script calls first.

The options and their bounds are trainer/rules/args.py's (`build_parser`), the model's combinations
`args.cross_errors`, and, when the dashboard started the job, its paths against the allowed folders
(trainer/rules/job_paths.py, trainer/rules/roots.py).
"""
import os

from trainer.rules import lifeline, roots
from trainer.rules.args import AUTO_DEVICE, build_parser, cross_errors
from trainer.rules.job_paths import path_errors


def parse_args(train_type, argv=None, *, cuda_available=None):
    """Parse a trainer's command line and resolve the machine-dependent device default: `--device auto`
    (the default) becomes cuda:0 when `cuda_available()` (a trainer passes `torch.cuda.is_available`:
    the rules never import torch), else cpu.

    Exits with a usage error for a combination the model cannot build, and, when the dashboard
    started the job (see trainer/rules/roots.py), for a path outside the allowed folders.
    """
    lifeline.tie_to_parent()  # a job the dashboard started ends (and saves) when its launcher dies
    parser = build_parser(train_type)
    args = parser.parse_args(argv)
    errors = cross_errors(train_type, vars(args))
    enforced = roots.enforced()
    if enforced is not None and not errors:
        errors = path_errors(train_type, vars(args), enforced, base=os.getcwd())
    if errors:
        parser.error("; ".join(f"--{name} {message}" for name, message in errors.items()))
    if args.device == AUTO_DEVICE:
        if cuda_available is None:
            raise TypeError("parse_args needs cuda_available to resolve --device auto")
        args.device = "cuda:0" if cuda_available() else "cpu"
    return args
