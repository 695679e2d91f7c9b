"""Where a training job may read and write: allowed root folders, checked the same way everywhere.

The dashboard (its Train page, `mmcore.api`, `python -m mmcore`) checks every path option of a job
against these roots before launching it (`trainer.rules.job_paths.path_errors`), and the jobs it
starts check again at their start (`trainer.rules.parsing.parse_args` does, when
`MINIMIND_WRITE_ROOTS` is set: the dashboard's supervisor sets it), so a path that escapes the roots
is refused with the same message wherever it comes from. Paths are
resolved the way the trainer sees them (relative to trainer/, symlinks followed), so neither `..`
nor a symlink leads outside. A trainer run by hand without those variables checks only names.

Defaults: read roots are the repository's dataset/, out/, checkpoints/, model/ (the tokenizer) and
the upstream default reward-model folder (`../../internlm2-1_8b-reward` seen from trainer/); write
roots are out/, checkpoints/ and the dashboard's records folder. Everything in a write root may be
read. `MINIMIND_READ_ROOTS` / `MINIMIND_WRITE_ROOTS` (folders separated by the OS path separator,
relative ones taken from the repository root) replace the defaults; the dashboard's records folder
stays a write root.
"""
import os
import re
from dataclasses import dataclass
from pathlib import Path

from trainer.rules.messages import message

REPO = Path(__file__).resolve().parents[2]
TRAINER_DIR = REPO / "trainer"
READ_ENV = "MINIMIND_READ_ROOTS"
WRITE_ENV = "MINIMIND_WRITE_ROOTS"
DEFAULT_REWARD_MODEL = "../../internlm2-1_8b-reward"
BUNDLED_TOKENIZER = (REPO / "model").resolve()

#: A plain name (a weight-file prefix, a LoRA name): no folder part, nothing hidden, bounded.
NAME_MAX = 64
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def name_problem(value):
    """Why `value` is not a plain name, or None when it is."""
    if len(value) > NAME_MAX:
        return message("field.name_too_long", n=NAME_MAX)
    if not NAME_RE.fullmatch(value):
        return message("field.plain_name")
    return None


def resolved(path, base=TRAINER_DIR):
    """`path` as the trainer opens it: relative to `base`, with `..` and symlinks resolved."""
    return (Path(base) / os.path.expanduser(str(path))).resolve()


def _from_env(name, default):
    text = os.environ.get(name)
    if not text:
        return default
    return tuple(resolved(p, REPO) for p in text.split(os.pathsep) if p.strip())


@dataclass(frozen=True)
class Roots:
    read: tuple
    write: tuple

    def allows(self, path, kind):
        """True when resolved `path` lies in a root of `kind` ("read": read or write roots; "write")."""
        roots = self.write if kind == "write" else self.read + self.write
        return any(path == root or root in path.parents for root in roots)

    def problem(self, value, kind, base=TRAINER_DIR):
        """Why path `value` is outside the roots of `kind`, or None. Says nothing of whether it exists."""
        if self.allows(resolved(value, base), kind):
            return None
        roots = dict.fromkeys(self.write if kind == "write" else self.read + self.write)  # in order, once each
        return message("field.outside_write" if kind == "write" else "field.outside_read", value=repr(str(value)),
                       roots=", ".join(str(r) for r in roots))

    def env(self):
        """The environment variables that make a trainer enforce these roots."""
        return {READ_ENV: os.pathsep.join(map(str, self.read)), WRITE_ENV: os.pathsep.join(map(str, self.write))}


def default_roots(records_dir=None):
    """The default roots; `records_dir` (the dashboard's records folder) is a write root when given."""
    read = (REPO / "dataset", REPO / "out", REPO / "checkpoints", REPO / "model", resolved(DEFAULT_REWARD_MODEL))
    write = (REPO / "out", REPO / "checkpoints") + ((Path(records_dir).resolve(),) if records_dir else ())
    return Roots(read=tuple(p.resolve() for p in read), write=tuple(p.resolve() for p in write))


def configured(records_dir=None):
    """The roots in force: the environment's when set, else the defaults."""
    base = default_roots(records_dir)
    write = _from_env(WRITE_ENV, base.write)
    if records_dir and Path(records_dir).resolve() not in write:  # the dashboard's own records stay writable
        write += (Path(records_dir).resolve(),)
    read = _from_env(READ_ENV, base.read)
    if BUNDLED_TOKENIZER not in read:  # the bundled tokenizer (--tokenizer_path's default) stays readable
        read += (BUNDLED_TOKENIZER,)
    return Roots(read=read, write=write)


def enforced():
    """The roots a trainer must enforce (set by the dashboard's supervisor), or None when run by hand."""
    if not os.environ.get(WRITE_ENV):
        return None
    return configured()


def skip_path(arg, value):
    """Values of a path option that name no path: empty (the default place) or "none" (rule rewards)."""
    return value in ("", None) or (arg.name == "reward_model_path" and str(value).lower() == "none")


#: Reward-model folders whose own Python code (transformers' trust_remote_code) may run, set by an
#: admin: folders separated by the OS path separator. Default: the upstream reward-model folder only.
TRUSTED_CODE_ENV = "MINIMIND_TRUSTED_REWARD_MODELS"


def trusted_code_dirs():
    text = os.environ.get(TRUSTED_CODE_ENV)
    if text is None:
        return (resolved(DEFAULT_REWARD_MODEL),)
    return tuple(resolved(p, REPO) for p in text.split(os.pathsep) if p.strip())


def trusts_code(folder, base=None):
    """True when the model folder's own code may run: it is (inside) a folder an admin allowed."""
    path = resolved(folder, base or os.getcwd())
    return any(path == d or d in path.parents for d in trusted_code_dirs())
