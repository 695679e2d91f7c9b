"""The small metadata file saved beside each weight file: which model, tokenizer, job and step made it.

`{weight}.meta.json` (e.g. `out/full_sft_512.pth.meta.json`) holds the model size, the training type,
the tokenizer's folder and fingerprint, the dashboard job, its owner and job store (`MINIMIND_JOB_ID`,
`MINIMIND_JOB_USER`, `MINIMIND_JOB_STORE`, set by the job supervisor), epoch/step and the time. A resume
state gets one too (`resume_meta`: only who wrote it). The dashboard's model catalogue and preflight read it without
torch; a weight without one (e.g. downloaded from upstream) simply has unknown provenance.
Torch-free: imported by the trainers and by the dashboard.
"""
import hashlib
import json
import os
import time

from trainer.rules.ownership import owner_fields  # the job, owner and store the dashboard's supervisor names
from trainer.rules.regular_file import NotRegularFile, open_regular

META_SUFFIX = ".meta.json"
FORMAT = "minimind-weight-meta/1"

#: The tokenizer bundled with the repository (the trainers' default `--tokenizer_path ../model`).
BUNDLED_TOKENIZER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "model")

_fingerprints = {}


def meta_path(weight_path):
    return f"{weight_path}{META_SUFFIX}"


def tokenizer_fingerprint(folder):
    """A short hash of `folder/tokenizer.json` (vocabulary + merges): equal fingerprints tokenize alike.
    None when the folder has no tokenizer.json."""
    path = os.path.join(folder, "tokenizer.json")
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _fingerprints:
        try:
            with open_regular(path) as f:  # a FIFO would make open() wait for a writer
                data = json.load(f)
        except NotRegularFile:
            return None
        model = data.get("model", {})
        # Only what decides the ids: the vocabulary, the merges and the added tokens.
        canonical = json.dumps([model.get("vocab"), model.get("merges"),
                                [(t.get("id"), t.get("content")) for t in data.get("added_tokens", [])]],
                               sort_keys=True, ensure_ascii=False)
        _fingerprints[key] = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    return _fingerprints[key]


def build_meta(weight_path, *, kind, train_type, hidden_size, num_hidden_layers, use_moe, tokenizer_path=None,
               epoch=None, step=None, global_step=None, base_weight=None, extra=None):
    tokenizer_path = os.path.abspath(tokenizer_path or BUNDLED_TOKENIZER)
    return {
        "format": FORMAT,
        "file": os.path.basename(weight_path),
        "kind": kind,  # "full", "lora" (adapters only) or "critic" (PPO's value model)
        "train_type": train_type,
        "model": {"hidden_size": int(hidden_size), "num_hidden_layers": int(num_hidden_layers),
                  "use_moe": bool(use_moe)},
        "tokenizer": {"path": tokenizer_path, "fingerprint": tokenizer_fingerprint(tokenizer_path)},
        **owner_fields(),  # job_id, user, store
        "epoch": epoch, "step": step, "global_step": global_step,
        "base_weight": os.path.abspath(base_weight) if base_weight else None,
        "saved_at": time.time(),
        **(extra or {}),
    }


def resume_meta(resume_path):
    """The metadata beside a resume state: only who wrote it (the state itself is read with torch)."""
    return {"format": FORMAT, "file": os.path.basename(resume_path), "kind": "resume", **owner_fields(),
            "saved_at": time.time()}


def write_meta(weight_path, meta):
    """Write `meta` beside `weight_path` atomically (temp file + rename)."""
    path = meta_path(weight_path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def read_meta(weight_path):
    """The metadata beside `weight_path`, or None when there is none or it is unreadable."""
    try:
        with open_regular(meta_path(weight_path), "r", encoding="utf-8") as f:  # a FIFO is not waited on
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and meta.get("format") == FORMAT else None


def snapshot_path(weight_path, global_step):
    """`{weight without .pth}_step{N}.pth`: a step snapshot kept beside the weight file."""
    return f"{weight_path[:-len('.pth')] if weight_path.endswith('.pth') else weight_path}_step{global_step}.pth"


def keep_snapshot(weight_path, global_step, keep):
    """Keep the just-saved `weight_path` as the step-`global_step` snapshot and delete all but the newest
    `keep` snapshots of it. The weight file is replaced (not rewritten) on each save, so a hard link to it
    is a stable snapshot that costs no copy; a copy is made where links are not possible."""
    import re
    import shutil
    snap = snapshot_path(weight_path, global_step)
    tmp = f"{snap}.tmp{os.getpid()}"
    try:
        try:
            os.link(weight_path, tmp)
        except OSError:
            shutil.copyfile(weight_path, tmp)
        os.replace(tmp, snap)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    if os.path.exists(meta_path(weight_path)):
        shutil.copyfile(meta_path(weight_path), meta_path(snap))
    folder, base = os.path.split(os.path.abspath(weight_path))
    pattern = re.compile(re.escape(base[:-len(".pth")]) + r"_step(\d+)\.pth$")
    snapshots = sorted((int(m.group(1)), name) for name in os.listdir(folder) if (m := pattern.match(name)))
    for _, name in snapshots[:-keep] if keep > 0 else snapshots:
        for path in (os.path.join(folder, name), meta_path(os.path.join(folder, name))):
            if os.path.exists(path):
                os.remove(path)


def after_save(values, train_type, weight_paths, *, epoch=None, step=None, global_step=None):
    """Write the metadata beside each weight file a trainer just saved and keep its step snapshot when
    `keep_checkpoints` asks for it. `values`: the run's options (e.g. `vars(args)`)."""
    from trainer.rules.specs import spec as spec_of
    from trainer.rules.specs import weight_file
    spec = spec_of(train_type)
    hidden, layers = spec.model_size(values)
    needed, _ = spec.base_weights(values)
    base = (os.path.join(values["weight_dir"], weight_file(needed[0].prefix, needed[0].hidden_size,
                                                           values.get("use_moe")))
            if needed and values.get("weight_dir") else None)
    keep = int(values.get("keep_checkpoints") or 0)
    for path in weight_paths:
        name = os.path.basename(path)
        kind = "lora" if spec.lora else "critic" if "critic" in name else "full"
        write_meta(path, build_meta(path, kind=kind, train_type=train_type, hidden_size=hidden,
                                    num_hidden_layers=layers, use_moe=values.get("use_moe"),
                                    tokenizer_path=values.get("tokenizer_path"), epoch=epoch, step=step,
                                    global_step=global_step, base_weight=base))
        if keep and global_step is not None:
            keep_snapshot(path, global_step, keep)
