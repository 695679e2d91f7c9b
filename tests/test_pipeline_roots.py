"""A pipeline template whose stages would write outside the allowed folders is still shown, stage by
stage, with what is wrong (the browser walk met a KeyError there: a refused save folder left the chain
without the name of the weight each stage hands to the next)."""
from mmcore.base.paths import ROOT
from mmcore.queue import pipelines
from trainer.rules import roots


def test_a_chain_writing_outside_the_allowed_folders_is_shown_with_its_problems(monkeypatch):
    # out/ may be written, checkpoints/ (where each stage keeps its resume state) may not
    monkeypatch.setenv(roots.WRITE_ENV, str(ROOT / "out"))
    stages = pipelines.TEMPLATES["demo_chain"].stages()
    assert [train_type for train_type, _ in stages] == ["pretrain", "sft", "distill_reason", "grpo"]
    assert stages[1][1]["from_weight"] == "pretrain" and stages[2][1]["from_weight"] == "full_sft"
    problems = pipelines.check(stages, gpu_count=0)
    assert problems and all("outside" in p for p in problems), problems
