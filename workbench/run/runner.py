"""Run the numbered notebooks through papermill into a run directory and export HTML reports.

`run_pipeline` reads and checks the parameters (`runconfig.py`: the parameters file, the
stages, secrets and paths; `corpuscheck.py`: the corpus, loaded as the stages load it; all before
the first notebook starts and before the run directory exists), then executes each stage's
notebook in the run directory with papermill, in one shared `Kernel` (each stage from an empty
namespace) or a fresh one per stage.

While a stage runs, one line shows its cells done / total, the elapsed time and the running
cell's own progress bar (or its last line of output): redrawn in place on a terminal, a plain
line every 30 s in a log or a pipe (`Progress`). At the end a summary lists what each stage
wrote into the run directory, its report and its time. The reports (reports.py) go to a folder that
belongs to this run; run.json (record.py) keeps every stage the run directory ever completed.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from ..core.files import RunLock, replace_from, write_text
from ..core.progress import NOTICE
from .corpuscheck import check_corpus
from .record import record_stage
from .resume import Unfinished, command_fingerprint
from .reports import claim_report_dir, export_html
from ..core.rundir import RunDir
from .runconfig import (NOTEBOOKS, OPTIONAL_STAGES, available_stages, check_parameters, check_run_dir,
                        declared_parameters, load_params, resolve_stage, resolve_stage_keys, stage_values,
                        without_iri_format_checker)

# --------------------------------------------------------------------------- progress


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000


def _shown(path: Path) -> str:
    """A path relative to where the user stands when it is below it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Progress:
    """The live line of one stage: cells done / total, elapsed time, the running cell's own progress.

    papermill's engine calls `begin`, `cell_start` and `cell_done`; the cells' stdout/stderr
    arrive through `write` (the last line is kept, so a text tqdm bar shows its latest state)
    and their widget messages through `message` (tqdm.auto in a kernel draws an ipywidgets bar).
    A thread redraws the line every `every` seconds: in place on a terminal, else a plain line.
    """

    def __init__(self, stage: str, stream=None, every: float | None = None):
        self.stage, self.stream = stage, stream
        self.tty = bool(stream is not None and getattr(stream, "isatty", lambda: False)())
        self.every = every if every is not None else (0.5 if self.tty else 30.0)
        self.fill = "█" if "utf" in (getattr(stream, "encoding", None) or "").lower() else "#"
        self.done = self.total = 0
        self.detail, self.bar = "", None
        self.notices: list[str] = []
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = None

    def begin(self, nb) -> None:
        self.total = sum(c.cell_type == "code" and bool(c.source.strip()) for c in nb.cells)

    def cell_start(self, **_) -> None:
        self.detail, self.bar = "", None

    def cell_done(self, **_) -> None:
        self.done += 1

    def write(self, text: str) -> None:
        lines = [s.strip() for s in re.split(r"[\r\n]", text) if s.strip()]
        for line in lines:  # what the stage says it did not do (progress.notice): shown now and in the summary
            if line.startswith(NOTICE) and line[len(NOTICE):] not in self.notices:
                self.notices.append(line[len(NOTICE):])
                if self.stream is not None:
                    self.stream.write(("\r\x1b[K" if self.tty else "") + f"[workbench] {self.stage}: "
                                      f"notice: {line[len(NOTICE):]}\n")
                    self.stream.flush()
        if lines:
            self.detail = lines[-1]

    def flush(self) -> None:
        pass

    def message(self, msg: dict, widgets: dict) -> None:
        """Follow the latest tqdm widget bar: an HBox of (text, progress, text)."""
        if msg.get("msg_type") not in ("comm_open", "comm_msg"):
            return
        state = msg.get("content", {}).get("data", {}).get("state", {})
        children = state.get("children") or []
        if state.get("_model_name") == "HBoxModel" and len(children) == 3:
            self.bar = [c.removeprefix("IPY_MODEL_") for c in children]
        if self.bar:
            left, middle, right = (widgets.get(i, {}) for i in self.bar)
            if "max" in middle:
                text = [html.unescape(re.sub(r"<[^>]+>", "", str(w.get("value") or ""))).replace("\u2007", " ").strip()
                        for w in (left, right)]
                filled = int(10 * (middle.get("value") or 0) / (middle["max"] or 1))
                self.detail = f"{text[0]}|{self.fill * min(filled, 10)}{' ' * (10 - min(filled, 10))}| {text[1]}"

    def line(self) -> str:
        cells = f"{self.done}/{self.total} cells" if self.total else "starting the kernel"
        text = f"[workbench] {self.stage}: {cells}, {_duration(time.perf_counter() - self.t0)}"
        return f"{text} | {self.detail}" if self.detail else text

    def draw(self) -> None:
        if self.stream is None:
            return
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            self.stream.write("\r" + self.line()[:width] + "\x1b[K")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def _tick(self) -> None:
        while not self._stop.wait(self.every):
            self.draw()

    def __enter__(self):
        if self.stream is not None:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


