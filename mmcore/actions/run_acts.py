"""Acts on a run's records: score its stored responses again with a second reward (`mmcore.runs.rescore`).

One `core.perform` each (role checked, act run, one audit row), answered with a `core.Outcome` in the
acting user's language; `entry` and `user` as in `job_acts`. Rescoring adds columns to a run's rollout
store (nothing stored is changed or lost), a member's act.
"""
from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused
from mmcore.base.i18n import t
from mmcore.runs import rescore as rescoring


def rescore_refusal(user=None):
    """Why `user` may not rescore a run (a viewer), or None: what the Logs page asks to disable its button."""
    return core.refusal(user, "rescore")


def rescore(run_dir, reward, name=None, user=None, entry=PAGE, home=None, progress=None):
    """Score every stored response of the run in `run_dir` with `reward` (rule, format, py:MODULE:FUNCTION)
    under `name`; the value is `rescoring.rescore`'s summary. `progress(done, total)` as there."""
    request = {"run_dir": str(run_dir), "reward": str(reward), "name": name}

    def do():
        try:
            summary = rescoring.rescore(run_dir, reward, name=name, progress=progress)
        except rescoring.RescoreError as exc:
            return refused(str(exc))
        return did("success", t("rescore.done", name=summary["name"], responses=summary["responses"],
                                steps=summary["steps"]),
                   {key: summary[key] for key in ("name", "responses", "steps")}, summary)
    return perform(home, user, "rescore", entry, request, do)
