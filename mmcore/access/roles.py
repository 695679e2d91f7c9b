"""Who may do what: three roles read from a small TOML file.

- viewer: sees every job, log and chart;
- member: also launches jobs and pipelines, and stops, deletes, resumes, retries, tags and annotates, or moves
  in the queue, the jobs it owns; on the Models page it chats with, compares, evaluates and exports checkpoints
  (each runs a model or writes files); on the Logs page it uploads logs and on the Data page data files (they are kept on the
  server's disk);
- admin: everything, on every job, and the dashboard's settings (queue priorities among them) and restores;
  a launch of theirs may write over another user's weight, LoRA and resume files (`overwrite_others`).

Everyone may also look (`view`), which covers keeping their own saved views of the Logs page.

The file is `$MINIMIND_ROLES`, else `<dashboard home>/roles.toml` (beside jobs.db)::

    default = "viewer"          # the role of everyone not listed below
    [users]
    "alice@example.com" = "admin"
    "bob@example.com" = "member"

Without a file, the OS user running the dashboard is admin and everyone else a viewer: a dashboard
started with the README's commands works as before for the person who started it, and nobody else
gets more than a look until an admin writes the file. Identities are compared case-insensitively
(e-mail addresses as sign-in providers report them, or OS user names). The acts of `mmcore.actions` ask
`refusal` (through `mmcore.actions.core`); nothing else decides what a user may do.
"""
import getpass
import os
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from mmcore.base import regular_file
from mmcore.base.i18n import t
from mmcore.base.paths import default_home

ROLES = ("viewer", "member", "admin")
#: Who acts when a caller passes no identity in a page: nobody in particular, so the default role.
ANONYMOUS_ROLE_USER = "anonymous"
ROLES_ENV = "MINIMIND_ROLES"
FILE_NAME = "roles.toml"

#: Actions on a job (or a pipeline) that a member may take on its own only.
OWN_JOB_ACTIONS = frozenset({"stop", "delete", "resume", "retry", "move", "annotate"})
#: The Models page's actions: each runs a model (chat, compare, evaluate) or writes files (export).
MODEL_ACTIONS = frozenset({"chat", "compare", "evaluate", "export"})
#: What each role may do (an admin may do everything).
_ALLOWED = {
    "viewer": frozenset({"view"}),
    "member": (frozenset({"view", "launch", "clone", "upload", "upload_data", "rescore",
                         "prompts_export"})
               | OWN_JOB_ACTIONS | MODEL_ACTIONS),
    "admin": None,
}
# Actions with a wording of their own in messages ("role.verb.<action>" in the language files).
_VERBS = frozenset({"launch", "clone", "stop", "delete", "resume", "retry", "move", "settings", "restore", "view",
                    "chat", "compare", "evaluate", "export", "audit_repair", "upload", "upload_data", "priority",
                    "rescore", "prompts_export", "annotate"})


class RolesFileError(ValueError):
    """The roles file cannot be read or holds something other than roles."""


def os_user():
    """The name of the OS user running this process."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no passwd entry for this uid (some containers)
        return str(os.getuid())


def _norm(identity):
    return (identity or "").strip().lower()


@dataclass(frozen=True)
class RoleConfig:
    """Identity -> role, and the role of everyone else."""
    users: dict = field(default_factory=dict)
    default: str = "viewer"
    source: str = ""  # the file it came from, "" for the built-in default

    def role_of(self, identity):
        return self.users.get(_norm(identity), self.default)


def roles_path(home=None):
    """Where the roles file is read from."""
    if os.environ.get(ROLES_ENV):
        return Path(os.environ[ROLES_ENV])
    if home is None:
        home = default_home()
    return Path(home) / FILE_NAME


def _check_role(role, where):
    if role not in ROLES:
        raise RolesFileError(f"{where}: unknown role {role!r}; roles are {', '.join(ROLES)}")
    return role


def load(path=None):
    """The role configuration from `path` (default: `roles_path()`); the built-in default without a file.

    Raises RolesFileError for a file that is not valid TOML or names an unknown role.
    """
    path = Path(path) if path is not None else roles_path()
    try:
        text = regular_file.read_text(path)
    except FileNotFoundError:
        return RoleConfig(users={_norm(os_user()): "admin"}, default="viewer")
    except OSError as exc:
        raise RolesFileError(f"cannot read the roles file {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RolesFileError(f"{path} is not valid TOML: {exc}") from None
    default = _check_role(data.get("default", "viewer"), f"{path}: default")
    users = data.get("users", {})
    if not isinstance(users, dict):
        raise RolesFileError(f"{path}: [users] must be a table of identity = role")
    return RoleConfig(users={_norm(k): _check_role(v, f"{path}: {k}") for k, v in users.items()},
                      default=default, source=str(path))


def role_of(identity, config=None):
    """The role of an identity."""
    return (config or load()).role_of(identity)


def refusal(identity, action, owner=None, job_id=None, config=None):
    """Why `identity` may not take `action` (on a job owned by `owner`), or None when it may."""
    role = role_of(identity, config)
    allowed = _ALLOWED[role]
    if allowed is None:
        return None
    verb = t(f"role.verb.{action}") if action in _VERBS else action
    role_name = t(f"role.{role}")
    if action not in allowed:
        if job_id is not None and action in OWN_JOB_ACTIONS:
            return t("role.may_not_job", identity=identity, role=role_name, verb=verb, job=job_id)
        return t("role.may_not", identity=identity, role=role_name, verb=verb)
    if action in OWN_JOB_ACTIONS and _norm(owner) != _norm(identity):
        return t("role.not_owner", identity=identity, verb=verb, job=job_id, owner=owner or t("role.nobody"))
    return None
