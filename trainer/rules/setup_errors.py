"""The errors a training script reports as one `ERROR: ...` line (no traceback) before training starts.

Torch-free, so the RL pieces, the trainers and the dashboard's workers share one class without importing
`trainer.trainer_utils` (which re-exports both names).
"""


class SetupError(Exception):
    """A problem found before training starts (missing file, bad option); reported as one line."""


class MissingWeightError(SetupError, FileNotFoundError):
    """A base weight named by --from_weight (or similar) does not exist; the message names the path."""
