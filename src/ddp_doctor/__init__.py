"""ddp-doctor: finds why multi-GPU PyTorch training will not start, and says what to do."""

__version__ = "0.1.0"
