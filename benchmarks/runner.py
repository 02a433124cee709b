"""`workbench run`: the six stages in one shared kernel against a fresh kernel per stage.

A fresh kernel per stage is what papermill does by default (and what `workbench run`
did before): each stage starts a kernel and imports torch, transformers, pandas and the
models' code again, and loads again the models the stage before had loaded. The runner
now keeps one kernel for the run and empties its namespace between stages (`%reset -f`).

Both ways run the same pipeline from the same files into fresh run directories, back to
back in one process, alternating which goes first over --repeats rounds: an own corpus of
--docs ACLSum abstracts exported as a CSV (`scripts/export_aclsum.py`, first three
sentences of each), the aspect file `data/my_field.yaml` cut to two aspects, and the
settings of `params/own-corpus-quick.yaml` (k = 2, decoders and evaluation on the smallest
settings that run every cell, as `tests/test_own_corpus.py` runs them). It prints each stage's seconds, the totals, the
ratio, and whether the two runs wrote the same metrics.json (but for its "written" time stamp).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/runner.py [--docs 8] [--repeats 1] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): one round of 1 abstract through stage 01 only, its summaries off (no LLM
loaded): every line of the script runs, but one stage cannot show what a shared kernel saves (tests/test_own_corpus.py runs all six stages
in one). 8 abstracts and one round are the defaults: the quick settings are the smallest that run every cell,
and stages 02 and 03 need two validation papers, which fewer than 8 abstracts do not leave (the six stages
take about 80 s on 2 cores, most of it starting kernels). `--stages 01_generate,02_train` runs some stages only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

from _smoke import add_smoke  # noqa: E402


def _setup(home: Path, docs: int, summaries: str = "on") -> Path:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "export_aclsum.py"), str(home / "papers.csv"),
                    "--n", str(docs), "--sentences", "3"], check=True, capture_output=True)
    aspects = yaml.safe_load((ROOT / "data" / "my_field.yaml").read_text())
    aspects["aspects"] = aspects["aspects"][:2]
    (home / "aspects.yaml").write_text(yaml.safe_dump(aspects, sort_keys=False))
    quick = yaml.safe_load((ROOT / "params" / "own-corpus-quick.yaml").read_text())
    quick["stage_parameters"]["01_generate"]["summaries"] = summaries
    params = home / "params.yaml"
    params.write_text(yaml.safe_dump({
        "parameters": {"corpus": str(home / "papers.csv"), "aspects": str(home / "aspects.yaml"), "seed": 0},
        "stage_parameters": quick["stage_parameters"],
    }))
    return params


def _run(params: Path, run_dir: Path, per_stage: bool, stages=None) -> tuple[float, dict]:
    from workbench.run.runner import ExecutionOptions, run_pipeline

    # Each run its own report folder beside the runs (a report folder belongs to one run), not the checkout's reports/.
    own = params.with_name(f"params-{run_dir.name}.yaml")
    own.write_text(yaml.safe_dump({**yaml.safe_load(params.read_text()),
                                   "report_dir": str(params.parent / "reports" / run_dir.name)}))
    t0 = time.perf_counter()
    results = run_pipeline(own, run_dir=str(run_dir), stages=stages, report=True, progress=False,
                           log=lambda *a: None, execution=ExecutionOptions(kernel_per_stage=per_stage))
    return time.perf_counter() - t0, {stage: r["seconds"] for stage, r in results.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=8, help="abstracts in the own corpus (default 8)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of both ways, alternating the order")
    parser.add_argument("--stages", default=None, help="comma-separated stages to run (default: all six)")
    add_smoke(parser, argv, docs=1, repeats=1, stages="01_generate")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    print(f"# {datetime.datetime.now():%Y-%m-%d %H:%M}  {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        # Smoke: stage 01 runs every cell but loads no LLM (summaries off): the kernels are what this measures.
        params = _setup(home, args.docs, "off" if args.smoke else "on")
        rows = {"shared kernel": [], "kernel per stage": []}
        for round_ in range(args.repeats):
            order = [False, True] if round_ % 2 == 0 else [True, False]
            for per_stage in order:
                name = "kernel per stage" if per_stage else "shared kernel"
                run_dir = home / f"run-{round_}-{'per' if per_stage else 'shared'}"
                total, stages = _run(params, run_dir, per_stage, args.stages.split(",") if args.stages else None)
                path = run_dir / "metrics.json"
                metrics = json.loads(path.read_text()) if path.exists() else None  # None: stage 06 not run
                if metrics:
                    metrics.pop("written", None)  # when and by which stage: a time stamp, not a result
                rows[name].append((total, stages, metrics))
                print(f"  round {round_ + 1}, {name}: {total:.1f} s  "
                      + "  ".join(f"{s[:2]} {v:.1f}" for s, v in stages.items()), flush=True)
    stages = list(rows["shared kernel"][0][1])
    print(f"\n{args.docs} abstracts x 2 aspects, {'stages ' + args.stages if args.stages else 'all six stages'} "
          f"(seconds, median over {args.repeats} round(s))")
    print(f"{'':<18}" + "".join(f"{s:>13}" for s in stages) + f"{'total':>9}")

    def median(values):
        values = sorted(values)
        return values[len(values) // 2]

    totals = {}
    for name, runs in rows.items():
        totals[name] = median([r[0] for r in runs])
        print(f"{name:<18}" + "".join(f"{median([r[1][s] for r in runs]):>13.1f}" for s in stages)
              + f"{totals[name]:>9.1f}")
    same = all(r[2] == rows["kernel per stage"][0][2] for runs in rows.values() for r in runs)
    print(f"\nshared kernel / kernel per stage: {totals['shared kernel'] / totals['kernel per stage']:.2f} "
          f"(speed-up {totals['kernel per stage'] / totals['shared kernel']:.2f}x); "
          f"metrics.json identical: {same if rows['shared kernel'][0][2] is not None else 'n/a (no stage 06)'}; "
          f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
