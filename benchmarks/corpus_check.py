"""How long `workbench run` takes to refuse a large corpus whose last row repeats an id: the bar is 20 s.

`workbench run` loads and checks the corpus before any stage runs (`workbench/run/corpuscheck.py`): a file
of 200,000 papers whose last row repeats the first row's id with another text must be refused, exit code 2,
within 20 s from the command's start to its exit, with no run directory made. This script writes such a CSV
(id, title, abstract of about 1,300 characters, year: about 300 MB), runs the command on it as a user does,
in a process of its own, and prints its seconds against the bar; then, in this process, the loader's own
steps on the same file (read and standardise, validate, drop the invalid rows), where the time goes.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/corpus_check.py [--rows 200000] [--repeats 3] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): 2,000 rows, one round.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _smoke import add_smoke  # noqa: E402

BAR_SECONDS = 20.0
_WORDS = ("we propose study method model results show data learning approach performance task improve network "
          "analysis patients effect significant using based treatment evaluation compared baseline outcome "
          "trial species invasion language neural training accuracy proposed novel framework").split()


def write_corpus(path: Path, rows: int, seed: int = 0) -> None:
    """`rows` papers, each with its own id and text, then one more row that repeats the first id with another text."""
    rng = random.Random(seed)
    # 500 texts of 190 words, each made a paper's own by its number: unique abstracts, written fast.
    texts = [" ".join(rng.choices(_WORDS, k=190)) + "." for _ in range(500)]
    titles = [" ".join(rng.choices(_WORDS, k=9)).capitalize() for _ in range(500)]
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["id", "title", "abstract", "year"])
        for i in range(rows):
            out.writerow([f"p{i + 1}", titles[i % 500], f"In paper {i + 1} {texts[i % 500]}", 1990 + i % 35])
        out.writerow(["p1", "A different paper", "Another text under the first paper's id.", 2024])


def run_refused(corpus: Path, home: Path) -> float:
    """Seconds of `workbench run` on `corpus`, start to exit; it must be refused naming both lines, with no run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "workbench", "run", "-p", f"corpus={corpus}", "--run-dir", "run"],
                          cwd=home, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 2 or "'p1' on lines 2 and" not in done.stderr or (home / "run").exists():
        raise SystemExit(f"workbench run was not refused as it should be (exit {done.returncode}):\n"
                         f"{done.stderr[-2000:]}")
    return seconds


def loader_steps(corpus: Path) -> dict[str, float]:
    """Seconds of each step the check takes in this process: load (read + standardise), validate, drop_invalid."""
    from workbench.data.corpus import load_corpus

    t0 = time.perf_counter()
    loaded = load_corpus(corpus)
    t1 = time.perf_counter()
    report = loaded.validate()
    t2 = time.perf_counter()
    loaded.drop_invalid(report)
    t3 = time.perf_counter()
    return {"load": t1 - t0, "validate": t2 - t1, "drop_invalid": t3 - t2}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="papers in the CSV (default 200,000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of `workbench run`; the median is shown")
    add_smoke(parser, argv, rows=2_000, repeats=1)
    args = parser.parse_args(argv)

    print(f"# {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        corpus = home / "papers.csv"
        write_corpus(corpus, args.rows)
        size = corpus.stat().st_size / 1e6
        runs = sorted(run_refused(corpus, home) for _ in range(args.repeats))
        steps = loader_steps(corpus)
    median = runs[len(runs) // 2]
    print(f"\n{args.rows:,} rows ({size:.0f} MB), the last repeating the first id; load average "
          f"{os.getloadavg()[0]:.2f} at the end\n")
    print("| rows | MB | `workbench run`, start to exit (median) | runs | bar | within |")
    print("|---:|---:|---:|---|---:|---|")
    print(f"| {args.rows:,} | {size:.0f} | {median:.1f} s | {', '.join(f'{s:.1f}' for s in runs)} | "
          f"{BAR_SECONDS:.0f} s | {'yes' if median <= BAR_SECONDS else 'NO'} |")
    print("\nthe loader's steps in this process: "
          + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.items()))


if __name__ == "__main__":
    main()
