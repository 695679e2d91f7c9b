"""Checks before a launch: what would make a job fail at once, as messages for the user.

Each concern is one function over values that `mmcore.train.commandline.check` parsed once (`CheckedValues`
and its `effective()` values: the value the script will use for every valid option). The rules
of a training type (its data format, the base weights it loads, the files it writes, its reward
model) come from `trainer/rules/specs.py`, the same functions the trainers name their files with.
Relative paths resolve against `trainer_dir`, the jobs' working directory. Nothing is created.
"""
import functools
import json
import os
import random
from pathlib import Path

from dataset import formats  # torch-free
from mmcore.base import i18n
from mmcore.base import regular_file
from mmcore.base.i18n import t
from mmcore.base.paths import TRAINER_DIR
from mmcore.train import commandline, train_types
from trainer.rules import roots as trainer_roots
from trainer.rules import specs, weight_meta
from trainer.rules.args import CPU_DTYPE, PACK_TYPES
from trainer.rules.setup_errors import pack_refusal

#: Lines of the data file that are checked: enough to catch a wrong format, fast on huge files.
DATA_LINES = 50
#: Rows whose token lengths the packing suggestion measures.
PACK_SAMPLE_ROWS = 200
#: Packing is suggested when it would compute at least this many times fewer tokens: below that, the
#: packed rows' masked attention and the length pass over the file at start eat much of the saving.
PACK_MIN_GAIN = 2.0


def run(train_type, values, gpu_count, trainer_dir=TRAINER_DIR):
    """Every problem of submitted values (see `mmcore.train.commandline`); [] when none were found."""
    return problems(commandline.check(train_type, values, trainer_dir), gpu_count, trainer_dir)


def problems(checked, gpu_count, trainer_dir=TRAINER_DIR, pending=frozenset()):
    """Every problem of parsed values, in the order a user fixes them: invalid fields, devices,
    data, base weights, reward model, folders the job writes. `pending`: missing base weights (resolved
    paths) that a queued or running job will write, which the caller reports itself."""
    spec = specs.spec(checked.train_type)
    values = checked.effective()
    return (invalid_fields(checked) + devices(checked, gpu_count) + data(spec, values, trainer_dir)
            + packing(spec, values) + base_weights(spec, values, trainer_dir, pending) + tokenizer(values, trainer_dir)
            + reward_model(spec, values, trainer_dir) + writable_folders(values, trainer_dir))


def warnings(checked, trainer_dir=TRAINER_DIR):
    """Findings that do not stop a launch but deserve a look: a tokenizer other than the base weights',
    short rows that `--pack 1` would pack, a mixed-precision dtype on a CPU job."""
    found = []
    for finding in (tokenizer_mismatch, pack_suggestion):
        try:
            found += finding(specs.spec(checked.train_type), checked.effective(), trainer_dir)
        except (KeyError, OSError, ValueError):
            pass
    return found + cpu_dtype(checked)


def resolve(trainer_dir, path):
    """A path as the trainer sees it: relative paths are relative to its working directory."""
    return Path(os.path.normpath(Path(trainer_dir) / path))


def invalid_fields(checked):
    """One sentence per invalid field: "Epochs (epochs) must be a whole number, got 'x'."."""
    return [t("preflight.invalid_field", label=train_types.field_label(name, checked.train_type), name=name,
              message=i18n.field_error(message)) for name, message in checked.errors.items()]


def devices(checked, gpu_count):
    """More GPUs chosen than exist, or a GPU id this machine does not have."""
    gpus, device = checked.typed["gpus"], checked.typed["device"]
    unit = t("preflight.gpu_unit.one" if gpu_count == 1 else "preflight.gpu_unit.many")
    if len(gpus) > gpu_count:
        return [t("preflight.too_many_gpus", n=len(gpus), count=gpu_count, unit=unit)]
    asked = gpus if len(gpus) >= 2 else []
    if device and device.startswith("cuda:"):
        asked = [int(device.split(":")[1])]
    found = []
    for index in asked:
        if gpu_count == 0:
            found.append(t("preflight.no_gpu", index=index))
        elif index >= gpu_count:
            found.append(t("preflight.gpu_missing", index=index, count=gpu_count, unit=unit, last=gpu_count - 1))
    return found


def data(spec, values, trainer_dir):
    """The data file exists and its first lines are in the type's format."""
    data_path = values.get("data_path")
    if not data_path:
        return []
    path = resolve(trainer_dir, data_path)
    try:
        formats.validate_file(str(path), spec.data_kind, max_lines=DATA_LINES)
    except FileNotFoundError:
        return [t("preflight.data_missing", path=path, value=repr(data_path), folder=trainer_dir)]
    except formats.DataFormatError as e:
        return [t("preflight.data_unusable", type=t(f"type.{spec.key}"), error=e)]
    except OSError as e:
        return [t("preflight.data_unreadable", path=path, error=e.strerror)]
    return []


def packing(spec, values):
    """`--pack 1` where packing cannot be exact (`trainer.rules.setup_errors.pack_refusal`)."""
    if pack_refusal(spec.key, values.get("pack"), values.get("use_moe")):
        return [t("preflight.pack_moe", type=t(f"type.{spec.key}"))]
    return []


