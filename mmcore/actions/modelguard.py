"""The Models page's actions with the acting user's role checked and every action audited.

Chat, compare and evaluate run a model; export writes a folder. A viewer may only look (the catalogue
and the evaluation results); members and admins may act (`mmcore.access.roles.MODEL_ACTIONS`). Each function
refuses with `roles.Forbidden` (the message says who and why) before anything runs, and records what
it did in the audit trail (`mmcore.access.audit`). `python -m mmcore export` goes through `export` too.
"""
from pathlib import Path

from mmcore.access import audit, roles
from mmcore.base.i18n import t
from mmcore.models import eval_jobs as evaluation
from mmcore.models import modelsview
from mmcore.models.export_job import run_export


def refusal(user, action):
    """Why `user` may not take the Models page `action`, or None: what the page uses to disable it."""
    try:
        return roles.refusal(user, action)
    except roles.RolesFileError as exc:
        return t("role.file_unusable", error=exc)


def role(user):
    """The role of `user`, or None when the roles file cannot be read."""
    try:
        return roles.role_of(user)
    except roles.RolesFileError:
        return None


def _require(user, action):
    why = refusal(user, action)
    if why:
        raise roles.Forbidden(why)


def _files(target):
    return {"weight": target.weight, "lora": target.lora}


def chat(user, target, home=None):
    """Allow one chat message to `target` (a ChatTarget) and record it; the page then streams the reply."""
    _require(user, "chat")
    audit.record(user, "chat", None, _files(target), home=home)


def compare(user, targets, prompts, settings, home=None, on_answer=None):
    """`modelsview.compare` as `user`: the rows of answers and scores."""
    _require(user, "compare")
    audit.record(user, "compare", None, {"targets": [_files(t) for t in targets], "prompts": len(prompts),
                                         "reward_model_path": settings.get("reward_model_path")}, home=home)
    return modelsview.compare(targets, prompts, settings, home, on_answer)


def evaluate(store, user, targets, entries, data_path, settings):
    """Launch an evaluation job owned by `user`; returns (job id, evaluation id)."""
    _require(user, "evaluate")
    job_id, eval_id = evaluation.launch(store, targets, entries, data_path, settings, user=user)
    audit.record(user, "evaluate", job_id, {"eval_id": eval_id, "targets": [_files(t) for t in targets],
                                            "data_path": str(data_path),
                                            "reward_model_path": settings.get("reward_model_path")}, home=store.home)
    return job_id, eval_id


def export(user, weight, out_dir, home=None, capture=True, **options):
    """Export `weight` to the transformers folder `out_dir` as `user` (see `mmcore.models.export_job.run_export`);
    returns (exit status, output)."""
    _require(user, "export")
    code, output = run_export(weight, out_dir, capture=capture, **options)
    audit.record(user, "export", None, {"weight": str(weight), "lora": options.get("lora"),
                                        "out_dir": str(Path(out_dir).resolve()), "exit_code": code}, home=home)
    return code, output