@cache
def _register_engine() -> str:
    """papermill's nbclient engine, with a `Progress` watching the cells and the kernel's messages."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.log import logger
    from traitlets import Any

    class Client(PapermillNotebookClient):
        watch = Any(None)

        def process_message(self, msg, cell, cell_index):
            output = super().process_message(msg, cell, cell_index)
            self.watch.message(msg, self.widget_state)
            return output

    class Engine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man, kernel_name, watch=None, kernel_log=None, kernel=None,
                                     start_timeout=60, **_):
            watch.begin(nb_man.nb)
            client = Client(nb_man, km=kernel.manager, kernel_name=kernel_name, startup_timeout=start_timeout,
                            log=logger, watch=watch, stdout_file=watch, stderr_file=watch,
                            on_cell_execute=watch.cell_start, on_cell_executed=watch.cell_done)
            try:
                if kernel.manager is not None:  # a kernel kept from the previous stage
                    return client.execute()
                # The kernel process's own output (its start-up warnings, C libraries) goes to a file, not
                # across the progress line; what the cells print still arrives through `watch`. The
                # process keeps its own copy of the file descriptor once started.
                with open(kernel_log, "ab") as log:
                    if kernel.keep:  # ours from here: nbclient leaves it running at the end
                        kernel.manager, client.owns_km = client.create_kernel_manager(), False
                        kernel.log_path = kernel_log
                    return client.execute(stdout=log, stderr=log)
            finally:
                if kernel.keep and client.kc is not None:
                    client.kc.stop_channels()  # the next stage opens its own

    papermill_engines.register("workbench", Engine)
    return "workbench"


class Kernel:
    """The kernel a run's stages share (keep=True), or none kept (a fresh kernel per stage).

    Shared, a stage after the first finds torch, transformers and the models' code imported and
    the session caches (`report.encode_texts`'s feature caches, BERTScore's token vectors) filled;
    starting a kernel and importing them costs about 7 s of CPU per stage on 2 cores. Each
    stage still starts from an empty namespace (the shell's reset, figures closed): a notebook that
    used a name it did not define fails as it would alone.
    """

    # What `%reset -f` does, less the magic's second full garbage collection (the shell's reset runs one): each
    # takes about 0.35 s with torch and transformers loaded, a cost every stage paid twice.
    RESET = "get_ipython().reset(new_session=False)\nimport matplotlib.pyplot as _plt\n_plt.close('all')\ndel _plt"

    def __init__(self, keep: bool = True):
        self.keep, self.manager = keep, None
        self.log_path: Path | None = None  # where the kept kernel's own output goes (set when it starts)

    def reset(self, cwd: str | os.PathLike | None = None) -> None:
        """Empty the kept kernel's namespace before the next stage, in `cwd` (the run directory: a
        kernel passed from one run to the next started in the first one); a dead kernel is replaced."""
        if self.manager is None:
            return
        from jupyter_core.utils import run_sync

        if not run_sync(self.manager.is_alive)():
            self.close()
            return
        client = self.manager.blocking_client()
        client.start_channels()
        try:
            code = self.RESET + (f"\nimport os as _os\n_os.chdir({str(cwd)!r})\ndel _os" if cwd else "")
            reply = client.execute_interactive(code, silent=True, store_history=False, timeout=120)
            if reply["content"]["status"] != "ok":
                raise RuntimeError(f"resetting the kernel between stages failed: {reply['content']}")
        finally:
            client.stop_channels()

    def close(self) -> None:
        if self.manager is not None:
            from jupyter_core.utils import run_sync

            try:
                run_sync(self.manager.shutdown_kernel)(now=True)
            except Exception:  # already gone (it died, or was killed with the run)
                pass
            self.manager = None


def _snapshot(folder: Path) -> dict:
    return {p: (s.st_size, s.st_mtime_ns) for p in folder.rglob("*") if p.is_file() for s in [p.stat()]}


def _written(before: dict, after: dict, run_path: Path, skip: tuple) -> dict:
    """{top-level name in the run directory: {"files", "bytes"}} of what changed; folders end in '/'."""
    out: dict = {}
    for path, (size, _) in sorted(after.items()):
        if before.get(path) == after[path] or path in skip or path.suffix == ".lock":
            continue
        parts = path.relative_to(run_path).parts
        entry = out.setdefault(parts[0] + ("/" if len(parts) > 1 else ""), {"files": 0, "bytes": 0})
        entry["files"] += 1
        entry["bytes"] += size
    return out


def summary(results: dict, run_path: Path) -> str:
    """What each stage wrote (top-level artifacts and sizes), its time and its report."""
    total = sum(r["seconds"] for r in results.values())
    lines = []
    maps = [Path(r["html"]).with_name("05_map.html") for r in results.values() if r.get("html")]
    if any(m.is_file() for m in maps):  # the main output first: the map to open in a browser
        lines.append(f"[workbench] the map: {_shown(next(m for m in maps if m.is_file()))} (open it in a browser)")
    lines.append(f"[workbench] {len(results)} stage(s) in {_duration(total)}, run directory {_shown(run_path)}:")
    for stage, r in results.items():
        wrote = ", ".join(f"{name} ({_size(a['bytes'])}" + (f", {a['files']} files)" if name.endswith("/") else ")")
                          for name, a in r["artifacts"].items()) or "no new files"
        lines.append(f"  {stage:<13} {_duration(r['seconds']):>7}  {wrote}")
        if r.get("html"):
            lines.append(f"  {'':<13} {'':>7}  report {_shown(Path(r['html']))}")
        lines += [f"  {'':<13} {'':>7}  notice: {n}" for n in r.get("notices", [])]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class ExecutionOptions:
    """Where `run_pipeline` finds the notebooks, which kernel runs them, and what the reports show.

    notebook_dir: the folder of the stage notebooks. The stages share one kernel, each from an
    empty namespace (see `Kernel`); kernel_per_stage=True starts a fresh one for each. The
    kernel's own output goes to ``kernel.log`` in the run directory (``<stage>.kernel.log`` with a
    kernel per stage). kernel: a `Kernel(keep=True)` to run the stages in and leave running for
    the caller's next run (the caller closes it); its own output stays in the log of the run that
    started it. report_code: the HTML reports show the notebooks' code as well. redo: run every stage,
    even those an interrupted run of the same command finished (resume.py).
    """

    notebook_dir: Path = NOTEBOOKS
    kernel_per_stage: bool = False
    kernel: Kernel | None = None
    report_code: bool = False
    redo: bool = False


@dataclass(frozen=True)
class _CheckedRun:
    """What `run_pipeline`'s checks settled before the first notebook starts."""

    config: dict
    run_path: Path
    report_path: Path
    resolved: list[str]
    declared: dict = field(repr=False)