def base_weights(spec, values, trainer_dir, pending=frozenset()):
    """The weights the type starts from are in weight_dir (and the choice itself is allowed); a missing
    weight whose resolved path is in `pending` is left to the caller."""
    try:
        _, found = spec.base_weights(values)
    except KeyError:  # an option the rule reads is invalid: that is reported as an invalid field
        return []
    return list(found) + [t("preflight.weight_missing", path=path, why=why)
                          for path, why in missing_base_weights(spec, values, trainer_dir)
                          if path.resolve() not in pending]


def missing_base_weights(spec, values, trainer_dir):
    """[(path, why)] of the weights the type starts from that are not in weight_dir, each path once
    (a student and teacher may share one file); [] when an option the rule reads is invalid."""
    try:
        needed, _ = spec.base_weights(values)
        weight_dir, moe = values["weight_dir"], values["use_moe"]
    except KeyError:
        return []
    missing, seen = [], set()
    for weight in needed:
        path = resolve(trainer_dir, weight_dir) / specs.weight_file(weight.prefix, weight.hidden_size, moe)
        if not path.is_file() and path not in seen:
            seen.add(path)
            missing.append((path, weight.why))
    return missing


def reward_model(spec, values, trainer_dir):
    """The reward model folder (PPO, GRPO, SPO) exists and holds a transformers model."""
    try:
        folder = spec.reward_model_path(values)
    except KeyError:  # reward_model_path is invalid: reported as an invalid field
        return []
    if folder is None:
        return []
    path = resolve(trainer_dir, folder)
    if not path.is_dir():
        return [t("preflight.reward_missing", path=path, value=repr(folder))]
    if not (path / specs.REWARD_MODEL_CONFIG).is_file():
        return [t("preflight.reward_no_config", path=path, config=specs.REWARD_MODEL_CONFIG)]
    try:
        needs_code = "auto_map" in json.loads(regular_file.read_text(path / specs.REWARD_MODEL_CONFIG))
    except (OSError, ValueError):
        needs_code = False  # the trainer reports an unreadable config itself
    if needs_code and not trainer_roots.trusts_code(path, trainer_dir):
        return [t("preflight.reward_untrusted", path=path, env=trainer_roots.TRUSTED_CODE_ENV)]
    return []


def tokenizer(values, trainer_dir):
    """The tokenizer folder holds a tokenizer (tokenizer.json)."""
    folder = values.get("tokenizer_path")
    if not folder:
        return []
    path = resolve(trainer_dir, folder)
    if not (path / "tokenizer.json").is_file():
        return [t("preflight.tokenizer_missing", path=path, value=repr(folder))]
    return []


def tokenizer_mismatch(spec, values, trainer_dir):
    """A base weight whose metadata names a tokenizer other than the chosen one: the model would read
    the wrong token ids (upstream weights need upstream's tokenizer)."""
    folder = values.get("tokenizer_path")
    chosen = weight_meta.tokenizer_fingerprint(str(resolve(trainer_dir, folder))) if folder else None
    if chosen is None:
        return []
    needed, _ = spec.base_weights(values)
    found = []
    for weight in needed:
        path = resolve(trainer_dir, values["weight_dir"]) / specs.weight_file(weight.prefix, weight.hidden_size,
                                                                              values["use_moe"])
        meta = weight_meta.read_meta(str(path)) or {}
        trained = (meta.get("tokenizer") or {}).get("fingerprint")
        if trained and trained != chosen:
            found.append(t("preflight.tokenizer_mismatch", weight=path.name, trained_path=meta["tokenizer"].get("path"),
                           trained=trained, value=repr(folder), chosen=chosen))
    return found


def cpu_dtype(checked):
    """A mixed-precision dtype on a CPU job: the trainer trains in float32 all the same."""
    dtype = checked.typed.get("dtype")
    if checked.typed.get("device") == "cpu" and dtype not in (None, CPU_DTYPE):
        return [t("preflight.cpu_dtype", dtype=dtype, cpu=CPU_DTYPE)]
    return []


