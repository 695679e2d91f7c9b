"""A job's paths against the allowed roots: its path options, and the files it would write.

The rules meet here: the options' kinds (trainer/rules/args.py), the files a type writes
(trainer/rules/specs.py) and the roots (trainer/rules/roots.py). The dashboard checks a job with
`path_errors` before launching it, a trainer the dashboard started checks itself again at its start
(trainer/rules/parsing.py).
"""
from pathlib import Path

from trainer.rules import specs
from trainer.rules.args import ARGS
from trainer.rules.messages import message
from trainer.rules.roots import TRAINER_DIR, resolved, skip_path


def path_errors(train_type, values, roots, base=TRAINER_DIR):
    """{option: message} for every path option of `values` outside `roots`, and for written files
    (weights, resume state) that a symlink would send outside the write roots."""
    errors = {}
    for arg in ARGS[train_type]:
        if arg.kind not in ("read", "write") or arg.name not in values or skip_path(arg, values[arg.name]):
            continue
        why = roots.problem(values[arg.name], arg.kind, base)
        if why:
            errors[arg.name] = why
    if errors:
        return errors
    spec = specs.spec(train_type)
    try:
        full = {**spec.defaults(), **{k: v for k, v in values.items() if v is not None}}
        name_field = "lora_name" if spec.lora else "save_weight"  # the option that names the files
        written = [Path(full["save_dir"]) / f for f in spec.weight_files(full)]
        written.append(Path(specs.CHECKPOINT_DIR) / spec.resume_file(full))
    except (KeyError, TypeError, ValueError):
        return errors  # an invalid option: reported as such
    for path in written:
        if not roots.allows(resolved(path, base), "write"):
            errors.setdefault(name_field, message("field.symlink_out", path=str(path), target=str(resolved(path, base))))
    return errors
