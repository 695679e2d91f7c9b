"""Pipelines: an ordered list of stages, each a job that starts from the weights the stage before wrote.

`link()` fills each later stage's base weights from the stage before it: `weight_dir` becomes the
previous stage's `save_dir`, and `from_weight` its output name (RL stages start from `reason` or
`full_sft` by the `reasoning` flag, so that flag is set to match). Both show in the stage's
command. `create()` checks every stage first (nothing is queued when one is invalid), then queues
them all: stage k waits (`depends_on`) for stage k-1 to succeed. When a stage fails or is stopped
the queue holds the later ones as `blocked`; `retry()` queues the failed stage again (from scratch
or from its resume state) and releases the held stages behind it.

Templates: "Demo chain" (pretrain -> SFT -> reasoning distill -> GRPO on the bundled demo data,
tiny model, no reward model) and "MiniMind full" (pretrain -> SFT -> DPO -> reasoning distill ->
GRPO at the scripts' own defaults).
"""
import time
from dataclasses import dataclass

from mmcore.base.i18n import t
from mmcore.queue import jobqueue, queueconf, queuetext
from mmcore.train import commandline, file_owners, preflight, train_types
from mmcore.train.preset_table import demo_preset
from trainer.rules import specs  # (torch-free)


class PipelineRefused(ValueError):
    """A pipeline that cannot be queued; `reasons` lists every problem, each naming its stage."""

    def __init__(self, reasons):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


@dataclass(frozen=True)
class Template:
    key: str
    label: str
    types: tuple
    demo: bool  # the demo preset's values (tiny model, bundled data) or the scripts' defaults

    def stages(self):
        """[(train_type, values)] of the template, linked (see `link`)."""
        stages = []
        for train_type in self.types:
            values = dict(demo_preset(train_type)) if self.demo else dict(train_types.defaults(train_type))
            values["device"] = "cpu" if self.demo else values.get("device", "")
            stages.append((train_type, values))
        return link(stages)


TEMPLATES = {
    "demo_chain": Template("demo_chain", "Demo chain", ("pretrain", "sft", "distill_reason", "grpo"), demo=True),
    "minimind_full": Template("minimind_full", "MiniMind full", ("pretrain", "sft", "dpo", "distill_reason", "grpo"),
                              demo=False),
}


def _effective(train_type, values):
    """The stage's values as its script takes them; a field the checks refuse (a save folder outside the
    allowed ones) keeps its given (or default) value here, so the chain is still linked and `check` says
    what is wrong."""
    checked = commandline.check(train_type, values)
    return {**train_types.defaults(train_type), **values, **checked.effective()}


def link(stages):
    """Stages with each later stage's base weights set to the previous stage's output.

    `stages`: [(train_type, values)] in order; returns new value dicts. Raises PipelineRefused
    when a stage cannot start from the one before (another model size, or an RL stage after a
    stage whose output is neither `reason` nor `full_sft`).
    """
    linked, problems = [], []
    for i, (train_type, values) in enumerate(stages):
        values = dict(values)
        if i:
            prev_type, prev_values = linked[-1]
            prev = _effective(prev_type, prev_values)
            prev_spec, spec = specs.spec(prev_type), specs.spec(train_type)
            out = prev_spec.output_name(prev)
            values["weight_dir"] = prev.get("save_dir", values.get("weight_dir", ""))
            if spec.rl:
                if out not in ("reason", "full_sft"):
                    problems.append(t("pipeline.rl_base", n=i + 1, type=t(f"type.{train_type}"), prev=i,
                                      out=repr(out)))
                values["reasoning"] = "1" if out == "reason" else "0"
            elif "from_weight" in train_types.get_type(train_type).names:
                values["from_weight"] = out
            else:
                problems.append(t("pipeline.no_base", n=i + 1, type=t(f"type.{train_type}")))
            now = _effective(train_type, values)
            if prev_spec.model_size(prev)[0] != spec.model_size(now)[0] or prev.get("use_moe") != now.get("use_moe"):
                problems.append(t("pipeline.size", n=i + 1, type=t(f"type.{train_type}"), prev=i))
        linked.append((train_type, values))
    if problems:
        raise PipelineRefused(problems)
    return linked


def check(stages, gpu_count, backend="local"):
    """Problems of every stage, each prefixed with its stage; base weights are checked for the
    first stage only (the others' are written by the stage before)."""
    problems = []
    for i, (train_type, values) in enumerate(stages):
        try:
            checked = commandline.check(train_type, values)
        except KeyError as exc:
            problems.append(t("pipeline.stage_problem", n=i + 1, problem=exc.args[0]))
            continue
        spec = specs.spec(train_type)
        found = preflight.invalid_fields(checked)
        if not found:
            effective = checked.effective()
            found = (preflight.devices(checked, gpu_count) + preflight.data(spec, effective, preflight.TRAINER_DIR)
                     + (preflight.base_weights(spec, effective, preflight.TRAINER_DIR) if i == 0 else [])
                     + preflight.reward_model(spec, effective, preflight.TRAINER_DIR)
                     + preflight.writable_folders(effective, preflight.TRAINER_DIR))
        problems += [t("pipeline.type_problem", n=i + 1, type=t(f"type.{train_type}"), problem=p) for p in found]
    return problems


