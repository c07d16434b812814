"""Errors raised while reading a checkpoint."""


class CheckpointError(ValueError):
    """A checkpoint (config or tensors) this package cannot load faithfully.

    Raised instead of guessing: a silently mis-loaded model would make every
    downstream regression comparison meaningless.
    """
