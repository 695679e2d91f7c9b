"""The weight catalogue: files found under the roots and every job's save folder, described from their
metadata file, the job that wrote them, or their MiniMind name; resume files and other files left out."""
import os
import time

from mmcore.base.paths import TRAINER_DIR
from mmcore.jobs.jobstore import JobStore
from mmcore.models import catalogue
from trainer.rules import weight_meta


def touch(path, size=10):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def test_scan_describes_each_weight_file(tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "team" / "runs"
    store = JobStore(tmp_path / "jobs.db")
    job_id = store.create("grpo", "grpo-demo", {"save_dir": str(elsewhere), "hidden_size": "64", "num_hidden_layers": "2",
                                             "use_moe": "1"}, ["python"], str(TRAINER_DIR), {})
    store.update(job_id, started_at=time.time() - 60)

    full = touch(out / "full_sft_64.pth", 100)
    weight_meta.write_meta(str(full), weight_meta.build_meta(
        str(full), kind="full", train_type="sft", hidden_size=64, num_hidden_layers=2, use_moe=False,
        epoch=0, step=8, global_step=8))
    touch(out / "lora" / "lora_identity_64.pth")
    grpo = touch(elsewhere / "grpo_64_moe.pth", 300)
    touch(elsewhere / "grpo_64_moe_step10.pth")
    touch(out / "full_sft_64_resume.pth")
    touch(out / "notes.txt")
    touch(out / "upstream_512.pth")
    old = time.time() - 3600
    os.utime(out / "upstream_512.pth", (old, old))

    entries = {os.path.basename(e.path): e for e in catalogue.scan(store, roots=[out, elsewhere])}
    assert set(entries) == {"full_sft_64.pth", "lora_identity_64.pth", "grpo_64_moe.pth", "grpo_64_moe_step10.pth",
                            "upstream_512.pth"}
    sft = entries["full_sft_64.pth"]
    assert (sft.kind, sft.train_type, sft.size_text, sft.step, sft.size_bytes) == ("full", "sft", "64x2", 8, 100)
    assert sft.tokenizer_fingerprint == weight_meta.tokenizer_fingerprint(weight_meta.BUNDLED_TOKENIZER)
    lora = entries["lora_identity_64.pth"]
    assert (lora.kind, lora.train_type, lora.chattable) == ("lora", "lora", False)
    assert catalogue.lora_base(lora, list(entries.values())) == str(full)
    g = entries["grpo_64_moe.pth"]
    assert (g.kind, g.train_type, g.job_id, g.size_text, g.path) == ("full", "grpo", job_id, "64x2 MoE", str(grpo))
    snap = entries["grpo_64_moe_step10.pth"]
    assert (snap.kind, snap.step, snap.job_id) == ("snapshot", 10, job_id)
    up = entries["upstream_512.pth"]
    assert (up.train_type, up.job_id, up.size_text) == (None, None, "512x?")
    # The job's own save folder is scanned without being named as a root.
    assert "grpo_64_moe.pth" in {os.path.basename(e.path) for e in catalogue.scan(store, roots=None)}
    assert catalogue.scan(store, roots=[out, elsewhere])[-1].path == up.path  # newest first


def test_parse_name():
    assert catalogue.parse_name("full_sft_512.pth") == ("full_sft", 512, False, None)
    assert catalogue.parse_name("my_run_768_moe_step2000.pth") == ("my_run", 768, True, 2000)
    assert catalogue.parse_name("grpo_512_resume.pth") is None
    assert catalogue.parse_name("model.safetensors") is None


def test_a_job_id_recorded_by_another_store_names_no_job_here(tmp_path):
    """A weight's metadata names its job by id within the store that ran it: the same id in another store
    is another job (test and team homes share the repository's out/)."""
    store = JobStore(tmp_path / "here" / "jobs.db")
    job_id = store.create("grpo", "here", {"save_dir": str(tmp_path / "elsewhere")}, ["python"], str(TRAINER_DIR), {})
    mine, theirs = touch(tmp_path / "out" / "mine_64.pth"), touch(tmp_path / "out" / "theirs_64.pth")
    for weight, db in ((mine, store.path), (theirs, str(tmp_path / "there" / "jobs.db"))):
        meta = weight_meta.build_meta(str(weight), kind="full", train_type="pretrain", hidden_size=64,
                                      num_hidden_layers=2, use_moe=False, epoch=0, step=3, global_step=3)
        weight_meta.write_meta(str(weight), {**meta, "job_id": job_id, "store": db})
    entries = {os.path.basename(e.path): e for e in catalogue.scan(store, roots=[tmp_path / "out"])}
    assert (entries["mine_64.pth"].job_id, entries["theirs_64.pth"].job_id) == (job_id, None)
    assert catalogue.scan(None, roots=[tmp_path / "out"])[0].job_id == job_id  # no store listed: as recorded