def run_pipeline(params_file: str | os.PathLike | None = None, *, run_dir: str | None = None,
                 stages: list[str] | None = None, overrides: dict | None = None, report: bool = True,
                 log=print, progress: bool = True, execution: ExecutionOptions = ExecutionOptions()) -> dict:
    """Execute the chosen notebooks in order with papermill; returns {stage: {"notebook", "html", "seconds",
    "artifacts"}} of the stages this call ran. run.json in the run directory keeps every stage the run directory
    ever completed, each written as it completes, with what a re-run changed (record.py).

    Everything is checked before the first notebook starts (parameters, paths, the run directory).
    A stage that fails stops the run; its partly executed notebook is kept in the run directory
    (papermill marks the failing cell) and the error names it. `progress` shows the live line
    on stdout (see `Progress`). The notebooks' folder, the kernel and the reports' code are
    `execution` (an `ExecutionOptions`).

    The same command started again after a kill or a failed stage skips the stages it finished and goes
    on from there (resume.py: same parameters, stages and input files); `execution.redo` runs every stage.
    """
    notebook_dir = execution.notebook_dir
    config = load_params(params_file, overrides)
    run_path = Path(run_dir or config.get("run_dir") or "runs/default").expanduser().resolve()
    report_path = Path(config.get("report_dir") or Path("reports") / run_path.name).expanduser().resolve()
    known = available_stages(notebook_dir)
    default = [s for s in known if s not in OPTIONAL_STAGES]
    resolved = [resolve_stage(stage, known) for stage in stages or config.get("stages") or default]
    config["stage_parameters"] = resolve_stage_keys(config["stage_parameters"], known)
    declared = {stage: declared_parameters(notebook_dir / f"{stage}.ipynb") for stage in known}
    check_parameters(config, declared, resolved, log)  # names, types and ranges, before any stage runs
    check_corpus(config, declared, resolved, log)  # loaded as the stages load it: what would fail them, now
    check_run_dir(run_path, notebook_dir, resolved)
    if report or any("report_dir" in declared[stage] for stage in resolved):
        claim_report_dir(report_path, run_path)  # refused when it holds another run's reports (same folder name)

    run_path.mkdir(parents=True, exist_ok=True)
    # One run at a time in a run directory: a second one is refused here, before it writes anything.
    with RunLock(run_path, "workbench run --stages " + ",".join(resolved)):
        return _run_locked(_CheckedRun(config, run_path, report_path, resolved, declared), report, log, progress,
                           execution)


