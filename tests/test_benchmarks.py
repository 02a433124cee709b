"""Every script under benchmarks/ runs in smoke mode (`--smoke`: tiny sizes, seconds), so none rots unseen.

Each script runs as a user runs it, `python benchmarks/<name>.py --smoke`, in a subprocess
from the repository root, offline and on one thread. The numbers mean nothing at these
sizes; the test checks that the script finishes and prints its table or its ratios.
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
           "check"]
# What a benchmark's results look like: a markdown table row with a number, a ratio such as "2.31x", a line
# naming a ratio with its value, or a fixed-width table row ending in numbers ("challenge head   87.5   50.0").
RESULT = re.compile(r"^\|.*\d.*\|\s*$"
                    r"|\d(\.\d+)?x\b"
                    r"|\bratio\b.*\d"
                    r"|(\s+[-+]?\d+\.\d+){2,}\s*$", re.MULTILINE)


def test_every_benchmark_is_listed():
    found = {p.stem for p in (ROOT / "benchmarks").glob("*.py") if not p.name.startswith("_")}
    assert found == set(SCRIPTS)


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


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_runs_in_smoke_mode(name):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WORKBENCH_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("WORKBENCH_BENCH_SMOKE", None)  # the flag alone must switch smoke mode on
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=570)
    tail = (done.stdout[-3000:] + "\n--- stderr ---\n" + done.stderr[-3000:])
    assert done.returncode == 0, tail
    assert RESULT.search(done.stdout), tail
