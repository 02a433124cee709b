"""Faults injected on purpose: a full disk (a real tmpfs, so what papermill and C code write is
caught too), two runs at once, a corrupt metrics file. A run directory is left whole and current,
or the run is refused clearly, and the next run on a freed disk succeeds."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workbench.core.files import RunLock, RunLockedError, write_json, write_text
from workbench.run.runner import ExecutionOptions, run_pipeline

KERNEL = {"name": "python3", "language": "python", "display_name": "Python 3"}


def _notebooks(folder: Path, code: dict[str, str]) -> Path:
    import nbformat

    folder.mkdir(parents=True, exist_ok=True)
    for stage, source in code.items():
        cells = [nbformat.v4.new_code_cell("run_dir = '.'\nsize = 0\nsleep = 0.0", metadata={"tags": ["parameters"]}),
                 nbformat.v4.new_code_cell(source)]
        nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": KERNEL}), folder / f"{stage}.ipynb")
    return folder


def _hashes(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() + str(p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MB tmpfs (root only: CI runs as root), unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs as root and must be able to mount a tmpfs: {done.stderr.decode()}")
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_write_on_a_full_disk_leaves_the_old_file_whole_and_no_temporary(small_disk):
    target = small_disk / "metrics.json"
    write_json(target, {"old": 1})
    (small_disk / "filler").write_bytes(b"\0" * (2 * 1024 * 1024 - 64 * 1024))  # fill the disk but a few blocks
    with pytest.raises(OSError) as caught:
        write_text(target, "x" * 500_000)
    assert caught.value.errno == 28  # ENOSPC from the real filesystem
    assert target.read_text() == '{\n  "old": 1\n}\n'
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler", "metrics.json"]


@pytest.mark.slow
def test_a_full_disk_names_the_stage_and_file_and_the_next_run_succeeds(small_disk, tmp_path):
    # The stage fills the disk, then its notebook cannot be saved: papermill's own write fails.
    code = {"01_fill": "from pathlib import Path\nPath('fill.bin').write_bytes(b'1' * size)\nprint('x' * 400_000)"}
    notebooks = _notebooks(tmp_path / "notebooks", code)
    run = small_disk / "run"
    with pytest.raises(RuntimeError) as caught:
        run_pipeline(None, run_dir=str(run), report=False, progress=False,
                     log=lambda *a: None, overrides={"size": 1_900_000},
                     execution=ExecutionOptions(notebook_dir=notebooks))
    message = str(caught.value)
    assert "01_fill" in message and str(run) in message and "space" in message, message
    assert not list(run.glob(".*.ipynb"))  # no torn notebook left to be misread
    (run / "fill.bin").unlink()  # the user frees the disk and runs again
    run_pipeline(None, run_dir=str(run), report=False, progress=False,
                 log=lambda *a: None, overrides={"size": 10}, execution=ExecutionOptions(notebook_dir=notebooks))
    assert (run / "01_fill.ipynb").is_file() and (run / "fill.bin").read_bytes() == b"1" * 10


def test_a_lock_is_refused_while_held_and_free_once_its_holder_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom workbench.core.files import RunLock\n"
        f"with RunLock({str(tmp_path)!r}, 'the holder'):\n    print('held', flush=True)\n    time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _hashes(tmp_path)
        with pytest.raises(RunLockedError, match=rf"pid {holder.pid} .*the holder.*Nothing was written"):
            with RunLock(tmp_path):
                pass
        assert _hashes(tmp_path) == before
    finally:
        holder.kill()  # SIGKILL: no clean-up runs, the kernel drops the flock
        holder.wait()
    with RunLock(tmp_path, "the next run"):
        assert "the next run" in (tmp_path / ".workbench.lock").read_text()


@pytest.mark.slow
def test_two_runs_at_once_one_refuses_and_changes_nothing(tmp_path):
    code = {"01_slow": "import time\nfrom pathlib import Path\nPath('started').write_text('1')\ntime.sleep(sleep)\n"
                       "Path('finished').write_text('1')"}
    notebooks = _notebooks(tmp_path / "notebooks", code)
    run = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-c", (
        "from workbench.run.runner import ExecutionOptions, run_pipeline\n"
        f"run_pipeline(None, run_dir={str(run)!r}, report=False, progress=False, overrides={{'sleep': 8.0}}, "
        f"execution=ExecutionOptions(notebook_dir=__import__('pathlib').Path({str(notebooks)!r})))")], stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not (run / "started").exists():
            assert time.time() < deadline and first.poll() is None, "the first run did not start its stage"
            time.sleep(0.2)
        before = _hashes(run)
        with pytest.raises(RunLockedError, match=f"pid {first.pid}"):
            run_pipeline(None, run_dir=str(run), report=False, progress=False,
                         log=lambda *a: None, overrides={"sleep": 0.0},
                         execution=ExecutionOptions(notebook_dir=notebooks))
        assert _hashes(run) == before  # nothing created, nothing changed
        assert first.wait(90) == 0 and (run / "finished").exists()
    finally:
        if first.poll() is None:
            first.kill()


@pytest.mark.slow
def test_a_notice_of_a_stage_reaches_the_terminal_and_the_closing_summary(tmp_path, capsys):
    """What a stage did not do (decoding off, a table skipped) is not found only inside its report."""
    code = {"01_note": "from workbench.core.progress import notice\nnotice('decoding off: no decoders in this run')\n"
                       "print('an ordinary line')"}
    notebooks = _notebooks(tmp_path / "notebooks", code)
    logged = []
    results = run_pipeline(None, run_dir=str(tmp_path / "run"), report=False,
                           log=logged.append, execution=ExecutionOptions(notebook_dir=notebooks))
    printed = capsys.readouterr().out
    assert "[workbench] 01_note: notice: decoding off: no decoders in this run" in printed
    assert "ordinary line" not in printed
    assert results["01_note"]["notices"] == ["decoding off: no decoders in this run"]
    assert "notice: decoding off: no decoders in this run" in logged[-1]  # the closing summary


@pytest.mark.slow
def test_reports_show_results_without_code_unless_asked(tmp_path, monkeypatch):
    """A report is for a reader: no code, no counters, one parameters table, provenance at the end."""
    code = {"01_show": "print('the result ' + 'is 42')"}
    notebooks = _notebooks(tmp_path / "notebooks", code)
    monkeypatch.chdir(tmp_path)  # reports go to reports/<run name> under the current directory
    for keep, run in ((False, "plain"), (True, "with_code")):
        run_pipeline(None, run_dir=str(tmp_path / run), progress=False, log=lambda *a: None,
                     overrides={"size": 3}, execution=ExecutionOptions(notebook_dir=notebooks, report_code=keep))
        page = (tmp_path / "reports" / run / "01_show.html").read_text()
        assert "the result is 42" in page
        assert ('jp-InputArea-editor' in page.split('<body')[1]) == keep  # the code cells themselves
        assert ('[1]:' in page.split('<body')[1]) == keep  # their counters
    plain = (tmp_path / "reports" / "plain" / "01_show.html").read_text()
    assert plain.count("Parameters of this run") == 1 and "<code>size</code></td><td>3</td>" in plain
    assert "Provenance" in plain and "torch " in plain
