"""The errors a training script reports as one `ERROR: ...` line (no traceback) before training starts.

Torch-free, so the RL pieces, the trainers and the dashboard's workers share one class without importing
`trainer.trainer_utils` (which re-exports both names).
"""


class SetupError(Exception):
    """A problem found before training starts (missing file, bad option); reported as one line."""


class MissingWeightError(SetupError, FileNotFoundError):
    """A base weight named by --from_weight (or similar) does not exist; the message names the path."""


class PackingRefused(SetupError):
    """`--pack 1` where packed rows could not give the loss of the unpacked run."""


#: The packable types whose loss adds the MoE router's auxiliary loss (pretraining's packing is not
#: exact by design: a document continues into the next row).
PACK_EXACT_DENSE_ONLY = ("sft", "lora", "distill_reason", "distillation")


def pack_refusal(train_type, pack, use_moe):
    """A PackingRefused for `--pack 1` on a run where packing cannot be exact, else None.

    With `--use_moe 1` the loss of SFT, LoRA and both distillations adds the router's auxiliary loss,
    a statistic of every position of a batch, the padding to `--max_seq_len` included (as upstream):
    packed rows hold other positions, so the loss would differ from the unpacked run's. DPO adds no
    auxiliary loss; its packing stays exact with MoE models.
    """
    if pack and use_moe and train_type in PACK_EXACT_DENSE_ONLY:
        return PackingRefused(
            f"--pack 1 cannot be used with --use_moe 1 for {train_type}: the MoE auxiliary loss is taken over "
            "every position of a batch, the padding included, so packed rows would change the loss "
            "(use --pack 0, or a dense model)")
    return None
