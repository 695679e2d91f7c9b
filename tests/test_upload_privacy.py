"""Uploads are private and bounded: one folder per identity that no other identity maps to, streamed to disk,
within one quota per user shared by log and data uploads, pruned after their lifetime, listed and opened by
their owner and admins only."""
import io
import os
import time

import pytest
from _runner_helpers import home_with_roles

from mmcore.actions import data_acts, view_acts
from mmcore.data import sources
from mmcore.logs import logfiles

ROW = b'{"text": "hello"}\n'


@pytest.fixture
def home(tmp_path, monkeypatch):
    return home_with_roles(tmp_path, monkeypatch, **{'"a+b@example.com"': "member", '"a_b@example.com"': "member",
                                                     "ada": "admin", "vic": "viewer"})


def test_identities_that_look_alike_get_folders_of_their_own(home):
    first = data_acts.upload_data(home, ROW, "train.jsonl", "a+b@example.com")
    second = data_acts.upload_data(home, b'{"text": "other"}\n', "train.jsonl", "a_b@example.com")
    assert first.done and second.done
    assert first.value.parent != second.value.parent
    assert first.value.read_bytes() == ROW  # the second upload did not replace the first member's file
    assert logfiles.upload_folder(home, "a+b@example.com") != logfiles.upload_folder(home, "a_b@example.com")


class OneReadAtATime(io.RawIOBase):
    """A binary upload that counts how much one read asks for: a whole copy of it would read it all at once."""

    def __init__(self, data):
        self.inner, self.largest = io.BytesIO(data), 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, *args):
        return self.inner.seek(*args)

    def tell(self):
        return self.inner.tell()

    def read(self, n=-1):
        assert n is not None and n >= 0, "the upload was read whole"
        self.largest = max(self.largest, n)
        return self.inner.read(n)


def test_a_data_upload_is_streamed_to_disk_a_block_at_a_time(home):
    data = ROW * 200_000  # 3.6 MB
    upload = OneReadAtATime(data)
    done = data_acts.upload_data(home, upload, "big.jsonl", "a+b@example.com")
    assert done.done and done.value.read_bytes() == data
    assert 0 < upload.largest <= 1024 * 1024


def test_logs_and_data_share_one_quota_per_user(home, monkeypatch):
    monkeypatch.setattr(logfiles, "UPLOAD_QUOTA_MB", 1.0)
    half = ROW * 32_000  # 0.55 MB
    assert view_acts.upload_log(home, half, "run.log", "a+b@example.com").done
    over = data_acts.upload_data(home, half, "train.jsonl", "a+b@example.com")
    assert over.refused and "MINIMIND_UPLOAD_QUOTA_MB" in over.message
    assert not (sources.upload_folder(home, "a+b@example.com") / "train.jsonl").exists()
    assert data_acts.upload_data(home, half, "train.jsonl", "a_b@example.com").done  # another user's quota
    # and the other way round: data held counts against logs
    assert data_acts.upload_data(home, half, "t.jsonl", "ada").done
    assert view_acts.upload_log(home, half + b"x", "run.log", "ada").refused


def test_replacing_ones_own_file_counts_its_old_size_no_more(home, monkeypatch):
    monkeypatch.setattr(logfiles, "UPLOAD_QUOTA_MB", 1.0)
    data = ROW * 40_000  # 0.69 MB: twice would be over
    assert data_acts.upload_data(home, data, "train.jsonl", "ada").done
    assert data_acts.upload_data(home, data, "train.jsonl", "ada").done


def test_old_uploads_are_pruned_after_their_lifetime(home, monkeypatch):
    old = data_acts.upload_data(home, ROW, "old.jsonl", "ada").value
    week_ago = time.time() - sources.UPLOAD_KEEP_S - 60
    os.utime(old, (week_ago, week_ago))
    monkeypatch.setattr(sources, "UPLOAD_KEEP_S", 3600.0)
    assert data_acts.upload_data(home, ROW, "new.jsonl", "ada").done
    assert not old.exists()


def test_a_user_sees_and_opens_only_their_own_uploads_an_admin_all(home):
    mine = data_acts.upload_data(home, ROW, "mine.jsonl", "a+b@example.com").value.resolve()
    admins = data_acts.upload_data(home, ROW, "admins.jsonl", "ada").value.resolve()
    for user in ("a_b@example.com", "vic"):
        seen = data_acts.visible_uploads(home, user)
        listed = sources.candidates(home, seen)
        assert mine not in listed and admins not in listed
        assert not any(str(sources.uploads_dir(home)) in str(p) for p in listed)  # no path of any upload
        with pytest.raises(sources.DataFileError, match="another user's upload"):
            sources.check(mine, home, upload_folders=seen)
    own = data_acts.visible_uploads(home, "a+b@example.com")
    assert mine in sources.candidates(home, own) and admins not in sources.candidates(home, own)
    assert sources.check(mine, home, upload_folders=own) == mine
    everything = sources.candidates(home, data_acts.visible_uploads(home, "ada"))
    assert mine in everything and admins in everything


def test_upload_folders_and_files_are_private(home):
    path = data_acts.upload_data(home, ROW, "p.jsonl", "ada").value
    log = view_acts.upload_log(home, ROW, "p.log", "ada").value
    for folder in (path.parent, log.parent):
        assert folder.stat().st_mode & 0o777 == 0o700
    for file in (path, log):
        assert file.stat().st_mode & 0o777 == 0o600


class UploadedFile(io.BytesIO):
    """What Streamlit's uploader hands the Data page: a binary file with a name, never to be copied whole."""

    name = "page.jsonl"

    def getvalue(self):
        raise AssertionError("the whole upload was copied")

    def read(self, size=-1):
        assert 0 < size <= 1024 * 1024, size
        return super().read(size)


def test_the_data_pages_uploader_hands_the_act_a_stream(home):
    import streamlit as st

    from mmcore.widgets import data_panels

    st.session_state[data_panels.UPLOAD_KEY] = UploadedFile(ROW * 1000)
    data_panels._uploaded(home, "ada")
    chosen = st.session_state[data_panels.FILE_KEY]
    assert chosen == str((sources.upload_folder(home, "ada") / "page.jsonl").resolve())
    assert open(chosen, "rb").read() == ROW * 1000
