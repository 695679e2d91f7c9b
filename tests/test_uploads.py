"""Uploads on the Logs page are a member's act: a viewer's uploader is disabled and the act refuses it; a
member's uploads are streamed to disk (no whole copy in the server) into their own folder, within a quota."""
import io

import pytest
from _pages_helpers import open_page
from _runner_helpers import home_with_roles

from mmcore.access import audit, roles
from mmcore.actions import view_acts
from mmcore.logs import logfiles

ME = roles.os_user()  # who the page acts as (local sign-in)


class Streamed(io.BytesIO):
    """An upload that may be read a block at a time, never copied whole."""

    def getvalue(self):
        raise AssertionError("the whole upload was copied")

    def read(self, size=-1):
        assert 0 < size <= 1024 * 1024, size
        return super().read(size)


@pytest.fixture
def home(tmp_path, monkeypatch):
    return home_with_roles(tmp_path, monkeypatch, bob="member", carol="member", vic="viewer", **{ME: "viewer"})


def test_a_viewer_may_not_upload(home):
    refused = view_acts.upload_log(home, b"Epoch:[1/1](1/1) loss:1.0\n", "run.log", user="vic")
    assert refused.refused and "vic is a viewer and may not upload logs" in refused.message
    assert not (home / "uploads").exists()
    assert [(r.user, r.action) for r in audit.refusals(home=home)] == [("vic", "upload")]
    at = open_page("pages/logs.py")
    assert not at.exception
    [uploader] = [e for e in at.get("file_uploader")]
    assert uploader.proto.disabled and "may not upload logs" in uploader.proto.help


def test_a_members_uploads_are_streamed_to_their_folder_within_a_quota(home, monkeypatch):
    monkeypatch.setattr(logfiles, "UPLOAD_QUOTA_MB", 3 / 1024)  # 3 KiB per user
    line = b"Epoch:[1/1](1/1) loss:1.0\n"
    first = view_acts.upload_log(home, Streamed(line * 80), "a.log", user="bob")  # 2 KiB
    assert first.done and first.value.read_bytes() == line * 80
    assert first.value.parent == logfiles.upload_folder(home, "bob")
    assert view_acts.upload_log(home, Streamed(line * 80), "a.log", user="bob").value == first.value  # kept once
    over = view_acts.upload_log(home, Streamed(line * 60), "b.log", user="bob")
    assert over.refused and "b.log was not kept" in over.message and "MINIMIND_UPLOAD_QUOTA_MB" in over.message
    assert sorted(p.name for p in first.value.parent.iterdir()) == [first.value.name]  # nothing half-kept
    assert view_acts.upload_log(home, Streamed(line * 60), "b.log", user="carol").done  # her own quota
    assert [e.action for e in audit.entries(home=home)] == ["upload"] * 3
