"""The responses behind a reward-hacking finding (`health`, rule `reward_hacking`): those that gained the
most training reward and the least held-out score, what a reader opens first to see what the reward paid for.

`gainers(run_dir, since_step)` reads the run's stored responses from `since_step` on and gives each
- `gain`: its training reward less its prompt's mean training reward when the prompt was first stored;
- `held_out`: its held-out score: the second opinion recorded beside it (the first `rescore/<name>`
  column), else whether its answer is right (`accuracy` as the trainer stored it, else the rule's check);
- `held_out_gain`: that score less its prompt's mean held-out score when the prompt was first stored,
and keeps those that gained training reward with no held-out gain, ordered by `gain - held_out_gain`
(most first), with every stored column of theirs after these. `link(...)` is the URL of the Logs page
opened on them (`GAINERS_PARAM`, `STEP_PARAM` its query parameters); `finding_link` the link after a finding.
"""
import urllib.parse

import pandas as pd

from mmcore.base.i18n import t
from mmcore.runs import rollout_store
from trainer.rules.reward_rules import rule_reward

#: The Logs page's query parameter that opens the Rollouts view on a run's gainers: its value is the run's
#: label on the page (or "1": the one run with rollouts the link charts).
GAINERS_PARAM = "gainers"
STEP_PARAM = "gainers_step"  # the step the finding holds since: gainers are looked for from there on
RESCORE_PREFIX = "rescore/"
LIMIT = 20
COLUMNS = ("step", "group", "sample", "prompt_id", "prompt", "response", "reference", "reward", "gain",
           "held_out", "held_out_gain")


def held_out_signal(columns):
    """The stored column that scores each response apart from its training reward, or None (the rule's check)."""
    rescored = [c for c in columns if c.startswith(RESCORE_PREFIX)]
    if rescored:
        return rescored[0]
    return "accuracy" if "accuracy" in columns else None


def requested(query):
    """(run label, since step or None) that the Logs page's `query` asks the Rollouts view to open on, or None."""
    label = str(query.get(GAINERS_PARAM) or "").strip()
    if not label:
        return None
    try:
        step = int(query.get(STEP_PARAM)) if query.get(STEP_PARAM) not in (None, "") else None
    except (TypeError, ValueError):
        step = None  # a step that is no number: every step
    return label, step


def gainers(run_dir, since_step=None, limit=LIMIT):
    """The responses of steps from `since_step` on (all steps: None) that gained training reward and no
    held-out score, most gained first (see the module docstring); at most `limit`. The frame's
    `attrs["held_out"]` names the held-out score used."""
    frame = rollout_store.read(run_dir)
    signal = held_out_signal(frame.columns)
    if not len(frame):
        empty = pd.DataFrame(columns=list(COLUMNS))
        empty.attrs["held_out"] = signal or "rule"
        return empty
    if signal is None:
        reasoning = rollout_store.meta(run_dir).get("reasoning") or 0
        held = [rule_reward(r, ref, reasoning) for r, ref in zip(frame["response"], frame["reference"])]
    else:
        held = frame[signal]
    frame = frame.assign(held_out=pd.to_numeric(pd.Series(held, index=frame.index), errors="coerce"))
    first_step = frame.groupby("prompt_id")["step"].transform("min")
    first = frame[frame["step"] == first_step].groupby("prompt_id")[["reward", "held_out"]].mean()
    frame = frame.assign(gain=frame["reward"] - frame["prompt_id"].map(first["reward"]),
                         held_out_gain=frame["held_out"] - frame["prompt_id"].map(first["held_out"]))
    if since_step is not None:
        frame = frame[frame["step"] >= int(since_step)]
    kept = frame[(frame["gain"] > 0) & ~(frame["held_out_gain"] > 0)]
    kept = kept.assign(_order=kept["gain"] - kept["held_out_gain"].fillna(0))
    kept = kept.sort_values(["_order", "step"], ascending=[False, False], kind="stable").head(limit)
    out = kept[list(COLUMNS) + [c for c in kept.columns if c not in COLUMNS and c != "_order"]].reset_index(drop=True)
    out.attrs["held_out"] = signal or "rule"
    return out


def link(query, label="1", since_step=None):
    """The Logs page's URL with `query` (the parameters that chart the run: {"job": "12"}, or the page's
    own) that opens its Rollouts view on the gainers of the run named `label` from `since_step` on."""
    params = {k: v for k, v in dict(query).items() if k not in (GAINERS_PARAM, STEP_PARAM)}
    params[GAINERS_PARAM] = label
    if since_step is not None:
        params[STEP_PARAM] = str(int(since_step))
    return "/logs?" + urllib.parse.urlencode(params) + "#rollouts"


def finding_link(finding, query, label="1"):
    """" [Open the responses...](URL)" to put after a `reward_hacking` finding (its gainers one click away
    in the Rollouts view of the Logs page, see `link`); "" after any other finding."""
    if finding.rule != "reward_hacking":
        return ""
    return f" [{t('logs.gainers.open')}]({link(query, label, finding.since_step)})"
