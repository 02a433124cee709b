"""What the shown filter leaves out of the packaged 135M model's answers, by reason, on CSAbstruct and ACLSum.

Stage 01 as `params/own-corpus.yaml` runs it (the `acl` preset, SmolLM2-135M-Instruct on the CPU, k = 2,
48 new tokens, temperature 0.7, top-p 0.95, top-k 50, seed 0) on a seeded sample of each corpus, then
stage 02's grounding check and the shown filter (`embed.grounding.judge_views`, as `grounded_views` runs
them: the sample's abstracts are the pool, as a user's own corpus would be) and stage 04's prompt-artefact
check (`decode.artefacts`) on what the filter lets through: what is left is what the pane may show. Prints,
per corpus, the answers parsed and what became of them by reason (the shown counts `grounding.json` holds,
plus the artefacts; how many train as views apart), then `--show` answers left out and `--show` shown,
drawn at random from both corpora, each with its paper's id and why, to be read.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/junk_filter.py [--docs 80] [--aclsum-docs 70]
        [--csabstruct-split test] [--aclsum-split train] [--k 2] [--max-new-tokens 48] [--show 20]
        [--runs DIR] [--seed 0] [--smoke]

`--runs DIR` keeps the generated answers there (a second run reuses them, as stage 01 resumes); by
default they go to a temporary folder. The defaults take CSAbstruct's test abstracts and ACLSum's train
papers: the rule's constants were chosen on ACLSum validation and CSAbstruct dev. No label of either
corpus is read.

--smoke (or WORKBENCH_BENCH_SMOKE=1): no model and no generation. The 30 stored answers of
`tests/data/junk_texts.json` (ACLSum validation; their labels are not read), judged from the reference
encoder's cosines stored beside them (`junk_texts_features.json`), 3 texts listed: the table's and the
listing's code paths in about a second.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "scripts"))

from _machine import matmul_gflops  # noqa: E402
from _smoke import add_smoke  # noqa: E402

ASPECTS = "acl"
STORED = ROOT / "tests" / "data"  # the smoke run's answers: junk_texts.json and the cosines of each


def corpora(args):
    """{name: Corpus}: a seeded sample of CSAbstruct's and of ACLSum's papers of the chosen splits."""
    import csabstruct
    from workbench.data.corpus import Corpus, load_corpus

    frame = csabstruct.load(args.csabstruct_split)
    frame = frame.sample(min(args.docs, len(frame)), random_state=args.seed).reset_index(drop=True)
    frame["title"] = ""  # CSAbstruct has no titles; a user's export may have none either
    acl = load_corpus(f"aclsum:{args.aclsum_split}")
    acl = acl.subset(min(args.aclsum_docs, len(acl)), seed=args.seed)
    return {f"CSAbstruct {args.csabstruct_split}": Corpus(frame[["doc_id", "title", "abstract"]]),
            f"ACLSum {args.aclsum_split}": acl}


def judged(corpus, run_dir: Path, backend, args) -> list[tuple[str, str, str, str]]:
    """[(doc_id, aspect, text, "shown" or why not)] of every parsed answer of the packaged model on `corpus`."""
    from workbench.data.aspects import load_aspects
    from workbench.decode.artefacts import prompt_text
    from workbench.embed.features import FeatureCache, FrozenBackbone
    from workbench.embed.grounding import REFERENCE, grounded_views, judge_views
    from workbench.generate.sampling import Sampling
    from workbench.generate.summaries import SUMMARY_STOP, generate_summaries
    from workbench.generate.views import collect_views

    aspects = load_aspects(args.aspects)
    sampling = Sampling(temperature=0.7, top_p=0.95, top_k=50, max_new_tokens=args.max_new_tokens, seed=0,
                        stop=SUMMARY_STOP)
    print(generate_summaries(corpus, aspects, backend, run_dir, k=args.k, sampling=sampling, progress=False),
          flush=True)
    grounded_views(aspects.names, run_dir, corpus, include_human=False, exclude_splits=())  # grounding.json
    views = collect_views(aspects.names, run_dir, corpus, include_human=False, exclude_splits=())
    verdicts = judge_views(views, corpus, FeatureCache.for_run(run_dir, FrozenBackbone(REFERENCE)))
    prompt, abstracts = prompt_text(aspects), dict(zip(map(str, corpus.ids), corpus.texts()))
    return [(doc, aspect, views[aspect].views[doc][k], shown_or_why(views[aspect].views[doc][k], v.shown, v.training,
                                                                    prompt, abstracts.get(doc, "")))
            for aspect in views for (doc, k), v in sorted(verdicts[aspect].items())]


def shown_or_why(text: str, shown: str, training: str, prompt: str, abstract: str) -> str:
    """"shown", or why not: the shown filter's reason, or "artefact"; "trains" marks one kept as a training view."""
    from workbench.decode.artefacts import artefact_reason

    why = ("artefact" if artefact_reason(text, prompt, abstract) else "shown") if shown == "kept" else shown
    return why + (" (trains)" if training == "kept" else "")


