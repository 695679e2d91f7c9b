"""Why a training type's loss reads as it does beside other types' losses, for the pages that show a loss.

Reasoning distill weighs the tokens of its four reply tags `trainer.rules.specs.REASON_TAG_WEIGHT` times
(as upstream MiniMind), so its first loss reads in the tens (about 35 on the demo data) where SFT's reads
about 2. Logs says so beside its loss chart, Train under the chosen type, Jobs in the latest-loss column's
tooltip; each reads the weight from the one place it is defined.
"""
from mmcore.base.i18n import t
from trainer.rules import specs  # (torch-free)


def weight_text():
    """The tag weight as the notes write it: "10"."""
    return f"{specs.REASON_TAG_WEIGHT:g}"


def loss_note(train_type):
    """The note on `train_type`'s loss in the current language, or "" when its loss reads like SFT's."""
    if train_type == "distill_reason":
        return t("logs.reason_loss", weight=weight_text())
    return ""


def metric_column_help():
    """The tooltip of the Jobs table's latest loss / reward column."""
    return t("jobs.col.metric.help", weight=weight_text())