def unwritable(folder):
    """Why `folder` cannot be written or created, or None when it can."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return t("preflight.is_a_file", path=existing)
    if not os.access(existing, os.W_OK | os.X_OK):
        return t("preflight.not_writable" if existing == folder else "preflight.cannot_create", path=existing)
    return None


def writable_folders(values, trainer_dir):
    """The job can write its weights (save_dir) and its resume state (../checkpoints)."""
    found = []
    save_dir = values.get("save_dir")
    if save_dir:
        why = unwritable(resolve(trainer_dir, save_dir))
        if why:
            found.append(t("preflight.cannot_save", path=resolve(trainer_dir, save_dir), why=why))
    checkpoints = resolve(trainer_dir, specs.CHECKPOINT_DIR)
    why = unwritable(checkpoints)
    if why:
        found.append(t("preflight.cannot_resume_state", path=checkpoints, why=why))
    return found


def pack_suggestion(spec, values, trainer_dir):
    """`--pack 1` for a type that packs, where the data's rows are short: how full they fill
    max_seq_len and how many times fewer tokens a packed run computes (`pack_gain`, over the token
    lengths of the data file's first PACK_SAMPLE_ROWS rows)."""
    if spec.key not in PACK_TYPES or values.get("pack") or pack_refusal(spec.key, 1, values.get("use_moe")):
        return []
    data_path, tokenizer_path = values.get("data_path"), values.get("tokenizer_path")
    if not data_path or not tokenizer_path:
        return []
    lengths = row_lengths(resolve(trainer_dir, data_path), spec.data_kind, resolve(trainer_dir, tokenizer_path))
    # Pretraining pads MoE batches to max_seq_len, as upstream (the other types that do refuse packing).
    pad_to_max = bool(values.get("use_moe")) and spec.key == "pretrain"
    fill, gain = pack_gain(lengths, values["max_seq_len"], values["batch_size"], pad_to_max)
    if gain < PACK_MIN_GAIN:
        return []
    return [t("preflight.pack_suggestion", fill=f"{fill:.0%}", max_seq_len=values["max_seq_len"], gain=f"{gain:.1f}",
              padding=f"{1 - 1 / gain:.0%}")]


def pack_gain(lengths, max_seq_len, batch_size, pad_to_max=False):
    """(fill, gain) of rows with these token lengths (a DPO row: its longer side): `fill`, the share of
    max_seq_len the rows fill on average (each cut there); `gain`, how many times fewer tokens a packed
    run computes than an unpacked one, whose batches of `batch_size` rows in a shuffled order are each
    padded to their longest row (to max_seq_len with `pad_to_max`). Packed rows are taken as full: best
    fit fills them to within a few percent."""
    cut = [min(int(n), max_seq_len) for n in lengths]
    if not cut or not sum(cut):
        return 0.0, 1.0
    order = random.Random(0).sample(cut, len(cut))
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    computed = sum(len(b) * (max_seq_len if pad_to_max else max(b)) for b in batches)
    return sum(cut) / (len(cut) * max_seq_len), computed / sum(cut)


def row_lengths(path, kind, tokenizer_dir, rows=PACK_SAMPLE_ROWS):
    """Token lengths of the first `rows` valid rows of a data file, untruncated, as the trainers' datasets
    encode them (pretrain: bos and eos added where the text lacks them; chat: the tokenizer's chat
    template; DPO: the longer of chosen and rejected); () for RL prompts or a tokenizer without a
    chat template. Cached per file and tokenizer version."""
    path, tokenizer_dir = Path(path), Path(tokenizer_dir)
    if kind == "rlaif" or not path.is_file() or not (tokenizer_dir / "tokenizer.json").is_file():
        return ()
    stamp = (path.stat().st_mtime_ns, path.stat().st_size, (tokenizer_dir / "tokenizer.json").stat().st_mtime_ns)
    return _row_lengths(str(path), kind, str(tokenizer_dir), rows, stamp)


@functools.lru_cache(maxsize=16)
def _row_lengths(path, kind, tokenizer_dir, rows, stamp):
    encoder = _Encoder(tokenizer_dir)
    if kind != "pretrain" and encoder.template is None:
        return ()
    lengths = []
    with regular_file.open_regular(path) as f:
        for raw in f:
            if len(lengths) >= rows:
                break
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(record, dict) or formats.check_record(record, kind) is not None:
                continue
            if kind == "pretrain":
                lengths.append(encoder.text_length(str(record["text"])))
            elif kind == "dpo":
                lengths.append(max(encoder.chat_length(record["chosen"]), encoder.chat_length(record["rejected"])))
            else:
                lengths.append(encoder.chat_length(record["conversations"]))
    return tuple(lengths)


class _Encoder:
    """Token counts without torch or transformers: the folder's tokenizer.json through `tokenizers`, and its
    chat template rendered as transformers renders one (a sandboxed Jinja environment with `trim_blocks`,
    `lstrip_blocks`, loop controls and a `tojson` filter). tests/test_preflight.py holds the counts equal to
    the trainers' datasets'."""

    def __init__(self, folder):
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
        try:
            config = json.loads(regular_file.read_text(Path(folder) / "tokenizer_config.json"))
        except (OSError, ValueError):
            config = {}
        self.special = {name: value.get("content") if isinstance(value, dict) else value
                        for name, value in config.items() if name.endswith("_token") and value}
        template = config.get("chat_template")
        self.template = None
        if isinstance(template, str):
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=[jinja2.ext.loopcontrols])
            env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: \
                json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
            self.template = env.from_string(template)

    def count(self, text):
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def text_length(self, text):
        bos, eos = self.special.get("bos_token"), self.special.get("eos_token")
        added = (0 if bos and text.startswith(bos) else 1) + (0 if eos and text.rstrip().endswith(eos) else 1)
        return self.count(text) + added

    def chat_length(self, messages):
        text = self.template.render(messages=messages, tools=formats.chat_tools(messages),
                                    add_generation_prompt=False, **self.special)
        return self.count(text)
