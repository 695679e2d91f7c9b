"""Acts on a run's records: score its stored responses again with a second reward (`mmcore.runs.rescore`),
now (`rescore`) or as a queued job with progress on Jobs (`queue_rescore`, what the Logs page does), and
export its training prompts for the next run (`export_prompts`, `mmcore.runs.prompt_record`).

One `core.perform` each (role checked, act run, one audit row), answered with a `core.Outcome` in the
acting user's language; `entry` and `user` as in `job_acts`. Rescoring adds columns to a run's rollout
store (nothing stored is changed or lost), a member's act. Both rescores check first, whichever entry asked,
that the run's folder lies in a write root (`core.write_root`), a reward-model folder in a read root, and that
the reward and the name can be used: a refusal writes and queues nothing. An export is a member's act too,
which writes only a new file inside the write roots.
"""
import os

from mmcore.access import dashboard_roots
from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused
from mmcore.base.i18n import t
from mmcore.models import rescore_job
from mmcore.runs import prompt_record
from mmcore.runs import rescore as rescoring


def rescore_refusal(user=None):
    """Why `user` may not rescore a run (a viewer), or None: what the Logs page asks to disable its button."""
    return core.refusal(user, "rescore")


def rescore(run_dir, reward, name=None, user=None, entry=PAGE, home=None, progress=None):
    """Score every stored response of the run in `run_dir` with `reward` (rule, format, py:MODULE:FUNCTION, or a
    reward-model folder, scored in a child process) under `name`, and wait; the value is `rescoring.rescore`'s
    summary. `progress(done, total)` as there."""
    request = {"run_dir": str(run_dir), "reward": str(reward), "name": name}

    def do():
        if why := _refusal(run_dir, reward, home):
            return why
        try:
            summary = rescoring.rescore(run_dir, reward, name=name, progress=progress)
        except rescoring.RescoreError as exc:
            return refused(str(exc))
        return did("success", t("rescore.done", name=summary["name"], responses=summary["responses"],
                                steps=summary["steps"]),
                   {key: summary[key] for key in ("name", "responses", "steps")}, summary)
    return perform(home, user, "rescore", entry, request, do)


def queue_rescore(store, run_dir, reward, name=None, user=None, entry=PAGE):
    """Queue the rescore of the run in `run_dir` with `reward` (rule, format, py:MODULE:FUNCTION or a
    reward-model folder) under `name` as a job owned by `user` in the small-job lane (progress and log on
    Jobs; a reward model loads in the job's process); the value is the job id."""
    user = core.acting(user)
    request = {"run_dir": str(run_dir), "reward": str(reward), "name": name, "job": True}

    def do():
        if why := _refusal(run_dir, reward, store.home):
            return why
        try:
            job_id, recorded = rescore_job.launch(store, run_dir, reward, name=name, user=user)
        except (rescoring.RescoreError, OSError, ValueError) as exc:
            return refused(str(exc))
        return did("success", t("rescore.queued", job_id=job_id, name=recorded), {"job": job_id, "name": recorded},
                   job_id)
    return perform(store.home, user, "rescore", entry, request, do)


def _refusal(run_dir, reward, home):
    """The refusal of a rescore whose run folder is outside the write roots, or whose reward-model folder is
    outside the read roots; None when both may be used."""
    try:
        core.write_root(run_dir, home)
    except core.OutsideRoots as exc:
        return refused(exc.args[0])
    if rescoring.is_folder(reward) and os.path.isdir(str(reward).strip()):
        if problem := dashboard_roots.current(home).problem(str(reward).strip(), "read", base=os.getcwd()):
            return refused(problem)
    return None


def export_prompts(run_dir, path, keep=("learnable",), user=None, entry=PAGE, home=None, base=None):
    """Write the training prompts of the run in `run_dir` whose flag is in `keep` (`prompt_record.FLAGS`)
    as an RLAIF file at `path` (a new file, relative to `base`, default the working directory), for the
    next run; the value is the number of rows written. A path outside the write roots (`core.write_root`),
    an existing file or a missing folder is refused before anything is written."""
    request = {"run_dir": str(run_dir), "path": str(path), "keep": list(keep)}

    def do():
        unknown = [flag for flag in keep if flag not in prompt_record.FLAGS]
        if unknown:
            return refused(t("prompts.export.bad_flag", flags=", ".join(prompt_record.FLAGS), got=", ".join(unknown)))
        try:
            target = core.write_root(path, home, base)
        except core.OutsideRoots as exc:
            return refused(exc.args[0])
        if problem := prompt_record.export_error(target):
            return refused(problem)
        try:
            table = prompt_record.prompts(run_dir)
            written = prompt_record.export(table[table["flag"].isin(list(keep))], target)
        except prompt_record.NoPromptRecord as exc:
            return refused(str(exc))
        except OSError as exc:  # the folder went away or filled up: the "x" open wrote nothing or failed
            return refused(t("prompts.export.failed", path=str(target), error=exc))
        return did("success", t("prompts.export.done", n=written, flags=", ".join(keep), path=str(target)),
                   {"path": str(target), "rows": written}, written)
    return perform(home, user, "prompts_export", entry, request, do)
