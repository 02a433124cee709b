"""A run directory is ours only if it says so (issue 41, items 1 and 9).

`workbench runs --clean` took any folder with `maps/` or `metrics.json` for a run and deleted its
`features/` and `embeddings/` without asking; a symbolic link among them stopped it half-way;
`check_run_dir` let a run write into the checkout's root and the folders git tracks. Every test
works on a scratch copy under tmp_path and checks hand-made folders byte for byte.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import workbench
from workbench.cli import main
from workbench.core.rundir import MARKER_NAME, RunDir
from workbench.run.runconfig import NOTEBOOKS, RunConfigError, check_run_dir
from workbench.run.runs import RefusedError, clean_caches, mark_run, plan_clean, run_table

ROOT = Path(workbench.__file__).resolve().parents[1]
OLD_RUN = ROOT / "tests" / "data" / "run_made_before_rundir"


def _snapshot(folder: Path) -> dict:
    """Every entry under `folder`: a file's bytes, a folder's name, a link's target."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        seen[key] = ("link", os.readlink(path)) if path.is_symlink() else ("dir",) if path.is_dir() else \
            ("file", path.read_bytes()) if path.is_file() else ("other",)  # a FIFO is never read
    return seen


def _hand_made(tmp_path: Path) -> tuple[Path, Path]:
    """The issue's two folders of a user's own that `--clean` took for runs."""
    proj = tmp_path / "proj"
    (proj / "maps").mkdir(parents=True)
    (proj / "embeddings").mkdir()
    (proj / "embeddings" / "my_vectors.npy").write_bytes(b"\x93NUMPY my own vectors")
    (proj / "features").mkdir()
    (proj / "features" / "hand_made_features.csv").write_text("id,f1\n1,0.5\n")
    proj2 = tmp_path / "proj2"
    (proj2 / "embeddings").mkdir(parents=True)
    (proj2 / "embeddings" / "glove.txt").write_text("the 0.1 0.2\n")
    (proj2 / "metrics.json").write_text('{"mine": 1}')
    return proj, proj2


def _cache_file(run: Path, name: str, size: int) -> Path:
    """A cache file as a cache writer leaves it: in place, whole, then recorded in the run's ledger."""
    path = run / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"1" * size)
    RunDir(run).record_cache(path)
    return path


def _marked_run(folder: Path) -> Path:
    """A run as the runner leaves it: results, both caches with their files recorded, and the marker."""
    (folder / "aspect_models").mkdir(parents=True)
    (folder / "summaries.jsonl").write_text("{}\n")
    (folder / "aspect_models" / "split.json").write_text('{"train": [], "validation": []}')
    RunDir(folder).mark()
    _cache_file(folder, "features/minilm/shard-00001.safetensors", 5000)
    _cache_file(folder, "embeddings/e.safetensors", 1000)
    return folder


def test_a_hand_made_folder_is_refused_and_left_byte_for_byte(tmp_path):
    """proj/ (maps/, embeddings/, features/) and proj2/ (metrics.json, embeddings/) lost both folders."""
    for folder in _hand_made(tmp_path):
        before = _snapshot(folder)
        assert not RunDir(folder).is_run()  # maps/, embeddings/ or metrics.json do not make a run
        with pytest.raises(RefusedError, match=f"no {MARKER_NAME}.*not a run.*Nothing was deleted"):
            clean_caches(folder)
        with pytest.raises(RefusedError, match="not a run"):
            mark_run(folder)
        assert _snapshot(folder) == before  # not even a lock file was written into it
    assert run_table(tmp_path) == []  # and neither is listed as a run


