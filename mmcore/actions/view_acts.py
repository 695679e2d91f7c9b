"""Acts of the Logs page: save and delete a saved view, save the health checks' thresholds, upload a log.

Each is one `core.perform` (role checked, act run, one audit row), answered with a `core.Outcome` in the
acting user's language; `entry` and `user` as in `job_acts`. Everyone may keep views of their own (the
`view` role action); a view is its owner's or an admin's to delete (`mmcore.logs.savedviews`); the
thresholds are shared by every viewer, so changing them is an admin's act. An upload is kept on the
server's disk, in its uploader's folder and within its quota (`mmcore.logs.logfiles.save_upload`): members
and admins upload, viewers look.
"""
from pathlib import Path

from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused
from mmcore.base.i18n import t
from mmcore.data import sources
from mmcore.logs import logfiles, savedviews
from mmcore.runs import health


def _home(views):
    return Path(views.path).parent  # the views live in the job store's file, in the dashboard's home


def save_view(views, name, params, shared=False, user=None, entry=PAGE):
    """Save `params` (the Logs page's query parameters) as `user`'s view `name` (replacing a view of theirs
    of that name); the value is its id."""
    user = core.acting(user)
    params = savedviews.view_params(params)
    request = {"name": name, "params": params, "shared": bool(shared)}

    def do():
        try:
            view_id = views.save(user, name, params, shared=shared)
        except (savedviews.ViewRefused, OSError) as exc:
            return refused(str(exc))
        return did("success", t("views.saved", name=name.strip(), id=view_id), {"view": view_id}, view_id)
    return perform(_home(views), user, "save_view", entry, request, do, role_action="view")


def delete_view_refusal(view, user=None):
    """Why `user` may not delete `view` (a `savedviews.SavedView`: it is someone else's), or None."""
    user = core.acting(user)
    if view.owner == user or core.role(user) == "admin":
        return None
    return t("views.not_yours", name=view.name, owner=view.owner)


def delete_view(views, view_id, user=None, entry=PAGE):
    """Delete a saved view: its owner's or an admin's act."""
    user = core.acting(user)

    def do():
        try:
            views.delete(view_id, user, admin=core.role(user) == "admin")  # which refuses another's view
        except (savedviews.ViewRefused, OSError) as exc:
            return refused(str(exc))
        return did("info", t("views.deleted"), {"deleted": True})
    return perform(_home(views), user, "delete_view", entry, {"view": view_id}, do, role_action="view")


def thresholds_refusal(user):
    """Why `user` may not change the health checks' thresholds, or None: to disable the form."""
    return core.refusal(user, "settings")


def save_thresholds(home, values, user=None, entry=PAGE):
    """Save the health checks' thresholds (`values`: `health.HealthSettings` fields) for every page."""

    def do():
        try:
            health.save_settings(home, health.HealthSettings(**values))
        except (ValueError, OSError) as exc:  # a bad value is worded in this viewer's language
            return refused(t("logs.not_saved", error=exc))
        return did("success", t("logs.saved"), {"saved": True})
    return perform(home, user, "settings", entry, {"health": values}, do)


def upload_refusal(user):
    """Why `user` may not upload a log (a viewer), or None: what the Logs page asks to disable its uploader."""
    return core.refusal(user, "upload")


def upload_log(home, upload, name, user=None, entry=PAGE):
    """Keep an uploaded log (`upload`: bytes or a binary file, streamed to disk) in `user`'s uploads folder
    within their quota; the value is its path. A page calls it once per uploaded file."""
    user = core.acting(user)

    def do():
        try:
            folder = logfiles.upload_folder(home, user)
            if why := core.write_refusal(folder, roots=[home]):
                return refused(why)
            path = logfiles.save_upload(upload, name, folder=folder, counted=[sources.upload_folder(home, user)])
        except (logfiles.UploadTooLarge, OSError) as exc:
            return refused(str(exc))
        return did("success", "", {"file": path.name, "bytes": path.stat().st_size}, path)
    return perform(home, user, "upload", entry, {"name": str(name)}, do)
