"""Every script under benchmarks/ runs in smoke mode (`--smoke`: tiny sizes, seconds), so none rots unseen.

Each script runs as a user runs it, `python benchmarks/<name>.py --smoke`, in a process of its own
from the repository root, offline and on one thread: a child forked from a launcher that has imported
torch, transformers (its modelling code too), pandas, scikit-learn, the plotting libraries and the workbench
once (`script_launcher.py`; about 6 s less per script),
running the script as `__main__`. The numbers mean nothing at these sizes; the test checks that the
script finishes and prints its table or its ratios.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ["aspect_file", "families", "generate", "train", "heads", "embed", "decode", "decode_synthetic", "maps",
           "weights", "health", "evaluate", "questions", "threads", "runner", "generator_c",
           "check", "corpus_check", "junk_filter", "teach", "teach_speed", "teach_generators",
           "map_labels", "aspect_confidence", "client_inflight", "map_million", "feature_cache", "store_resume",
           "page_million", "stored_embeddings", "pane_million", "map_steps"]
# Smoked by another test module, which already holds what the script needs (a Ray head: one start, not two).
SMOKED_ELSEWHERE = {"ray_engine": "tests/test_ray_engine.py"}
# What a benchmark's results look like: a markdown table row with a number, a ratio such as "2.31x", a line
# naming a ratio with its value, or a fixed-width table row ending in numbers ("challenge head   87.5   50.0").
RESULT = re.compile(r"^\|.*\d.*\|\s*$"
                    r"|\d(\.\d+)?x\b"
                    r"|\bratio\b.*\d"
                    r"|(\s+[-+]?\d+\.\d+){2,}\s*$", re.MULTILINE)


def test_every_benchmark_is_listed():
    found = {p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_")}
    assert found == set(SCRIPTS) | set(SMOKED_ELSEWHERE)
    assert not set(SCRIPTS) & set(SMOKED_ELSEWHERE)
    for name, module in SMOKED_ELSEWHERE.items():  # and that module really runs it
        assert f'"{name}.py"' in (ROOT / module).read_text(), (name, module)


def test_smoke_switch_from_the_flag_or_the_environment(monkeypatch):
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_smoke", ROOT / "benchmarks" / "_smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)

    def parse(argv):
        parser = argparse.ArgumentParser()
        parser.add_argument("--docs", type=int, default=64)
        parser.add_argument("--repeats", type=int, default=3)
        smoke.add_smoke(parser, argv, docs=2, repeats=1)
        return parser.parse_args(argv)

    monkeypatch.delenv(smoke.ENV, raising=False)
    full = parse([])
    assert (full.smoke, full.docs, full.repeats) == (False, 64, 3)
    small = parse(["--smoke"])
    assert (small.smoke, small.docs, small.repeats) == (True, 2, 1)
    assert parse(["--smoke", "--docs", "5"]).docs == 5  # sizes given on the command line win
    monkeypatch.setenv(smoke.ENV, "1")
    from_env = parse([])
    assert (from_env.smoke, from_env.docs, from_env.repeats) == (True, 2, 1)
    monkeypatch.setenv(smoke.ENV, "0")
    assert parse([]).smoke is False


def smoke_env() -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WORKBENCH_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("WORKBENCH_BENCH_SMOKE", None)  # the flag alone must switch smoke mode on
    return env


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    from script_launcher import ScriptLauncher

    started = ScriptLauncher(tmp_path_factory.mktemp("smoke-output"), env=smoke_env())
    yield started
    started.close()


@pytest.mark.slow  # the launcher imports torch, transformers and the workbench: 7 s before its first script
def test_the_launcher_runs_a_script_as_python_does(tmp_path, launcher):
    """argv, __name__, the script's folder on sys.path, the working directory, the environment, exit codes and
    output, a thread still running at the exit waited for, and a timeout that stops the script, as
    `subprocess.run([python, script, ...])` has them."""
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    script = tmp_path / "script.py"
    script.write_text("import os, sys, threading, time\nimport helper\n"
                      "print(__name__, sys.argv[1:], helper.VALUE, os.getcwd(), os.environ['ONLY_HERE'])\n"
                      "print('to stderr', file=sys.stderr)\n"
                      "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done', flush=True))).start()\n"
                      "sys.exit(int(sys.argv[1]))\n")
    env = {**smoke_env(), "ONLY_HERE": "yes"}
    for code in ("0", "3"):
        mine = launcher.run(script, [code], env, tmp_path, timeout=60)
        theirs = subprocess.run([sys.executable, str(script), code], cwd=tmp_path, env=env, capture_output=True,
                                text=True)
        assert (mine.returncode, mine.stdout, mine.stderr) == (theirs.returncode, theirs.stdout, theirs.stderr)
    assert launcher.run(script, ["0"], env, tmp_path, timeout=60).stdout.startswith(f"__main__ ['0'] 7 {tmp_path}")
    crash = tmp_path / "crash.py"
    crash.write_text("raise ValueError('in the script')\n")
    failed = launcher.run(crash, [], env, tmp_path, timeout=60)
    assert failed.returncode == 1 and "ValueError: in the script" in failed.stderr
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(60)\n")
    assert launcher.run(sleeper, [], env, tmp_path, timeout=1).returncode == -9  # killed, and the launcher goes on
    assert launcher.run(script, ["0"], env, tmp_path, timeout=60).returncode == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_runs_in_smoke_mode(name, launcher):
    done = launcher.run(ROOT / "benchmarks" / f"{name}.py", ["--smoke"], smoke_env(), ROOT, timeout=570)
    tail = (done.stdout[-3000:] + "\n--- stderr ---\n" + done.stderr[-3000:])
    assert done.returncode == 0, tail
    assert RESULT.search(done.stdout), tail
