"""What the Models page shows and does, without Streamlit and without torch.

- `catalogue_rows`: the catalogue table's rows (with links to the job that wrote each file);
- `chat_targets`: what can be chatted with: each full weight, and each LoRA on its base weight;
- `load_prompts`: prompts with reference answers from an RLAIF/SFT jsonl file (the last assistant turn
  is the reference, the turns before it the prompt);
- `compare`: several checkpoints answer the same prompts with the same seed and sampling settings,
  each answer scored by the chat worker with the training rewards;
- `export_folder`: where an export from the page goes (a plain name under `out/hf/`); `import_paths`:
  what an import reads and the weight prefix it writes under `out/`;
- `data_file`, `reward_model_folder`: the paths typed on the page, checked against the folders a job may
  read (trainer/rules/roots.py) as the workers will open them (relative to the repository).
"""
import datetime
import json
import re
from dataclasses import dataclass
from pathlib import Path

from dataset import formats  # torch-free
from mmcore.base import i18n
from mmcore.base.i18n import MessageError, message, t
from mmcore.base.paths import ROOT
from mmcore.base.regular_file import open_regular
from mmcore.models import catalogue, chat_client
from mmcore.train import preflight, train_types
from trainer.rules import roots as trainer_roots
from trainer.rules import specs, weight_meta

EXPORT_ROOT = ROOT / "out" / "hf"
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class ChatTarget:
    """One thing to chat with: a full weight file, or a LoRA file applied to its base weight."""
    label: str
    weight: str
    lora: str | None = None
    tokenizer_path: str | None = None
    train_type: str | None = None

    def payload(self):
        return {"weight": self.weight, "lora": self.lora, "tokenizer_path": self.tokenizer_path}


def _time(ts):
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def size_label(entry):
    """A weight's shape in words: "hidden 64 · 2 layers" ("?" where its file does not tell)."""
    if entry.hidden_size is None:
        return "?"
    layers = "?" if entry.num_hidden_layers is None else entry.num_hidden_layers
    size = t("models.size.value", hidden=entry.hidden_size, layers=layers)
    return t("models.size.moe", size=size) if entry.use_moe else size


def _type_label(train_type):
    known = train_types.TYPES.get(train_type)
    return known.short_label if known else train_type or ""


def _kind_label(kind):
    key = f"models.kind.{kind}"
    return t(key) if key in i18n.table(i18n.DEFAULT) else kind


def catalogue_rows(entries):
    """One dict per weight file, for st.dataframe (the Job column is a link to the Jobs page), in the
    viewer's language; what a file does not tell is an empty cell (the grid would write "None")."""
    return [{
        "File": e.label, "Type": _type_label(e.train_type), "Kind": _kind_label(e.kind), "Size": size_label(e),
        "Job": f"/jobs?job={e.job_id}" if e.job_id is not None else "",
        "Logs": f"/logs?job={e.job_id}" if e.job_id is not None else "",
        "Step": "" if e.step is None else str(e.step), "Saved": _time(e.saved_at),
        "File size": catalogue.human_size(e.size_bytes),
        "Tokenizer": e.tokenizer_fingerprint or "",
    } for e in entries]


def chat_targets(entries):
    """{label: ChatTarget} of every full weight and every LoRA whose base weight is known, newest first."""
    targets = {}
    for e in entries:
        if e.chattable:
            targets[e.label] = ChatTarget(e.label, e.path, None, e.tokenizer_path, e.train_type)
        elif e.kind == "lora":
            base = catalogue.lora_base(e, entries)
            if base:
                label = f"{e.label} on {Path(base).name}"
                targets[label] = ChatTarget(label, base, e.path, e.tokenizer_path, "lora")
    return targets


def default_reasoning(target):
    """Reasoning on for the types trained to think first (reasoning distill and the RL types)."""
    return target.train_type in ("distill_reason", "grpo", "spo", "ppo")


