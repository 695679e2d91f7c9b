"""One way to change something: may this user do it? Do it. Record it.

Every act of the dashboard (`job_acts`, `queue_acts`, `model_acts`, `view_acts`) is one function built on
`perform`: it checks the acting user's role (`mmcore.access.roles`), runs the act, and records what was
done in the audit trail (`mmcore.access.audit`) as one row of one shape::

    detail = {"entry": "page" | "api" | "cli", "request": {what was asked}, "result": {what came of it}}

and answers with an `Outcome`: the message to show (in the acting user's language), what the act made,
and for a refusal, why. An act that ran leaves exactly one row, even when what it found was already done (a
stop of a job that had ended) or what it ran failed (an export that exited with an error). A refusal (a
role, a rule or a job's state says no) and a failure that changed nothing leave no row in the trail, but
are kept among the refused attempts (`audit.refusals`: who, what, why), which admins see.

No act without its record: the trail is opened and its write lock tried before the act runs; a trail
that cannot be written refuses every act (`Outcome.cause` == AUDIT_DOWN, one clear message) except the
admin's `job_acts.repair_audit`, which keeps the damaged file aside and starts a new trail.

The pages, the widgets, `mmcore.api` and `mmcore.cli` change things only through these acts, and no other
module checks a role or writes to the audit trail; a page that disables a button asks `refusal` here.
"""
import os
from dataclasses import dataclass
from pathlib import Path

from mmcore.access import audit, dashboard_roots, roles
from mmcore.base.i18n import t
from trainer.rules import roots as trainer_roots
from trainer.rules.messages import message

PAGE, API, CLI = audit.ENTRIES  # where an act was asked from: a page, mmcore.api, python -m mmcore
AUDIT_DOWN = "audit_down"  # `Outcome.cause` of an act refused because its record could not be written


@dataclass(frozen=True)
class Outcome:
    """What an act did, for the one who asked: `kind` (success, info, warning or error) and `message`
    (plain text, one line per reason: pages show it with `safetext.md_lines`)."""
    kind: str
    message: str
    value: object = None  # what the act made or found: a new job's id, a pipeline's id, (exit code, output)...
    result: dict | None = None  # what was recorded; None when nothing was done (a refusal, a failure)
    reasons: tuple = ()  # a refusal's reasons, each a sentence (`message` lists them too)
    cause: str = ""  # AUDIT_DOWN when the audit trail could not be written

    @property
    def done(self):
        """The act ran (and is in the audit trail)."""
        return self.result is not None

    @property
    def refused(self):
        """Nothing was done: a role, a rule or a failure said no (`reasons` says why)."""
        return self.result is None


def did(kind, message, result, value=None):
    """The outcome of an act that ran; `result` (a small JSON-able dict) is what the audit trail keeps."""
    return Outcome(kind, message, value, dict(result))


def refused(message, reasons=None, cause=""):
    """A refusal: nothing was done, `message` says why."""
    return Outcome("error", message, reasons=tuple(reasons) if reasons else (message,), cause=cause)


def refused_for(heading, reasons):
    """A refusal for several reasons: `heading`, then one line per reason."""
    return refused(heading + "\n" + "\n".join(f"- {reason}" for reason in reasons), reasons)


#: The longest path an act writes to, and the longest name in it (Linux's PATH_MAX and NAME_MAX): a longer
#: one is refused before anything is written rather than failing half-way.
PATH_MAX, PART_MAX = 4096, 255


class OutsideRoots(ValueError):
    """A path an act would write to that lies outside the write roots (or is no usable path); the message
    (a `Message`: English, and worded for the reader on a page) says which and why."""


