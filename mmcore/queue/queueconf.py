"""Settings of the queue and the backends: `<home>/queue.json`, with environment overrides.

Every key is optional; a missing or unreadable file means the defaults. `MINIMIND_CPU_SLOTS`
overrides `cpu_slots`, `MINIMIND_BACKEND` overrides `default_backend`. Admins change the file (the
Jobs page's queue settings write it through `save`).
"""
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from mmcore.base import paths
from mmcore.base import regular_file
from mmcore.base.i18n import MessageError, message

FILE_NAME = "queue.json"
CPU_SLOTS_ENV = "MINIMIND_CPU_SLOTS"
BACKEND_ENV = "MINIMIND_BACKEND"
BACKENDS = ("local", "slurm")
# Message keys of the settings' labels on the Jobs page (the port is not on the page).
LABELS = {"cpu_slots": "queue.cpu_slots", "foreign_memory_mib": "queue.foreign", "default_backend": "queue.default_backend",
          "slurm_partition": "queue.slurm_partition", "slurm_account": "queue.slurm_account",
          "slurm_time": "queue.slurm_time", "slurm_nodes": "queue.slurm_nodes", "slurm_gpus_per_node": "queue.slurm_gpus",
          "slurm_tasks_per_node": "queue.slurm_tasks", "slurm_cpus_per_task": "queue.slurm_cpus"}


def default_cpu_slots():
    """CPU jobs that may run at once: one per 4 cores, at least one.

    A trainer's torch uses every core it is given, so two CPU trainers on a small machine only
    slow each other down.
    """
    return max(1, (os.cpu_count() or 1) // 4)


@dataclass
class QueueSettings:
    cpu_slots: int = 0  # 0: default_cpu_slots()
    # A GPU is busy when a process not started by the dashboard uses more than this much memory.
    foreign_memory_mib: int = 1024
    default_backend: str = "local"
    # Slurm: where and how jobs are submitted (empty = the cluster's default).
    slurm_partition: str = ""
    slurm_account: str = ""
    slurm_time: str = ""  # e.g. "2:00:00"
    slurm_nodes: int = 1
    slurm_tasks_per_node: int = 1  # torchrun agents per node (1 = one per node, the usual)
    slurm_gpus_per_node: int = 0
    slurm_cpus_per_task: int = 0  # 0: not given
    slurm_rdzv_port: int = 29500  # c10d rendezvous port on the first node (plus job id % 1000)

    def effective_cpu_slots(self):
        return self.cpu_slots if self.cpu_slots > 0 else default_cpu_slots()

    def problems(self):
        """What is wrong with these values, as messages worded when shown (each naming the field by its
        label on the Jobs page's queue settings); [] when nothing is."""
        found = []

        def bad(rule, name, **values):
            label = message(LABELS[name]) if name in LABELS else name
            found.append(message(f"queue.error.{rule}", name=name, label=label, **values))
        if self.default_backend not in BACKENDS:
            bad("one_of", "default_backend", choices=", ".join(BACKENDS), got=repr(self.default_backend))
        for name in ("cpu_slots", "foreign_memory_mib", "slurm_gpus_per_node", "slurm_cpus_per_task"):
            if getattr(self, name) < 0:
                bad("at_least", name, n=0)
        for name in ("slurm_nodes", "slurm_tasks_per_node"):
            if getattr(self, name) < 1:
                bad("at_least", name, n=1)
        if not 1 <= self.slurm_rdzv_port <= 64535:
            bad("port", "slurm_rdzv_port")
        for name in ("slurm_partition", "slurm_account", "slurm_time"):
            value = getattr(self, name)
            if value and not all(c.isalnum() or c in "-_.:," for c in value):
                bad("characters", name)
        return found


def _coerce(name, kind, value):
    if kind is int or kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"{name} must be a whole number")
        return int(value)
    return str(value)


def path(home):
    return Path(home) / FILE_NAME


def load(home):
    """The settings of the dashboard whose store lives in `home`, environment overrides applied."""
    values = {}
    try:
        raw = json.loads(regular_file.read_text(path(home)))
        if isinstance(raw, dict):
            values = raw
    except (OSError, ValueError):
        pass
    settings = QueueSettings()
    for f in fields(QueueSettings):
        if f.name in values:
            try:
                setattr(settings, f.name, _coerce(f.name, f.type, values[f.name]))
            except ValueError:
                pass  # a bad value in the file keeps the default
    slots = os.environ.get(CPU_SLOTS_ENV, "").strip()
    if slots.isdigit() and int(slots) > 0:
        settings.cpu_slots = int(slots)
    backend = os.environ.get(BACKEND_ENV, "").strip()
    if backend in BACKENDS:
        settings.default_backend = backend
    return settings


def save(home, settings):
    """Write settings (atomically). Invalid ones raise `MessageError` (a ValueError worded in the
    language of whoever reads it) listing every problem, and nothing is written."""
    problems = settings.problems()
    if problems:
        raise MessageError(problems)
    target = path(home)
    tmp = target.with_suffix(".tmp")
    paths.private_dir(target.parent)
    tmp.write_text(json.dumps(asdict(settings), indent=2))
    paths.private_file(tmp)
    os.replace(tmp, target)
