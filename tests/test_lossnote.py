"""The note on Reasoning distill's tag-weighted loss (mmcore.train.lossnote): worded in both languages with
the weight the trainer uses, and said of no other type."""
from mmcore.base import i18n
from mmcore.train import lossnote, train_types
from trainer.rules import specs


def test_reasoning_distill_loss_is_explained_with_the_trainers_weight():
    weight = f"{specs.REASON_TAG_WEIGHT:g}"
    note = lossnote.loss_note("distill_reason")
    assert "four tags" in note and f") {weight}× (" in note and "far above SFT's" in note
    assert f"four reply tags {weight}×" in lossnote.metric_column_help()
    with i18n.language("zh"):
        assert f"加权 {weight} 倍" in lossnote.loss_note("distill_reason")
        assert f"加权 {weight} 倍" in lossnote.metric_column_help()


def test_no_other_type_gets_the_note():
    assert [k for k in train_types.TYPES if lossnote.loss_note(k)] == ["distill_reason"]