def commands(stages):
    """The display command of every stage (what the Train page previews), or the error text."""
    shown = []
    for train_type, values in stages:
        try:
            shown.append(commandline.build_command(train_type, values).display)
        except commandline.ValidationError as exc:
            shown.append(t("pipeline.invalid", error=exc))
    return shown


def create(store, name, stages, user=None, backend=None, gpu_count=None, template="", overwrite_others=False):
    """Check and queue every stage; return the pipeline id. Raises PipelineRefused with every reason.
    `overwrite_others`: its stages may write over another user's files (an admin's act)."""
    if not stages:
        raise PipelineRefused(["A pipeline needs at least one stage."])
    stages = link(stages)
    backend = backend or queueconf.load(store.home).default_backend
    if gpu_count is None:
        gpu_count = jobqueue.gpu_count_for(store, backend)
    problems = check(stages, gpu_count, backend)
    if not overwrite_others:  # refused before any stage is queued (`jobqueue.enqueue` checks each again)
        problems += [t("owners.foreign_file", path=f.path, owner=f.user, job=f.job or "?")
                     for train_type, values in stages
                     for f in file_owners.others_files(store, train_type, values, user)]
    if problems:
        raise PipelineRefused(problems)
    with store._write() as conn:
        pipeline_id = conn.execute("INSERT INTO pipelines (name, template, user, created_at) VALUES (?, ?, ?, ?)",
                                   (name or "", template, user or "", time.time())).lastrowid
    previous = None
    for i, (train_type, values) in enumerate(stages):
        cmd = commandline.build_command(train_type, values)
        previous = jobqueue.enqueue(store, train_type, f"{name} · {i + 1} {specs.spec(train_type).short}", values,
                                    cmd, backend=backend, user=user, gpu_count=gpu_count, pipeline_id=pipeline_id,
                                    stage=i, depends_on=previous, overwrite_others=overwrite_others)
    return pipeline_id


@dataclass
class Pipeline:
    id: int
    name: str
    template: str
    user: str
    created_at: float
    stages: list  # the latest job of each stage, in order

    @property
    def status(self):
        """running / queued / blocked / failed / stopped / succeeded, for the pipeline as a whole."""
        states = [j.status for j in self.stages]
        for s in ("running", "failed", "stopped", "lost", "blocked", "queued"):
            if s in states:
                return "queued" if s == "queued" and "succeeded" not in states else s
        return "succeeded"

    @property
    def job_ids(self):
        return [j.id for j in self.stages]


def get(store, pipeline_id):
    """The pipeline with its stages' latest jobs, or None."""
    with store._connect() as conn:
        row = conn.execute("SELECT * FROM pipelines WHERE id = ?", (int(pipeline_id),)).fetchone()
        if row is None:
            return None
        rows = conn.execute("SELECT * FROM jobs WHERE pipeline_id = ? ORDER BY stage, id", (int(pipeline_id),)).fetchall()
    latest = {}
    for r in rows:
        latest[r["stage"]] = store._job(r)  # a retried stage's newest job wins
    return Pipeline(row["id"], row["name"], row["template"], row["user"], row["created_at"],
                    [latest[k] for k in sorted(latest)])


def queued_text(pipeline):
    """What queuing `pipeline` did, in the current language: its jobs and the one that starts first."""
    return queuetext.pipeline_queued_text(pipeline.id, [(j.id, j.train_type) for j in pipeline.stages])


def list_pipelines(store, limit=50):
    """Pipelines newest first."""
    with store._connect() as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM pipelines ORDER BY id DESC LIMIT ?", (int(limit),))]
    return [p for p in (get(store, i) for i in ids) if p is not None]


def retry(store, pipeline_id, resume=False, user=None, overwrite_others=False):
    """Queue the failed (or stopped) stage again and release the stages held behind it; return the
    new job's id. `resume`: continue from the failed stage's resume state instead of from scratch."""
    pipeline = get(store, pipeline_id)
    if pipeline is None:
        raise PipelineRefused([t("queue.no_pipeline", id=pipeline_id)])
    failed = next((j for j in pipeline.stages if j.status in ("failed", "stopped", "lost")), None)
    if failed is None:
        raise PipelineRefused([t("pipeline.nothing_failed", id=pipeline_id)])
    values = dict(failed.params)
    if resume:
        values["from_resume"] = "1"
    before = [j for j in pipeline.stages if j.stage < failed.stage]
    cmd = commandline.build_command(failed.train_type, values)
    suffix = "resume" if resume else "retry"
    new_id = jobqueue.enqueue(store, failed.train_type, f"{failed.name} ({suffix})", values, cmd,
                              backend=failed.backend, user=user or failed.user, pipeline_id=pipeline_id,
                              stage=failed.stage, depends_on=before[-1].id if before else None,
                              overwrite_others=overwrite_others)
    previous = new_id
    for job in pipeline.stages:
        if job.stage > failed.stage and job.status == "blocked":
            store.transition(job.id, "blocked", status="queued", waiting=1, ended_at=None, note=None,
                             depends_on=previous, queue_reason=queuetext.SCHEDULER)
            previous = job.id
    return new_id