def stored(args) -> dict[str, list]:
    """The smoke run's rows: the 30 stored answers on ACLSum validation, judged from their stored cosines (all 30
    were kept by the grounding check, so all train). Their labels are not read."""
    import json
    import math

    import numpy as np

    from workbench.data.aspects import load_aspects
    from workbench.decode.artefacts import prompt_text
    from workbench.embed.grounding import TOP_MIN, TOP_SHARE, verdict

    texts = json.loads((STORED / "junk_texts.json").read_text())["texts"]
    read = json.loads((STORED / "junk_texts_features.json").read_text())
    top = max(TOP_MIN, math.ceil(TOP_SHARE * read["corpus size"]))
    prompt = prompt_text(load_aspects(args.aspects))
    rows = [(t["doc_id"], t["aspect"], t["text"],
             shown_or_why(t["text"], verdict(t["text"], np.asarray(f["cosines"]), f["own"], top, f["own sentence"],
                                             f["other sentence"]), "kept", prompt, ""))
            for t, f in zip(texts, read["texts"])]
    return {"ACLSum validation (stored)": rows}


def table(found: dict[str, list]) -> str:
    """Markdown: per corpus, the parsed answers and what became of them, by reason."""
    from workbench.embed.grounding import REASONS

    columns = ["shown", *REASONS, "artefact"]
    lines = ["| corpus | parsed answers | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    trains = []
    for name, rows in found.items():
        counts = Counter(why.removesuffix(" (trains)") for *_, why in rows)
        lines.append(f"| {name} | {len(rows)} | " + " | ".join(str(counts.get(c, 0)) for c in columns) + " |")
        trains.append(f"{name}: {sum(why.endswith('(trains)') for *_, why in rows)} of {len(rows)} train as views")
    return "\n".join(lines) + "\n\nThe grounding check (training views, not filtered for showing): " + \
        "; ".join(trains)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=80, help="CSAbstruct abstracts (a seeded sample)")
    parser.add_argument("--aclsum-docs", type=int, default=70, help="ACLSum papers (a seeded sample)")
    parser.add_argument("--csabstruct-split", default="test")
    parser.add_argument("--aclsum-split", default="train")
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--show", type=int, default=20, help="texts listed of those left out, and of those shown")
    parser.add_argument("--runs", help="keep the generated answers here (reused by a second run)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--aspects", default=ASPECTS, help="an aspect preset or file")
    add_smoke(parser, show=3)
    args = parser.parse_args()
    if args.smoke:  # no model: the stored answers, judged from their stored cosines
        print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; smoke run: stored answers")
        listing(args, stored(args), "no generation")
        return

    import torch

    torch.manual_seed(args.seed)
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {matmul_gflops():.0f} GFLOP/s; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="junk_filter_") as scratch:
        report(args, Path(args.runs) if args.runs else Path(scratch))


def report(args, runs: Path) -> None:
    """Generate, judge and print the table and the texts drawn (see the module doc)."""
    from workbench.generate.llm import make_backend

    backend = make_backend("transformers", "smollm2-135m-instruct", batch_size=96)
    found, t0 = {}, time.perf_counter()
    for name, corpus in corpora(args).items():
        found[name] = judged(corpus, runs / name.replace(" ", "-"), backend, args)
    listing(args, found, f"judged in {time.perf_counter() - t0:.0f}s (generation included); answers in {runs}")


def listing(args, found: dict[str, list], how: str) -> None:
    """Print the table and `--show` answers left out and shown, drawn at random."""
    print(f"\n{sum(map(len, found.values()))} parsed answers, {how}\n")
    print(table(found))
    pool = [(name, *row) for name, rows in found.items() for row in rows]
    draw = random.Random(args.seed)
    for title, rows in (("left out", [r for r in pool if not r[-1].startswith("shown")]),
                        ("shown", [r for r in pool if r[-1].startswith("shown")])):
        picked = draw.sample(rows, min(args.show, len(rows)))
        print(f"\n{len(picked)} of the {len(rows)} answers {title}, at random:")
        for i, (name, doc, aspect, text, why) in enumerate(picked, 1):
            print(f"{i:2d}. [{name} {doc} {aspect}; {why}] {text}")


if __name__ == "__main__":
    main()
