"""Device auto-detection. Nothing in the workbench names `cuda` directly."""

from __future__ import annotations

import time
from contextlib import nullcontext
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


RESAMPLE_SECONDS = 10.0  # a sample of the idle cores serves the calls of the next seconds
_LAST_SAMPLE: list = []  # [(time.monotonic(), threads)] of the last sample taken with the default interval


def free_threads(sample_seconds: float = 0.3) -> int:
    """How many threads to compute with: the cores that are free now, at least 1.

    WORKBENCH_THREADS overrides it; so does OMP_NUM_THREADS, where set to a number (torchrun
    sets it for each of its processes, and a user may have chosen it). Otherwise the idle
    share of the cores this process may use is sampled from /proc/stat over `sample_seconds`:
    on a machine where other jobs keep a core busy, two torch threads on two cores wait on
    the slower one at every parallel region and run several times slower than one thread
    alone (see `benchmarks/threads.py`). Where /proc/stat is missing (macOS, Windows), all
    cores. A sample is reused for RESAMPLE_SECONDS: stage 06 asks before each of a dozen
    encodings and t-SNE fits, and each sample waits `sample_seconds`.
    """
    env = os.environ.get("WORKBENCH_THREADS")
    if env:
        return max(1, int(env))
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit():
        return max(1, int(omp))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    def idle_and_total():
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, all

    now = time.monotonic()
    if sample_seconds and _LAST_SAMPLE and now - _LAST_SAMPLE[0][0] < RESAMPLE_SECONDS:
        return _LAST_SAMPLE[0][1]
    try:
        idle0, total0 = idle_and_total()
        time.sleep(sample_seconds)
        idle1, total1 = idle_and_total()
    except (OSError, ValueError, IndexError):
        return cores
    machine = os.cpu_count() or cores
    idle_cores = (idle1 - idle0) / max(total1 - total0, 1) * machine
    # A core counts as taken only when it is at least three quarters busy: a short burst
    # (a process starting) must not halve the threads of a long computation.
    threads = max(1, min(cores, int(idle_cores + 0.75)))
    if sample_seconds:
        _LAST_SAMPLE[:] = [(time.monotonic(), threads)]
    return threads


def use_free_cores(verbose: bool = False) -> int:
    """Set torch's thread count to `free_threads()` (and return it); call once at the start of a stage."""
    import torch

    n = free_threads()
    if n != torch.get_num_threads():
        torch.set_num_threads(n)
    if verbose:
        print(f"computing with {n} thread{'s' if n > 1 else ''} (free cores now; WORKBENCH_THREADS overrides)")
    return n


def one_blas_thread():
    """A context in which numpy's BLAS uses one thread (a no-op without threadpoolctl).

    Our matrices are small (papers x a few hundred dimensions): one thread computes them
    in milliseconds, while several BLAS threads on cores that other jobs keep busy wait on
    each other and take far longer (measured: 21 s instead of 0.2 s for one health report,
    1.1 s instead of 0.25 s for a weight fit on 1,000 pairs).
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - sklearn brings threadpoolctl

        return nullcontext()
    return threadpool_limits(1, user_api="blas")