def write_root(path, home=None, base=None, roots=None):
    """`path` resolved (relative to `base`, default the working directory; `~`, `..` and symlinks followed,
    as the write will follow them), when it lies inside a write root: the folders a job may write to
    (`mmcore.access.dashboard_roots.current(home)`), or `roots` when given (an act that writes the
    dashboard's own files passes its home). Raises OutsideRoots otherwise, with the message
    `python -m mmcore export` has always given. Every act that writes a path it was given calls this
    before writing anything."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if "\0" in text or not text.strip():
        raise OutsideRoots(message("field.path_unusable", value=repr(text[:200])))
    if len(text.encode()) > PATH_MAX or any(len(part.encode()) > PART_MAX for part in Path(text).parts):
        raise OutsideRoots(message("field.path_unusable", value=repr(text[:200] + "...")))
    allowed = dashboard_roots.current(home)
    if roots is not None:
        allowed = trainer_roots.Roots(read=(), write=tuple(Path(r).resolve() for r in roots))
    base = base or os.getcwd()
    if problem := allowed.problem(text, "write", base=base):
        raise OutsideRoots(problem)
    return trainer_roots.resolved(text, base)


def write_refusal(path, home=None, base=None, roots=None):
    """Why an act may not write `path` (see `write_root`), or None: a refusal message for `Outcome`."""
    try:
        write_root(path, home, base, roots)
    except OutsideRoots as exc:
        return exc.args[0]
    return None


def job_or_refusal(store, job_id):
    """(the job, None), or (None, a refusal naming the unknown id)."""
    try:
        job = store.get(int(job_id))
    except (TypeError, ValueError):  # not a job id at all
        job = None
    return job, None if job is not None else refused(t("action.no_job", id=job_id))


def acting(user):
    """The acting identity: `user`, or the OS user running this process (a script acts as its user)."""
    return user if user else roles.os_user()


def refusal(user, action, owner=None, subject=None):
    """Why `user` may not take the role action `action` (on something `owner` owns, named `subject` in
    messages: a job id), or None when they may. What a page asks to disable a button."""
    try:
        return roles.refusal(acting(user), action, owner=owner, job_id=subject)
    except roles.RolesFileError as exc:
        return t("role.file_unusable", error=exc)


def roles_file_problem():
    """Why the roles file cannot be used (the sentence every refusal then gives), or None: `python -m mmcore`
    refuses every command with it, reads included, as the pages show nothing else."""
    try:
        roles.load()
    except roles.RolesFileError as exc:
        return t("role.file_unusable", error=exc)
    return None


def may_overwrite_others(user):
    """Whether a launch of `user` may write over another user's files (an admin's, recorded in its audit row)."""
    return refusal(user, "overwrite_others") is None


def overwritten(files):
    """Other users' files a launch writes over, as its audit result keeps them."""
    return [f"{f.path} ({f.user}, job {f.job})" for f in files]


def role(user):
    """The role of `user`, or None when the roles file cannot be read."""
    try:
        return roles.role_of(acting(user))
    except roles.RolesFileError:
        return None


def perform(home, user, action, entry, request, do, role_action=None, owner=None, subject=None, job_id=None):
    """Check, act, record: the one path of every act.

    `action`: the audit action (see `mmcore.access.audit.ACTIONS`); `role_action`: the action the role
    must allow (default: `action`), on something `owner` owns, named `subject` in a refusal. `request`:
    what was asked. `do()` runs the act and returns its Outcome; when it ran (`Outcome.done`), one row is
    added to the audit trail of `home` for `job_id` (default: the job the act made, `result["job"]`).
    """
    if entry not in audit.ENTRIES:
        raise ValueError(f"unknown entry {entry!r}; expected one of {', '.join(audit.ENTRIES)}")
    user = acting(user)
    why = refusal(user, role_action or action, owner, subject)
    if why:
        return _kept(home, user, action, job_id, entry, request, refused(why))
    try:
        if action != "audit_repair":  # the one act that mends the trail itself
            audit.check(home)
    except audit.AuditUnavailable as exc:
        return refused(str(exc), cause=AUDIT_DOWN)
    outcome = do()
    if not outcome.done:
        return _kept(home, user, action, job_id, entry, request, outcome)
    try:
        audit.record(user, action, job_id if job_id is not None else outcome.result.get("job"),
                     {"entry": entry, "request": request, "result": outcome.result}, home=home)
    except audit.AuditUnavailable as exc:  # broke between the check and the act's end: say so, do not hide it
        return Outcome("error", f"{outcome.message}\n{exc}", outcome.value, outcome.result, cause=AUDIT_DOWN)
    return outcome


def _kept(home, user, action, job_id, entry, request, outcome):
    """Keep a refused attempt for the admins (best effort: a trail that cannot be written refuses anyway)."""
    try:
        audit.record_refusal(user, action, job_id, entry, request, "\n".join(map(str, outcome.reasons)), home=home)
    except audit.AuditUnavailable:
        pass
    return outcome

