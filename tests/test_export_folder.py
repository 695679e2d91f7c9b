"""An export asks before it replaces anything (mmcore.models.export_job.folder_in_use): a folder that holds
files, or one an unfinished export job writes into, is named with why; a free or empty folder is not."""
import json

from mmcore.jobs.jobstore import JobStore
from mmcore.models import export_job


def export_job_row(store, out_dir, status=None):
    job_id = store.create(export_job.JOB_TYPE, f"export x -> {out_dir.name}", {"weight": "out/x_64.pth",
                          "out_dir": str(out_dir)}, ["python", "-c", "pass"], str(out_dir.parent), {})
    if status:
        store.update(job_id, status=status)
    return job_id


def test_a_free_or_empty_folder_is_not_in_use(tmp_path):
    store = JobStore()
    assert export_job.folder_in_use(tmp_path / "hf" / "a", store) is None
    (tmp_path / "hf" / "a").mkdir(parents=True)
    assert export_job.folder_in_use(tmp_path / "hf" / "a", store) is None
    export_job_row(store, tmp_path / "hf" / "other")  # another folder's queued export says nothing of this one
    assert export_job.folder_in_use(tmp_path / "hf" / "a", store) is None


def test_a_folder_holding_an_export_names_its_source(tmp_path):
    folder = tmp_path / "hf" / "reason_64"
    folder.mkdir(parents=True)
    (folder / export_job.MANIFEST).write_text(json.dumps({"weight": "/x/out/full_sft_64.pth"}), encoding="utf-8")
    assert export_job.folder_in_use(folder, JobStore()) == (
        "models.export.folder_exists", {"folder": "reason_64", "source": "full_sft_64.pth"})
    (folder / export_job.MANIFEST).unlink()
    (folder / "notes.txt").write_text("mine", encoding="utf-8")  # any file at all is not to be replaced unasked
    assert export_job.folder_in_use(folder, None) == ("models.export.folder_exists", {"folder": "reason_64", "source": "?"})


def test_an_unfinished_export_job_holds_its_folder_until_it_ends(tmp_path):
    store = JobStore()
    folder = tmp_path / "hf" / "grpo_64"
    job_id = export_job_row(store, folder)
    assert export_job.folder_in_use(folder, store) == ("models.export.folder_queued", {"job_id": job_id, "folder": "grpo_64"})
    store.update(job_id, status="running")
    assert export_job.folder_in_use(folder, store)[0] == "models.export.folder_queued"
    store.update(job_id, status="failed")
    assert export_job.folder_in_use(folder, store) is None  # it wrote nothing: the folder is free