def compare_defaults(targets):
    """The newest RL-trained checkpoint and the weight it started from (its metadata's base, else the
    type's rule: `reason` beside it), when both can be chatted with; else the two newest targets."""
    by_weight = {t.weight: label for label, t in targets.items() if t.lora is None}
    for label, target in targets.items():
        if target.train_type in ("grpo", "spo", "ppo") and target.lora is None:
            meta_base = weight_meta.read_meta(target.weight) or {}
            name = Path(target.weight).name
            sibling = str(Path(target.weight).with_name(re.sub(r"^.+?(_\d+(_moe)?\.pth)$", r"reason\1", name)))
            base = by_weight.get(meta_base.get("base_weight") or "") or by_weight.get(sibling)
            if base and base != label:
                return [label, base]
    return list(targets)[:2]


def load_prompts(path, limit=20):
    """[{"messages", "reference"}] of the first `limit` usable records of an RLAIF/SFT jsonl file.

    Raises ValueError naming the file and line for a line that is not a conversation (or too long or too deep
    to read: a row is never read whole past `formats.MAX_ROW_BYTES`).
    """
    prompts = []
    with open_regular(path) as f:
        for number, (raw, size) in enumerate(formats.lines_within(f), 1):
            if not raw.strip():
                continue
            if problem := formats.row_problem(raw, size):
                raise ValueError(f"{path}, line {number}: {problem}")
            try:
                turns = json.loads(raw)["conversations"]
                roles = [t["role"] for t in turns]
                [str(t["content"]) for t in turns]
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{path}, line {number}: not an RLAIF/SFT record "
                                 f"({{\"conversations\": [{{\"role\", \"content\"}}, ...]}})") from None
            if "assistant" not in roles[1:]:
                continue
            last = len(roles) - 1 - roles[::-1].index("assistant")
            prompts.append({"messages": turns[:last], "reference": str(turns[last]["content"])})
            if len(prompts) >= limit:
                break
    return prompts


def prompts_from_text(text):
    """One prompt per non-empty line (no reference answer: answers are not scored against one)."""
    return [{"messages": [{"role": "user", "content": line.strip()}], "reference": None}
            for line in text.splitlines() if line.strip()]


def compare(targets, prompts, settings, home=None, on_answer=None):
    """Each target answers each prompt with the same `settings` (system, temperature, top_p,
    max_new_tokens, reasoning, seed, reward_model_path). Returns rows [{"prompt", "reference",
    "answers": {label: {"text", "rewards", "tokens"}}}]; `on_answer(done, total)` reports progress."""
    rows, total, done = [], len(targets) * len(prompts), 0
    for p in prompts:
        row = {"prompt": p["messages"][-1]["content"] if p["messages"] else "", "reference": p["reference"],
               "answers": {}}
        for target in targets:
            payload = {**target.payload(), **settings, "messages": p["messages"], "reference": p["reference"]}
            result = chat_client.reply(payload, home)
            row["answers"][target.label] = {"text": result["text"], "rewards": result.get("rewards"),
                                            "tokens": len(result["ids"])}
            done += 1
            if on_answer:
                on_answer(done, total)
        rows.append(row)
    return rows


def compare_summary(rows, labels):
    """Per target: mean total reward, mean format reward, accuracy (rule reward 1) and mean length."""
    summary = []
    for label in labels:
        answers = [r["answers"][label] for r in rows if label in r["answers"]]
        scored = [a["rewards"] for a in answers if a["rewards"]]

        def mean(values):
            values = [v for v in values if v is not None]
            return sum(values) / len(values) if values else None
        summary.append({"Checkpoint": label, "Mean reward": mean([s["total"] for s in scored]),
                        "Format": mean([s["format"] for s in scored]),
                        "Accuracy": mean([s.get("correct", s["rule"]) for s in scored]),
                        "Mean length (tokens)": mean([a["tokens"] for a in answers])})
    return summary


EVAL_METRICS = ("accuracy", "mean_reward", "format_rate", "mean_length")


def scoring_note(reasoning, reward_model=None):
    """What the scores beside compared answers are (the RL trainers' rewards under these settings): with
    reasoning, a plain answer scores 0 however right it is, since only the `<answer>` part is read."""
    key = f"models.scoring.{'reasoning' if reasoning else 'plain'}_{'model' if reward_model else 'rule'}"
    return t(key)


