"""Shared fixtures. The suite runs offline: nothing may reach a model hub.

Threads: `make test` runs the suite on pytest-xdist workers, as many as there are free
cores and at least two on a machine with two (`pytest_xdist_auto_num_workers` below, for
`-n auto`). Each worker computes on ONE thread (torch, OpenMP/BLAS, openTSNE through
WORKBENCH_THREADS), so two workers on two cores never oversubscribe them; a run without
xdist uses the cores free when it starts.
The counts go into the environment, so notebook kernels, servers and scripts that the tests
start inherit them.

Scheduling under xdist: the modules in TOGETHER run whole on one worker (their
module-scoped fixtures, a loaded LM, a training run, a pipeline run, a server, are made
once); every other test goes to whichever worker is free, slow ones first.
"""

import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

_FREE: list[int] = []
# Whether the user chose a thread count (read before _set_threads below writes its own).
_CHOSEN = bool(os.environ.get("WORKBENCH_THREADS") or os.environ.get("OMP_NUM_THREADS"))
TOGETHER = {"test_decoder.py", "test_distill.py", "test_stages_04_06.py", "test_http_backend.py", "test_own_corpus.py",
            "test_llm_sharing.py", "test_jupyterlab.py", "test_corrupt_artifacts.py", "test_resume_seeding.py",
            "test_ray_engine.py"}


def _free_cores() -> int:
    """The cores free when the run started (sampled once; WORKBENCH_THREADS overrides)."""
    if not _FREE:
        from workbench.core.devices import free_threads

        _FREE.append(free_threads())
    return _FREE[0]


def _set_threads() -> None:
    # Before numpy, torch or openTSNE load: OpenMP and BLAS read these once, at start-up.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        threads = 1  # one per worker: the workers already fill the free cores
    else:
        threads = _free_cores()
    for name in ("WORKBENCH_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)


_set_threads()

import pandas as pd  # noqa: E402
import pytest  # noqa: E402


@pytest.hookimpl(optionalhook=True)  # without pytest-xdist, never called
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per free core, and at least two where the machine has two cores.

    Two one-thread worker processes beside a job that keeps a core busy share the cores with
    it and never wait on each other: the suite gets 4/3 of a core instead of the one an
    in-process run would have. (Two torch threads of ONE process are what run several times
    slower there: each parallel region waits for the thread that is not scheduled.) None
    (in-process) on a single core, or when WORKBENCH_THREADS / OMP_NUM_THREADS ask for one
    thread. PYTEST_XDIST_AUTO_NUM_WORKERS overrides it, as in xdist itself.
    """
    env = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    if env:
        return int(env)
    free = _free_cores()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = free if _CHOSEN else max(free, min(cores, 2))
    return workers if workers > 1 else 0


@pytest.hookimpl(optionalhook=True)  # without pytest-xdist, never called
def pytest_xdist_make_scheduler(config, log):
    """For `-n N` (xdist's default `--dist load`): the modules in TOGETHER as one unit of work each.

    (xdist's own `--dist loadgroup` would do this from `xdist_group` marks, but it renames
    node ids in a way pytest 9 no longer supports, so the marks are ignored.) Units go out
    largest first (xdist's loadscope order), then single tests in collection order.
    """
    if config.getvalue("dist") != "load":
        return None  # another --dist: xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class Together(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if Path(module).name in TOGETHER else nodeid

    return Together(config, log)


def pytest_collection_modifyitems(config, items):
    """Under xdist, slow tests first: the long ones start early and the short ones fill the gaps.

    In-process runs keep the file order, so no module fixture is set up twice.
    """
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: file order otherwise


@pytest.fixture
def tiny_corpus():
    """Three short, valid abstracts."""
    from workbench.data.corpus import Corpus

    return Corpus(pd.DataFrame({
        "doc_id": ["a", "b", "c"],
        "title": ["Parsing", "Translation", "Summaries"],
        "abstract": [
            "We study dependency parsing for low-resource languages and propose a cross-lingual transfer method.",
            "Neural machine translation degrades on noisy user text; we add synthetic noise during training.",
            "Abstractive summarisers hallucinate facts; we filter training data by entailment scores.",
        ],
    }), name="tiny")


@pytest.fixture(scope="session", autouse=True)
def forked_kernels(request, tmp_path_factory):
    """Every Jupyter kernel the tests start (papermill's in `workbench run`, JupyterLab's, Notebook 7's) is a
    fork of one process that has imported what a stage imports, shared by the session's workers: about 4 s of
    CPU less per kernel (`kernel_zygote.py`). Yields the zygote's socket, or None where kernels start as the
    standard kernel spec starts them: with WORKBENCH_TEST_PLAIN_KERNELS=1, and in a run of no slow test (only
    slow tests start kernels: `make test-fast` starts no zygote)."""
    slow = any(item.get_closest_marker("slow") for item in request.session.items)
    if os.environ.get("WORKBENCH_TEST_PLAIN_KERNELS") == "1" or not slow:
        yield None
        return
    import kernel_zygote

    session = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()  # xdist's controller
    folder = made_once(tmp_path_factory, "kernels", lambda f: kernel_zygote.start(f, session))
    env = kernel_zygote.environment(folder)
    before = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    yield env[kernel_zygote.ENV]
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def notebook_kernel():
    """One kernel for the session's in-process `run_pipeline` calls
    (`run_pipeline(execution=ExecutionOptions(kernel=...))`): each run after the first skips kernel start and the torch/transformers imports (about 6 s
    of CPU). Every stage still starts from an empty namespace in its own run directory."""
    from workbench.run.runner import Kernel

    kernel = Kernel()
    yield kernel
    kernel.close()


def made_once(tmp_path_factory, name: str, make) -> Path:
    """`make(folder)` run once per session, even across xdist workers: the first worker to ask makes the folder
    under the session's shared temp root, holding a lock; the others wait for it and read it. Not under xdist,
    this process's own temp dir. Callers copy the folder before changing anything in it."""
    from workbench.core.files import RunLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # pytest-N/, shared by its workers
    folder, made = root / "made-once" / name, root / "made-once" / f"{name}.made"
    with RunLock(folder.parent, f"test fixture {name}", wait=True):
        if not made.is_file():
            shutil.rmtree(folder, ignore_errors=True)  # a worker that died half-way
            make(folder)
            made.touch()
    return folder


@pytest.fixture(scope="session")
def tiny_map_pristine(tmp_path_factory) -> Path:
    """`lab_harness.tiny_map_run`'s run (stages 02-04's artifacts for 30 ACLSum papers), made once per session:
    the JupyterLab pane and the corrupt-artifact tests each copy it."""
    from lab_harness import tiny_map_run

    return made_once(tmp_path_factory, "tiny-map-run", tiny_map_run)


@pytest.fixture(scope="session")
def short_aspects():
    """The acl preset's aspects with short instructions (tests/data/short_aspects.yaml): for tests
    that run the real SmolLM2, where reading the preset's long prompts would be most of the time."""
    from workbench.data.aspects import load_aspects

    return load_aspects(Path(__file__).parent / "data" / "short_aspects.yaml")


@pytest.fixture(scope="session")
def smollm():
    """The packaged SmolLM2 backend, loaded once for the session (converted folder cached on disk)."""
    from workbench.generate.llm import TransformersBackend

    return TransformersBackend("smollm2-135m-instruct", batch_size=8, device="cpu")