def _keep_stage(stage: str, entry: dict, params: dict, run_path: Path, report_path: Path | None,
                report_code: bool) -> dict:
    """A stage that ran: its report exported (report_path None: none) and the stage added to run.json at once,
    keeping every stage completed before (record.py); returns the entry. A write that fails names its file."""
    record = written = RunDir(run_path).run_record  # the file a failed write names
    try:
        if report_path is not None:
            written = report_path / f"{stage}.html"
            entry["html"] = str(export_html(Path(entry["notebook"]), written, code=report_code))
            written = record
        record_stage(run_path, stage, entry, params)
    except OSError as exc:
        raise RuntimeError(f"stage {stage} ran, but {exc.filename or written} could not be written: "
                           f"{exc.strerror or exc}") from None
    return entry


def _kernel_log(kernel: Kernel, run_path: Path, stage: str) -> Path:
    """Where the kernel's own output goes. A kept kernel writes where it started (a kernel passed in from an
    earlier run: that run's log); a kernel per stage, to its stage's log, emptied first."""
    if kernel.manager is not None:
        return kernel.log_path
    kernel_log = run_path / ("kernel.log" if kernel.keep else f"{stage}.kernel.log")
    if not kernel.keep:
        kernel_log.unlink(missing_ok=True)
    return kernel_log


