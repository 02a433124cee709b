"""Training plumbing shared by the stages that train (02 train, 03 distill, 04 decode).

One Accelerator recipe and one optimiser recipe, so that every stage runs unchanged on
a CPU, one GPU, and the processes that `torchrun` / `accelerate launch` start.
"""

from __future__ import annotations

from dataclasses import asdict, fields

from .devices import best_device, use_free_cores


def make_accelerator(device: str | None = None, mixed_precision: str = "no"):
    """An Accelerator for CPU, one GPU, or the processes that torchrun / accelerate launch started.

    DDP is told to expect unused parameters: backbones such as BERT carry a pooler layer
    that CLS/mean pooling never uses, and a distillation batch may lack every target of
    some aspect, leaving that head out of the graph; DDP would otherwise wait forever for
    their gradients.
    """
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs

    cpu = (device or best_device()) == "cpu"
    if cpu:
        use_free_cores()  # threads from the cores free now (torchrun's processes keep its OMP_NUM_THREADS)
    handlers = [DistributedDataParallelKwargs(find_unused_parameters=True)]
    try:
        return Accelerator(cpu=cpu, mixed_precision=mixed_precision, kwargs_handlers=handlers)
    except ValueError:
        # Accelerate keeps one process-wide state: a notebook that trained on the GPU and
        # now asks for the CPU must forget the first choice (single process only).
        from accelerate.state import AcceleratorState

        if AcceleratorState().num_processes > 1:
            raise
        AcceleratorState._reset_state(reset_partial_state=True)
        return Accelerator(cpu=cpu, mixed_precision=mixed_precision, kwargs_handlers=handlers)


def adamw(params, lr: float, weight_decay: float):
    """AdamW, with the fused kernel where this torch build has it.

    The fused kernel is several times faster on CPU: AdamW touches every parameter,
    including the 30k-row embedding matrix, which otherwise dominates a CPU step.
    """
    import torch

    params = list(params)
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


class ConfigDict:
    """Mixin for the stages' config dataclasses: to and from a JSON-serialisable dict."""

    def to_dict(self) -> dict:
        """All fields as a JSON-serialisable dict (the form saved beside each model)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values):
        """The inverse of `to_dict`; unknown keys are an error (a typo must not pass silently)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; fields are {sorted(known)}")
        return cls(**dict(values))
