"""Every weight file the runs wrote: what it is, which job and step made it, when, how big.

Weight files are found under the write roots (`out/`, `checkpoints/` by default) and under the save folder of every job in the store. What a file
is comes from, in order: its metadata file (`trainer.rules.weight_meta`), the job whose output it is
(the newest job that started before the file was last written), and its MiniMind file name
(`{name}_{hidden}[_moe][_step{N}].pth`). Nothing here imports torch.
"""
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from mmcore.base.paths import ROOT
from trainer.rules import roots as allowed_roots
from trainer.rules import specs, weight_meta

_NAME = re.compile(r"^(?P<prefix>.+?)_(?P<hidden>\d+)(?P<moe>_moe)?(?:_step(?P<step>\d+))?\.pth$")

#: The training type of a default output prefix (a job's own save_weight is known from the job).
PREFIX_TYPES = {"pretrain": "pretrain", "full_sft": "sft", "dpo": "dpo", "reason": "distill_reason",
                "ppo_actor": "ppo", "ppo_critic": "ppo", "grpo": "grpo", "spo": "spo", "full_dist": "distillation",
                "lora_identity": "lora", "lora_medical": "lora"}


@dataclass
class WeightEntry:
    path: str
    name: str  # the file-name prefix, e.g. "full_sft"
    kind: str  # "full", "lora", "critic" or "snapshot" (a step snapshot kept beside a weight file)
    train_type: str | None
    hidden_size: int | None
    num_hidden_layers: int | None
    use_moe: bool
    size_bytes: int
    saved_at: float
    job_id: int | None = None
    step: int | None = None
    tokenizer_path: str | None = None
    tokenizer_fingerprint: str | None = None
    base_weight: str | None = None
    meta: dict | None = field(default=None, repr=False)

    @property
    def label(self):
        """A short display name: the path relative to the repository when inside it."""
        try:
            return str(Path(self.path).relative_to(ROOT))
        except ValueError:
            return self.path

    @property
    def size_text(self):
        if self.hidden_size is None:
            return "?"
        layers = "?" if self.num_hidden_layers is None else self.num_hidden_layers
        return f"{self.hidden_size}x{layers}{' MoE' if self.use_moe else ''}"

    @property
    def chattable(self):
        """Full weights of a language model (a critic or LoRA-only file needs more to chat)."""
        return self.kind in ("full", "snapshot")


def parse_name(file_name):
    """(prefix, hidden_size, use_moe, step) of a MiniMind weight file name, or None (e.g. a resume file)."""
    if file_name.endswith("_resume.pth"):
        return None
    match = _NAME.match(file_name)
    if not match:
        return None
    return (match["prefix"], int(match["hidden"]), bool(match["moe"]),
            int(match["step"]) if match["step"] else None)


def _job_values(job):
    """The option values a job ran with: its params, typed, over its type's defaults (a job whose folder
    is outside today's roots still wrote its files where it said)."""
    from trainer.rules.args import ARGS
    values = specs.SPECS[job.train_type].defaults()
    for arg in ARGS[job.train_type]:
        raw = (job.params or {}).get(arg.name)
        if raw in (None, ""):
            continue
        try:
            values[arg.name] = str(raw).lower() in ("1", "true") if arg.type is bool else arg.type(raw)
        except (TypeError, ValueError):
            pass  # a value the job could not have run with: its default stands
    return values


def _job_outputs(store):
    """{resolved weight path: [jobs, newest first]} of every job in the store, and the save folders."""
    outputs, folders = {}, set()
    for job in store.list(limit=None) if store is not None else []:
        try:
            values = _job_values(job)
            save_dir = Path(job.cwd or ROOT / "trainer", values["save_dir"]).resolve()
            names = specs.SPECS[job.train_type].weight_files(values)
        except (KeyError, TypeError, ValueError, OSError):
            continue  # a job of another kind (e.g. an evaluation): it writes no weights
        folders.add(save_dir)
        for name in names:
            outputs.setdefault(str(save_dir / name), []).append(job)
    return outputs, folders


def _job_for(jobs, mtime):
    """The newest job that started before the file was last written (the one that wrote it)."""
    for job in jobs:
        started = job.started_at or job.created_at
        if started is not None and started <= mtime + 1:
            return job
    return None


