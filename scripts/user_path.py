"""Reproduce the user's-path measurements of docs/results.md: a corpus with nothing a user's export lacks.

    .venv/bin/python scripts/user_path.py aclsum /tmp/user-aclsum          # about 5 minutes on 2 cores
    .venv/bin/python scripts/user_path.py synthetic-a /tmp/user-a          # about 2 minutes
    .venv/bin/python scripts/user_path.py synthetic-b /tmp/user-b

aclsum: ACLSum without its highlighted sentences; its human summaries stay in the file only for stage 06's
ground truths (`include_human: false` keeps them out of training). Stage 01 writes k = 2 summaries of
every training and validation abstract with the packaged SmolLM2-135M, as the own-corpus settings do.
synthetic-a / -b: 90 abstracts of `synthetic_corpus.py` (corpus seed 3, generator a or b), titles and
abstracts only, plus `label_<aspect>` columns with the true values (stage 03's check and stage 06's
label-based Table 2 read them).

Both run stages 01, 02, 03 and 06 in OUT (`run/`, `reports/`, the corpus and `params.yaml`); a second
call resumes (stage 01's answers are kept). It prints what stage 03's check kept and Table 2's diagonal
against MiniLM's whole abstract.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

CORPORA = ("aclsum", "synthetic-a", "synthetic-b")
STAGES = ["01_generate", "02_train", "03_distill", "06_evaluate"]


def write_corpus(which: str, out: Path) -> Path:
    """The corpus file of `which` in `out`, as a user's export would have it (see the module doc)."""
    out.mkdir(parents=True, exist_ok=True)
    if which == "aclsum":
        from workbench.data.corpus import load_corpus

        docs = load_corpus("aclsum").docs
        docs = docs.drop(columns=[c for c in docs.columns if c.startswith("highlights_")])
        path = out / "aclsum_without_highlights.jsonl"
        docs.to_json(path, orient="records", lines=True)
        return path
    if which in ("synthetic-a", "synthetic-b"):
        from synthetic_corpus import ASPECTS, synthetic_frame

        frame = synthetic_frame(n_train=90, n_val=0, n_test=0, seed=3, style=which[-1])
        docs = frame[["doc_id", "title", "abstract"]].copy()
        for a in ASPECTS:
            docs[f"label_{a}"] = frame[a]
        path = out / f"corpus_{which[-1]}.csv"
        docs.to_csv(path, index=False)
        return path
    raise ValueError(f"corpus must be one of {CORPORA}, got {which!r}")


def params_for(which: str, corpus: Path, out: Path) -> dict:
    """params/own-corpus.yaml's settings for stages 01-03 and 06 on `corpus`, run and reports in `out`."""
    params = yaml.safe_load((ROOT / "params" / "own-corpus.yaml").read_text())
    stage = params["stage_parameters"]
    params.update(run_dir=str(out / "run"), report_dir=str(out / "reports"), stages=STAGES)
    params["parameters"].update(corpus=str(corpus), aspects="acl" if which == "aclsum" else
                                str(ROOT / "data" / "clinical-study-aspects.yaml"))
    stage["01_generate"]["subset"] = None  # every abstract a run may train or choose on (never the test split)
    stage["01_generate"]["summaries"] = "on"  # what the packaged LLM's answers are worth is what this measures
    stage["06_evaluate"] = {"n_permutations": 200, "decode": False, "baselines": ["minilm"]}
    if which == "aclsum":
        for name in ("02_train", "03_distill"):
            stage[name]["include_human"] = False
    return {k: v for k, v in params.items() if k in ("run_dir", "report_dir", "stages", "parameters")} | \
        {"stage_parameters": {k: v for k, v in stage.items() if k in STAGES}}


def reading(metrics: dict, labels: bool = False) -> list[str]:
    """Lines: what the check kept per aspect, then each head against MiniLM's whole abstract on its own aspect
    (labels: the truths are the corpus's label columns, which stage 06 files under its main encoder's name)."""
    guard = metrics.get("guard") or {}
    lines = [f"check: sentences from {guard.get('marks')}, pairs {guard.get('n_pairs')}"]
    for a, r in (guard.get("aspects") or {}).items():
        lines.append(f"  {a}: kept {r['kept']} - {r['verdict']}")
    for encoder, rows in (metrics.get("heads_vs_backbone") or {}).items():
        if not rows:  # a label column is read once, under the main truth encoder's name
            continue
        cells = [f"{a} {r['head']:.1f} against {r['backbone (whole abstract)']:.1f} ({r['gain']:+.1f}, "
                 f"p = {r['p-value']:.3f})" for a, r in rows.items()]
        truths = "the label_<aspect> columns" if labels else f"human summaries read by {encoder}"
        lines.append(f"Table 2 against {truths}: " + "; ".join(cells))
    return lines


def main(argv=None) -> None:
    """Write the corpus and parameters into OUT, run the four stages, print the reading."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", choices=CORPORA)
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    corpus = write_corpus(args.corpus, out)
    params = out / "params.yaml"
    params.write_text(yaml.safe_dump(params_for(args.corpus, corpus, out), sort_keys=False))
    subprocess.run([sys.executable, "-m", "workbench", "run", "--params", str(params)], check=True, cwd=ROOT)
    metrics = json.loads((out / "run" / "metrics.json").read_text())
    print("\n".join(reading(metrics, labels=args.corpus != "aclsum")))


if __name__ == "__main__":
    main()