def score_text(scores):
    """"reward 2.50 · format 1.50 · rule 1.00 · 12 tokens" from an answer's scores (missing parts left out), in
    the viewer's language; a reward part keeps its function's name, as the Rollouts view shows it."""
    parts = [t("models.score.reward", value=f"{scores['reward']:.2f}")] if scores.get("reward") is not None else []
    parts += [f"{name} {scores[name]:.2f}" for name in ("format", "rule") if scores.get(name) is not None]
    if scores.get("reward_model") is not None:
        parts.append(t("models.score.reward_model", value=f"{scores['reward_model']:.2f}"))
    if scores.get("length") is not None:
        parts.append(t("models.reply_tokens", n=f"{scores['length']:g}"))  # a count read back as 12.0 shows 12
    if scores.get("correct") is not None and scores.get("rule") is None:  # a reward model decided the reward
        parts.append(t("models.answer_matches") if scores["correct"] else t("models.answer_differs"))
    return " · ".join(parts)


def eval_rows(results):
    """The evaluation results table: one row per (evaluation, checkpoint), newest evaluation first."""
    return [{"Eval": r["eval_id"], "Checkpoint": r["label"], "Run": f"/jobs?job={r['run_job_id']}"
             if r["run_job_id"] is not None else None, "Step": r["step"], "Prompts": r["n"],
             "Accuracy": r["accuracy"], "Format rate": r["format_rate"], "Mean reward": r["mean_reward"],
             "Mean length": r["mean_length"]} for r in sorted(results, key=lambda r: -r["eval_id"])]


def eval_chart_data(results, metric):
    """Rows {"step", metric, "run"} for a chart of `metric` against the training step, one line per run
    (checkpoints without a known step are left out); None when there is nothing to draw."""
    rows = [{"step": r["step"], metric: r[metric],
             "run": f"job {r['run_job_id']}" if r["run_job_id"] is not None else r["label"]}
            for r in results if r["step"] is not None and r[metric] is not None]
    return sorted(rows, key=lambda r: (r["run"], r["step"])) or None


def export_folder(name):
    """The folder an export named `name` goes to (`out/hf/<name>`); for a name that is not plain, a
    ValueError worded in the language of whoever reads it (`MessageError`)."""
    if not _PLAIN_NAME.fullmatch(name or "") or name in (".", ".."):
        raise MessageError(message("models.export.bad_name", most=100, example="grpo_512"))
    return EXPORT_ROOT / name


def import_paths(source_text, name):
    """The Import form's fields -> (source path, weight prefix under out/, problem or None): the source inside
    the folders a job may read, the name plain (the weight becomes `out/<name>_<hidden>.pth`)."""
    problem = trainer_roots.configured().problem(source_text, "read", base=ROOT) if source_text.strip() else \
        t("models.import.no_source")
    source = trainer_roots.resolved(source_text, ROOT)
    if problem is None and not (source.is_dir() or source.is_file()):
        problem = t("models.no_file", path=source_text)
    if problem is None and (not _PLAIN_NAME.fullmatch(name or "") or name in (".", "..")):
        problem = str(message("models.export.bad_name", most=100, example="imported"))
    return source, ROOT / "out" / name, problem


def data_file(text):
    """A prompts file typed on the page -> (absolute path or None, problem or None): inside the folders
    a job may read, and a file."""
    path = trainer_roots.resolved(text, ROOT)
    problem = trainer_roots.configured().problem(text, "read", base=ROOT)
    if problem is None and not path.is_file():
        problem = t("file.not_regular", path=text) if path.exists() and not path.is_dir() else \
            t("models.no_file", path=text)
    return (None if problem else path), problem


def reward_model_folder(text):
    """An optional reward-model folder typed on the page -> (absolute path or None, problem or None):
    inside the folders a job may read, a transformers model, and its own code only where an admin
    allowed it (as GRPO's preflight checks it). Blank: (None, None)."""
    if not text.strip():
        return None, None
    problem = trainer_roots.configured().problem(text, "read", base=ROOT)
    if problem is None:
        found = preflight.reward_model(specs.spec("grpo"), {"reward_model_path": text}, ROOT)
        problem = found[0] if found else None
    return (None, problem) if problem else (str(trainer_roots.resolved(text, ROOT)), None)
