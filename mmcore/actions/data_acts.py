"""Acts of the Data page: upload a data file. Members and admins upload (the "upload" role action, as
for logs), viewers look; the file goes to the uploader's own folder under `<home>/records/data_uploads/`
(a folder jobs may read, so "Train on this file" works on it), within `sources.MAX_UPLOAD_BYTES` and the
quota each user's log and data uploads share. A user sees and opens their own uploads only; an admin, all."""
from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused
from mmcore.data import sources
from mmcore.logs import logfiles


def upload_refusal(user):
    """Why `user` may not upload a data file (a viewer), or None: the page disables its uploader then."""
    return core.refusal(user, "upload_data")


def visible_uploads(home, user):
    """The upload folders `user` may list and open: their own, or None (all of them) for an admin."""
    user = core.acting(user)
    return None if core.role(user) == "admin" else [sources.upload_folder(home, user)]


def upload_data(home, upload, name, user=None, entry=PAGE):
    """Keep an uploaded data file (`upload`: bytes or a binary file, streamed to disk) in `user`'s uploads
    folder; the value is its path."""
    user = core.acting(user)

    def do():
        if why := core.write_refusal(sources.upload_folder(home, user), roots=[sources.uploads_dir(home)]):
            return refused(why)
        try:
            path = sources.save_upload(upload, name, home, user=user, counted=[logfiles.upload_folder(home, user)])
        except (sources.DataFileError, OSError) as exc:
            return refused(str(exc))
        return did("success", "", {"file": path.name, "bytes": path.stat().st_size, "kind": "data"}, path)
    return perform(home, user, "upload", entry, {"name": str(name), "kind": "data"}, do, role_action="upload_data")
