"""Device auto-detection. Nothing in the workbench names `cuda` directly."""

from __future__ import annotations

import os


def best_device(prefer: str | None = None) -> str:
    """Return the device to run on: `prefer` if given, else CUDA, MPS or CPU, whichever is there.

    The environment variable WORKBENCH_DEVICE overrides the detection (e.g. "cpu" to
    keep a GPU free for a server).
    """
    import torch

    choice = prefer or os.environ.get("WORKBENCH_DEVICE") or "auto"
    if choice != "auto":
        torch.device(choice)  # raises a clear error for a malformed name
        return choice
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def default_dtype(device: str):
    """bf16 on GPUs that support it (halves memory, same quality for inference), fp32 elsewhere."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32
