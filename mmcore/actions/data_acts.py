"""Acts of the Data page: upload a data file. Members and admins upload (the "upload" role action, as
for logs), viewers look; the file goes to the uploader's own folder under `<home>/records/data_uploads/`
(a folder jobs may read, so "Train on this file" works on it), within `sources.MAX_UPLOAD_BYTES`."""
from mmcore.actions import core
from mmcore.actions.core import PAGE, did, perform, refused
from mmcore.data import sources


def upload_refusal(user):
    """Why `user` may not upload a data file (a viewer), or None: the page disables its uploader then."""
    return core.refusal(user, "upload")


def upload_data(home, data, name, user=None, entry=PAGE):
    """Keep an uploaded data file (bytes) in `user`'s uploads folder; the value is its path."""
    user = core.acting(user)

    def do():
        try:
            path = sources.save_upload(data, name, home, user=user)
        except (sources.DataFileError, OSError) as exc:
            return refused(str(exc))
        return did("success", "", {"file": path.name, "bytes": len(data), "kind": "data"}, path)
    return perform(home, user, "upload", entry, {"name": str(name), "kind": "data"}, do)