def test_the_command_line_refuses_a_hand_made_folder(tmp_path):
    proj, _ = _hand_made(tmp_path)
    before = _snapshot(proj)
    done = subprocess.run([sys.executable, "-m", "workbench", "runs", "--clean", str(proj), "--yes"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert MARKER_NAME in done.stderr and "Nothing was deleted" in done.stderr and "freed" not in done.stdout
    assert _snapshot(proj) == before


def test_a_marked_run_is_cleaned_only_after_listing_and_with_yes(tmp_path, capsys, monkeypatch):
    run = _marked_run(tmp_path / "runs" / "demo")
    (tmp_path / "runs" / "notes").mkdir()  # a folder of the user's beside the runs
    results = {p: b for p, b in _snapshot(run).items() if not p.startswith(("features", "embeddings"))}
    assert main(["runs", "--clean", str(run)]) == 2  # pytest's stdin is no terminal: nobody to confirm
    captured = capsys.readouterr()
    assert "add --yes" in captured.err and "nothing was deleted" in captured.err
    assert f"{run}/features/minilm/  1 file, 5.0 kB" in captured.out and f"{run}/embeddings/  1 file, 1.0 kB" in \
        captured.out
    assert (run / "features").is_dir() and (run / "embeddings").is_dir()
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert main(["runs", "--clean", str(run)]) == 1 and (run / "features").is_dir()
    capsys.readouterr()
    assert main(["runs", "--clean", str(run), "--yes"]) == 0
    assert "6.0 kB freed" in capsys.readouterr().out
    assert not (run / "features").exists() and not (run / "embeddings").exists()
    assert {p: b for p, b in _snapshot(run).items() if p != ".workbench.lock"} == results  # results stay
    assert main(["runs", str(tmp_path / "runs")]) == 0
    listing = capsys.readouterr().out
    assert "demo" in listing and "notes" not in listing and "unmarked" not in listing


def test_a_symbolic_link_or_a_fifo_among_the_caches_stays(tmp_path, capsys):
    """An `embeddings/` link made --clean delete features/, then stop naming no path. A link or a FIFO is not
    a file the run wrote: it stays, named, with what it points to, and the run's own files go."""
    run = _marked_run(tmp_path / "run")
    elsewhere = tmp_path / "my_embeddings"
    elsewhere.mkdir()
    (elsewhere / "precious.npy").write_bytes(b"keep me")
    shutil.rmtree(run / "embeddings")
    (run / "embeddings").symlink_to(elsewhere, target_is_directory=True)
    fifo = tmp_path / "fifo_run"
    _marked_run(fifo)
    shutil.rmtree(fifo / "embeddings")
    os.mkfifo(fifo / "embeddings")
    assert plan_clean(fifo).kept == [(fifo / "embeddings", "neither a file nor a folder")]
    assert clean_caches(fifo) == 5000 and (fifo / "embeddings").exists() and not (fifo / "features").exists()
    assert main(["runs", "--clean", str(run), "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"{run / 'embeddings'}  a symbolic link (to {elsewhere}): kept, and what it points to" in out
    assert (run / "embeddings").is_symlink() and not (run / "features").exists()
    assert (elsewhere / "precious.npy").read_bytes() == b"keep me"


def test_a_marker_names_only_caches_inside_its_folder(tmp_path):
    """An edited marker cannot send --clean to a result or out of the folder."""
    run = _marked_run(tmp_path / "run")
    (tmp_path / "victim").mkdir()
    for caches in (["features", "../victim"], ["aspect_models"], "features"):
        marker = json.loads(RunDir(run).marker.read_text())
        RunDir(run).marker.write_text(json.dumps({**marker, "caches": caches}))
        before = _snapshot(tmp_path)
        with pytest.raises(RefusedError, match=MARKER_NAME):
            clean_caches(run)
        assert _snapshot(tmp_path) == before


def test_an_old_run_is_marked_then_cleaned(tmp_path, capsys):
    """A run made before the marker: listed as unmarked, refused with the way out, cleaned once marked."""
    old = tmp_path / "runs" / "old"
    shutil.copytree(OLD_RUN, old)
    (old / "embeddings").mkdir()
    (old / "embeddings" / "0123456789abcdef.safetensors").write_bytes(b"1" * 2000)  # named as stage 03 names it
    (old / "embeddings" / "NOTES.md").write_text("mine\n")
    assert main(["runs", str(tmp_path / "runs")]) == 0
    assert "unmarked" in capsys.readouterr().out
    assert main(["runs", "--clean", str(old), "--yes"]) == 2
    assert f"workbench runs --mark {old}" in capsys.readouterr().err and (old / "embeddings").is_dir()
    assert main(["runs", "--mark", str(old)]) == 0
    out = capsys.readouterr().out
    assert "embeddings/" in out and "adopted 1 cache file" in out  # the note is not adopted
    assert main(["runs", "--clean", str(old), "--yes"]) == 0
    assert "NOTES.md  not written by this run" in capsys.readouterr().out
    assert os.listdir(old / "embeddings") == ["NOTES.md"] and (old / "unified_model" / "model.safetensors").is_file()
    assert [r["marked"] for r in run_table(tmp_path / "runs")] == [True]


def test_the_checkout_and_its_tracked_folders_are_never_run_directories(tmp_path, capsys):
    """check_run_dir accepted the checkout's root, docs/ and tests/data/run_made_before_rundir."""
    for folder in (ROOT, ROOT / "docs", OLD_RUN, ROOT.parent):
        with pytest.raises(RunConfigError, match="Give a folder of its own"):
            check_run_dir(folder, NOTEBOOKS, ["01_generate"])
    repo = tmp_path / "my_repo"
    (repo / ".git").mkdir(parents=True)
    with pytest.raises(RunConfigError, match="holds .git"):
        check_run_dir(repo, NOTEBOOKS, ["01_generate"])
    check_run_dir(ROOT / "runs" / "my-run", NOTEBOOKS, ["01_generate"])  # git ignores runs/
    check_run_dir(ROOT / "reports" / "my-run", NOTEBOOKS, ["01_generate"])
    before = _snapshot(OLD_RUN)
    assert main(["runs", "--mark", str(OLD_RUN)]) == 2 and "tracked by git" in capsys.readouterr().err
    assert main(["runs", "--mark", str(ROOT)]) == 2 and "checkout" in capsys.readouterr().err
    assert _snapshot(OLD_RUN) == before and not (ROOT / MARKER_NAME).exists()


def test_the_runner_marks_a_run_but_not_what_was_there_before(tmp_path, monkeypatch):
    """The marker comes with the first artifact; a folder of the user's own keeps its `embeddings/`."""
    import papermill

    from workbench.run.runner import run_pipeline

    def fake_execute(source, executed, **kwargs):  # what papermill would leave: the notebook
        shutil.copy(source, executed)

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    proj, _ = _hand_made(tmp_path)
    mine = _snapshot(proj / "embeddings")
    run_pipeline(None, run_dir=str(proj), stages=["01_generate"], report=False, log=lambda *a: None, progress=False)
    assert RunDir(proj).read_marker()["by"] == "workbench run" and (proj / "params.yaml").is_file()
    assert RunDir(proj).marked_caches() == []  # both were there before the run: theirs
    (tmp_path / "fresh").mkdir()
    RunDir(tmp_path / "fresh").mark()  # a new run's folder: every cache in it will be ours
    assert RunDir(tmp_path / "fresh").marked_caches() == ["features", "embeddings"]
    assert plan_clean(proj).delete == [] and _snapshot(proj / "embeddings") == mine


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          timeout=30).stdout


def test_a_run_under_git_loses_only_the_files_it_wrote_and_only_when_asked(tmp_path, capsys):
    """A run folder committed to git, with the user's features/NOTES.md: --clean deleted the tracked caches, the note
    included, and rewrote the tracked .workbench.lock, saying neither."""
    import numpy as np

    from workbench.core.files import RunLock
    from workbench.embed.features import FeatureCache, FrozenBackbone

    repo = tmp_path / "project"
    run = repo / "run"
    run.mkdir(parents=True)
    _git(repo, "init", "-q")
    (run / "summaries.jsonl").write_text("{}\n")
    RunDir(run).mark()
    with RunLock(run, "workbench run"):  # the lock file a run leaves behind
        cache = FeatureCache.for_run(run, FrozenBackbone("minilm"))  # the real writer: shards and their records
        cache.add(["a text", "another text"], np.ones((2, 8), dtype=np.float32))
    _cache_file(run, "embeddings/0123456789abcdef.safetensors", 3000)
    (run / "features" / "NOTES.md").write_text("what I learnt from these vectors\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=u", "-c", "user.email=u@example.org", "commit", "-q", "-m", "my run")
    before = _snapshot(run)

    done = subprocess.run([sys.executable, "-m", "workbench", "runs", "--clean", str(run), "--yes"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "git tracks 4 of the files" in done.stderr and "--include-tracked" in done.stderr
    assert str(run / "embeddings" / "0123456789abcdef.safetensors") in done.stderr and "NOTES" not in done.stderr
    assert _snapshot(run) == before and _git(repo, "status", "--porcelain") == ""

    assert main(["runs", "--clean", str(run), "--yes", "--include-tracked"]) == 0
    out = capsys.readouterr().out
    assert f"{run / 'features' / 'NOTES.md'}  not written by this run" in out and "4 cache files" in out
    shards = f"run/features/{FrozenBackbone('minilm').key}/"
    assert sorted(_git(repo, "status", "--porcelain").splitlines()) == sorted(
        f" D {name}" for name in ["run/embeddings/0123456789abcdef.safetensors", shards + ".workbench.lock",
                                  shards + "shard-00001.json", shards + "shard-00001.safetensors"])
    assert not (run / "embeddings").exists() and os.listdir(run / "features") == ["NOTES.md"]  # emptied folders go


def test_a_forged_ledger_deletes_nothing_and_a_changed_file_stays(tmp_path):
    """The ledger names what --clean deletes: a line naming a path out of the caches refuses the clean; a
    recorded file reached through a link, or overwritten since, stays and is named."""
    run = _marked_run(tmp_path / "run")
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"1" * 7)
    (tmp_path / "result.json").write_text("{}")
    ledger = RunDir(run).cache_ledger.read_text()
    for forged in ["../victim.txt", str(victim), "aspect_models/split.json", "features/../../victim.txt",
                   "features", "features/./minilm/shard-00001.safetensors"]:
        RunDir(run).cache_ledger.write_text(ledger + json.dumps({"path": forged, "bytes": 7}) + "\n")
        before = _snapshot(tmp_path)
        with pytest.raises(RefusedError, match="not a ledger workbench wrote"):
            clean_caches(run)
        assert _snapshot(tmp_path) == before
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "v.npy").write_bytes(b"1" * 7)
    (run / "features" / "linked").symlink_to(elsewhere, target_is_directory=True)
    (run / "embeddings" / "e.safetensors").write_bytes(b"mine now")  # overwritten by the user
    RunDir(run).cache_ledger.write_text(ledger + json.dumps({"path": "features/linked/v.npy", "bytes": 7}) + "\n"
                                        + '{"path": "features/min')  # and a torn last line: passed over
    plan = plan_clean(run)
    assert [e.path for e in plan.delete] == [run / "features" / "minilm" / "shard-00001.safetensors"]
    assert dict(plan.kept) == {run / "features" / "linked": f"a symbolic link (to {elsewhere}): kept, and what it "
                                                            f"points to",
                               run / "embeddings" / "e.safetensors": "changed since the run wrote it (8 B now, "
                                                                     "1.0 kB written)"}
    assert clean_caches(run) == 5000
    assert (elsewhere / "v.npy").is_file() and (run / "embeddings" / "e.safetensors").read_bytes() == b"mine now"


def test_a_run_reached_through_a_link_is_listed_once_under_its_real_path(tmp_path):
    runs, outside = tmp_path / "runs", tmp_path / "elsewhere" / "big"
    for run in (runs / "demo", outside):
        run.mkdir(parents=True)
        (run / "summaries.jsonl").write_text("{}\n")
        RunDir(run).mark()
    (runs / "alias").symlink_to(runs / "demo", target_is_directory=True)
    (runs / "big").symlink_to(outside, target_is_directory=True)
    assert [row["run"] for row in run_table(runs)] == sorted([str(runs / "demo"), str(outside)])
