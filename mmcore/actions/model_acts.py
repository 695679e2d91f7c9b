"""Acts of the Models page: chat with a checkpoint, compare several, evaluate them as a job, export one.

Chat, compare and evaluate run a model; export writes a folder. A viewer may only look (the catalogue and
the evaluation results); members and admins act (`mmcore.access.roles.MODEL_ACTIONS`). Each act is one
`core.perform` (role checked before anything runs, one audit row for what ran), answered with a
`core.Outcome` in the acting user's language; `entry` and `user` as in `job_acts`. `python -m mmcore
export` goes through `export` too. Every act that writes checks its target against the write roots first
(`core.write_root`), whichever entry asked.
"""
import os
import subprocess

from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused
from mmcore.base.i18n import t
from mmcore.models import chat_client, eval_jobs, export_job, modelsview
from mmcore.models.export_job import run_export

role = core.role  # the role of a user (None when the roles file cannot be read)


def refusal(user, action):
    """Why `user` may not take the Models page `action`, or None: what the page uses to disable it."""
    return core.refusal(user, action)


def _files(target):
    return {"weight": target.weight, "lora": target.lora}


def chat(user, target, home=None, entry=PAGE):
    """Allow one chat message to `target` (a ChatTarget) and record it; the page then streams the reply."""
    return perform(home, user, "chat", entry, _files(target), lambda: did("success", "", {"allowed": True}))


def compare(user, targets, prompts, settings, home=None, on_answer=None, entry=PAGE):
    """Answer `prompts` with each of `targets` (see `modelsview.compare`); the value is the rows of answers
    and scores. A comparison the chat worker stopped is recorded with its error."""
    request = {"targets": [_files(target) for target in targets], "prompts": len(prompts),
               "reward_model_path": settings.get("reward_model_path")}

    def do():
        try:
            rows = modelsview.compare(targets, prompts, settings, home, on_answer)
        except chat_client.ChatError as exc:
            return did("error", t("models.compare_stopped", error=exc), {"error": str(exc)})
        return did("success", "", {"answered": len(rows)}, rows)
    return perform(home, user, "compare", entry, request, do)


def evaluate(store, user, targets, entries, data_path, settings, entry=PAGE):
    """Launch an evaluation job owned by `user` over `data_path`; the value is (job id, evaluation id)."""
    user = core.acting(user)
    request = {"targets": [_files(target) for target in targets], "data_path": str(data_path),
               "reward_model_path": settings.get("reward_model_path"), "max_samples": settings.get("max_samples")}

    def do():
        try:
            job_id, eval_id = eval_jobs.launch(store, targets, entries, data_path, settings, user=user)
        except (OSError, ValueError, RuntimeError) as exc:
            return refused(t("models.eval.failed", error=exc))
        return did("success", t("models.eval.started", eval_id=eval_id, job_id=job_id),
                   {"job": job_id, "eval_id": eval_id}, (job_id, eval_id))
    return perform(store.home, user, "evaluate", entry, request, do)


def export(user, weight, out_dir, home=None, capture=True, entry=PAGE, **options):
    """Export `weight` to `out_dir` and wait for it (see `mmcore.models.export_job.run_export`; `format`,
    `gguf_type`... among `options`); the value is (exit status, output). An export that fails is recorded
    with its exit status. A folder outside the write roots (`core.write_root`) is refused before anything
    is written."""
    request = {"weight": str(weight), "out_dir": str(out_dir), **{k: v for k, v in options.items() if k != "timeout"}}

    def do():
        try:
            folder = core.write_root(out_dir, home)
        except core.OutsideRoots as exc:
            return refused(exc.args[0])
        try:
            code, output = run_export(weight, folder, capture=capture, **options)
        except (OSError, subprocess.SubprocessError) as exc:  # it could not run (or ran out of time)
            return refused(t("models.export.failed", folder=folder) + f" ({exc})")
        message = t("models.export.done" if code == 0 else "models.export.failed", folder=folder)
        return did("success" if code == 0 else "error", message, {"exit_code": code}, (code, output))
    return perform(home, user, "export", entry, request, do)


def launch_export(store, user, weight, out_dir, entry=PAGE, **options):
    """Queue the export of `weight` to `out_dir` as a job owned by `user` (progress and log on Jobs, so a
    large model never blocks the page); the value is the job id. A folder outside the write roots is
    refused: no job is queued."""
    user = core.acting(user)
    request = {"weight": str(weight), "out_dir": str(out_dir), "job": True, **options}

    def do():
        try:
            folder = core.write_root(out_dir, store.home)
        except core.OutsideRoots as exc:
            return refused(exc.args[0])
        try:
            job_id = export_job.launch(store, weight, folder, user=user, **options)
        except (OSError, ValueError) as exc:
            return refused(t("models.export.failed", folder=folder) + f" ({exc})")
        return did("success", t("models.export.started", job_id=job_id, folder=folder), {"job": job_id}, job_id)
    return perform(store.home, user, "export", entry, request, do)


def import_weight(user, source, out_prefix, home=None, entry=PAGE):
    """Import `source` (a Llama-format folder or a MiniMind .pth) as the weight file `{out_prefix}_{hidden}.pth`
    that the Train page starts from; the value is (exit status, output). Recorded as an "export" act (it
    writes a model file, the same members' right), its request saying it is an import."""
    request = {"import": str(source), "out_prefix": str(out_prefix)}

    def do():
        # the file written is `{out_prefix}_{hidden}.pth`, beside the prefix: check a name of that shape, and
        # hand the importer the prefix resolved as checked (it runs in the repository root)
        name = os.path.basename(str(out_prefix))
        try:
            prefix = core.write_root(f"{out_prefix}_0.pth" if name else "", home).with_name(name)
        except core.OutsideRoots as exc:
            return refused(exc.args[0])
        try:
            code, output = export_job.run_import(source, prefix)
        except (OSError, subprocess.SubprocessError) as exc:
            return refused(t("models.import.failed", error=exc))
        if code != 0:
            return did("error", t("models.import.failed", error=output.splitlines()[-1] if output else code),
                       {"exit_code": code}, (code, output))
        return did("success", t("models.import.done", output=output.splitlines()[-1]), {"exit_code": 0}, (code, output))
    return perform(home, user, "export", entry, request, do)