def _run_locked(checked: _CheckedRun, report: bool, log, progress: bool, execution: ExecutionOptions) -> dict:
    """`run_pipeline` once its checks have passed and it holds the run directory's lock."""
    without_iri_format_checker()
    import papermill
    from nbclient.exceptions import DeadKernelError

    config, run_path, report_path = checked.config, checked.run_path, checked.report_path
    resolved, declared, kernel = checked.resolved, checked.declared, execution.kernel

    RunDir(run_path).mark()  # with the first artifact: this folder is a run, and its caches are ours to clean
    write_text(RunDir(run_path).params, yaml.safe_dump({**config, "run_dir": str(run_path)}, sort_keys=False))
    engine = _register_engine()
    own_kernel = kernel is None
    if own_kernel:
        kernel = Kernel(keep=not execution.kernel_per_stage)
    elif execution.kernel_per_stage or not kernel.keep:
        raise ValueError("kernel= takes a Kernel(keep=True) to share; leave it out for a kernel per stage")
    if kernel.keep and kernel.manager is None:
        (run_path / "kernel.log").unlink(missing_ok=True)  # this run's kernel only
    results = {}
    command = Unfinished(run_path, command_fingerprint(config, resolved, report, run_path), redo=execution.redo)
    command.write()
    try:
        for stage in resolved:
            if stage in command.finished_before:
                log(f"[workbench] {stage}: finished before this command was interrupted; skipped (--redo runs it)")
                continue
            source = execution.notebook_dir / f"{stage}.ipynb"
            params = stage_values(config, stage, declared[stage])  # as check_parameters checked them
            params["run_dir"] = str(run_path)
            if "report_dir" in declared[stage]:  # stages that write their own report files (05's standalone map)
                params["report_dir"] = str(report_path)
            executed = run_path / f"{stage}.ipynb"
            # papermill writes the notebook as it runs: under a temporary name, renamed once whole (a full
            # disk or a kill leaves the earlier notebook, never a torn one).
            running = run_path / f".{stage}.running.ipynb"
            log(f"[workbench] {stage}: executing {source.name} -> {_shown(executed)}")
            before, t0 = _snapshot(run_path), time.perf_counter()
            kernel.reset(run_path)
            kernel_log = _kernel_log(kernel, run_path, stage)
            try:
                with Progress(stage, sys.stdout if progress else None) as watch, warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message="Cell is missing an id field")
                    papermill.execute_notebook(str(source), str(running), parameters=params, engine_name=engine,
                                               kernel_name=config.get("kernel", "python3"), cwd=str(run_path),
                                               progress_bar=False, watch=watch, kernel_log=kernel_log, kernel=kernel)
                replace_from(running, executed)
            except OSError as exc:
                running.unlink(missing_ok=True)
                if results:
                    log(summary(results, run_path))
                raise RuntimeError(f"stage {stage} could not write {exc.filename or running}: {exc.strerror or exc}; "
                                   f"free some space (or fix the folder's permissions), then go on with --stages "
                                   f"{','.join(resolved[resolved.index(stage):])}") from None
            except (papermill.PapermillExecutionError, DeadKernelError) as exc:
                if running.exists():  # the notebook with the failing cell marked, whole: keep it for the user
                    replace_from(running, executed)
                if results:
                    log(summary(results, run_path))
                cell = f"cell {exc.exec_count}: {exc.ename}: {exc.evalue}" if hasattr(exc, "ename") else \
                    f"cell {watch.done + 1}: the kernel died (out of memory?); its last words are in {kernel_log}"
                rest = ",".join(resolved[resolved.index(stage):])
                raise RuntimeError(f"stage {stage} failed in {cell}\nThe executed notebook with the error is "
                                   f"{executed}; once fixed, go on with --stages {rest}") from None
            entry = {"notebook": str(executed), "seconds": round(time.perf_counter() - t0, 1),
                     "artifacts": _written(before, _snapshot(run_path), run_path, (executed, kernel_log)),
                     "notices": list(watch.notices)}
            results[stage] = _keep_stage(stage, entry, params, run_path, report_path if report else None,
                                         execution.report_code)
            command.finished(stage)
            log(f"[workbench] {stage}: done in {_duration(entry['seconds'])}, {watch.done} cells")
        command.complete()
    finally:
        if own_kernel:
            kernel.close()
    log(summary(results, run_path))
    return results