def scan(store=None, roots=None):
    """Every weight file under `roots` (default: the write roots, e.g. out/, and every job's save folder),
    newest first."""
    outputs, folders = _job_outputs(store)
    roots = [Path(r) for r in roots] if roots is not None else [*allowed_roots.configured().write, *sorted(folders)]
    seen, entries = set(), []
    for root in roots:
        if not root.is_dir():
            continue
        for dirpath, _, files in os.walk(root):
            for file_name in files:
                parsed = parse_name(file_name)
                path = os.path.realpath(os.path.join(dirpath, file_name))
                if parsed is None or path in seen:
                    continue
                seen.add(path)
                entry = _entry(path, parsed, outputs, store.path if store is not None else None)
                if entry is not None:
                    entries.append(entry)
    entries.sort(key=lambda e: e.saved_at, reverse=True)
    return entries


def _entry(path, parsed, outputs, store_path=None):
    prefix, hidden, moe, step = parsed
    try:
        st = os.stat(path)
    except OSError:
        return None  # removed while scanning
    meta = weight_meta.read_meta(path)
    snapshot_of = path[: path.rindex("_step")] + ".pth" if step is not None else path
    job = _job_for(outputs.get(snapshot_of, []), st.st_mtime)
    train_type = job.train_type if job else PREFIX_TYPES.get(prefix)
    in_lora_folder = Path(path).parent.name == "lora"
    kind = "lora" if train_type == "lora" or in_lora_folder else "full"
    if prefix.endswith("critic") and not in_lora_folder:
        kind = "critic"
    layers = None
    if job is not None:
        layers = job.params.get("student_num_layers" if job.train_type == "distillation" else "num_hidden_layers")
        try:
            layers = int(layers) if layers not in (None, "") else specs.SPECS[job.train_type].defaults().get(
                "student_num_layers" if job.train_type == "distillation" else "num_hidden_layers")
        except (ValueError, KeyError):
            layers = None
    entry = WeightEntry(path=path, name=prefix, kind="snapshot" if step is not None and kind == "full" else kind,
                        train_type=train_type, hidden_size=hidden, num_hidden_layers=layers, use_moe=moe,
                        size_bytes=st.st_size, saved_at=st.st_mtime, job_id=job.id if job else None, step=step)
    if meta:
        model = meta.get("model") or {}
        tok = meta.get("tokenizer") or {}
        entry.meta = meta
        entry.kind = "snapshot" if step is not None and meta.get("kind") == "full" else meta.get("kind", entry.kind)
        entry.train_type = meta.get("train_type") or entry.train_type
        entry.hidden_size = model.get("hidden_size", entry.hidden_size)
        entry.num_hidden_layers = model.get("num_hidden_layers", entry.num_hidden_layers)
        entry.use_moe = bool(model.get("use_moe", entry.use_moe))
        if meta.get("job_id") is not None and _same_store(meta.get("store"), store_path):
            entry.job_id = meta["job_id"]  # a job id names a job only in the store that recorded it
        entry.step = meta.get("global_step") if meta.get("global_step") is not None else entry.step
        entry.tokenizer_path, entry.tokenizer_fingerprint = tok.get("path"), tok.get("fingerprint")
        entry.base_weight = meta.get("base_weight")
    return entry


def _same_store(recorded, store_path):
    """False when a weight's metadata records another store than the one being listed (metadata written by hand
    or before stores were recorded names none: its job id is taken as it is)."""
    if store_path is None or recorded is None:
        return True
    return os.path.realpath(recorded) == store_path  # JobStore.path is resolved already


def lora_base(entry, entries):
    """The full weight a LoRA file adapts: its recorded base, else the newest `full_sft` of its size."""
    if entry.base_weight and os.path.isfile(entry.base_weight):
        return entry.base_weight
    same_size = [e for e in entries if e.kind == "full" and e.hidden_size == entry.hidden_size and not e.use_moe]
    preferred = [e for e in same_size if e.name == "full_sft"] or same_size
    return preferred[0].path if preferred else None


def human_size(n):
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
