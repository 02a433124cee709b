"""Does stage 03's check say what labels say? The swap probe's selectivities against the corpora's own labels.

Stage 03 (`workbench.embed.guard`) compares, per aspect, the trained head, the aspect-file floor and the
encoder's whole abstract ("base") by their *selectivity* under the swap probe (`health.hard_negative_probe`):
how much a vector moves when a paper's sentences stating the aspect are swapped for another paper's, over
how much it moves for the other aspects' swaps. Where the corpus has neither human highlights nor LLM
sentence labels, the swapped sentences come from the aspect file itself, the same file that built the floor.

This script asks whether that probe, with marks from the aspect file or from evidence the floor did not read,
can say which of floor and base follows an aspect better, on corpora whose factor labels answer it:

* generator c (`scripts/generator_c.py`) with the `medicine` preset, seeds 0, 1 and 2;
* generators a and b (`scripts/synthetic_corpus.py`) with `data/clinical-study-aspects.yaml`, seed 1;
* generator a with that file's disease and method descriptions, include items and examples swapped.

Per corpus and aspect it prints the labels' verdict (mean per-paper Spearman x100 of the cosine similarities
against "same value": floor, base) and the probe's selectivities (floor, base) with three kinds of marks:

* ``own``: the floor's own stating sentences (`aspectfile.sentence_marks` with the floor's scorer), what
  stage 03 uses on a corpus without highlights;
* ``half``: a held-out half of the aspect file. Each aspect's include items and examples are dealt
  alternately into two halves; the floor compared is fitted on half A (with the description), the marks
  come from half B's zero-shot prototypes, which that floor never read;
* ``half, fitted``: the same, the marks from a floor fitted on half B (calibrated, with its position mixture where
  the floor takes one).

The last column counts, over the corpora, the aspects where a kind of marks ranks the floor above the base
while the labels rank it below. The floor here is stage 03's (`floor.fit_floor`); no trained head takes
part (the question is about the evidence, not about a head).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/check.py [--docs 150] [--pairs 50] [--cache DIR] [--smoke]

--smoke (or WORKBENCH_BENCH_SMOKE=1): 16 papers per corpus, generator c seed 0 and the swapped file only, 2 pairs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from _machine import matmul_gflops  # noqa: E402
from _smoke import HashedBackbone, add_smoke  # noqa: E402
from aspect_file import ASPECT_FILE, same_value, spearman100  # noqa: E402
from generator_c import ASPECTS as C_ASPECTS, generator_c_frame  # noqa: E402
from synthetic_corpus import ASPECTS as S_ASPECTS, synthetic_frame  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.embed.aspectfile import aspect_prototypes, sentence_marks  # noqa: E402
from workbench.embed.features import FeatureCache, FrozenBackbone  # noqa: E402
from workbench.embed.floor import fit_floor  # noqa: E402
from workbench.embed.guard import selectivity  # noqa: E402
from workbench.measures.health import hard_negative_probe  # noqa: E402

MARKS = ("own", "half", "half, fitted")
FIELDS = ("description", "include", "examples")


def halves(aspect_set, aspects):
    """(A, B): each aspect's include items and examples dealt alternately; A keeps the description."""
    a_half, b_half = {}, {}
    for a in aspects:
        x = aspect_set[a]
        items = [("include", t) for t in x.include] + [("examples", t) for t in x.examples]

        def part(chosen, description, x=x):
            return x.__class__(**{**x.__dict__, "description": description,
                                  **{k: tuple(t for f, t in chosen if f == k) for k in ("include", "examples")}})
        a_half[a], b_half[a] = part(items[0::2], x.description), part(items[1::2], "")
    return a_half, b_half


def swapped(aspect_set, first: str, second: str) -> dict:
    """The aspect file with what it says of two aspects exchanged (their names kept)."""
    out = {a: aspect_set[a] for a in aspect_set.names}
    for a, b in ((first, second), (second, first)):
        out[a] = aspect_set[a].__class__(**{**aspect_set[a].__dict__, **{k: getattr(aspect_set[b], k) for k in FIELDS}})
    return out


def corpus_rows(texts, labels: dict, aspect_set, aspects, cache: FeatureCache, pairs: int) -> dict:
    """{aspect: {"labels": (floor, base), kind of marks: (floor, base) selectivities}} on one corpus."""
    feats = cache.documents(texts)
    own = fit_floor(feats, aspect_prototypes(aspect_set, aspects, cache.vectors), cache.word_vectors)
    half_a, half_b = halves(aspect_set, aspects)
    floor_a = fit_floor(feats, aspect_prototypes(half_a, aspects, cache.vectors), cache.word_vectors)
    protos_b = aspect_prototypes(half_b, aspects, cache.vectors)
    floors = {"own": own, "half": floor_a, "half, fitted": floor_a}
    marks = {"own": sentence_marks(feats, own.scorer, boilerplate=own.boilerplate),
             "half": sentence_marks(feats, protos_b, boilerplate=own.boilerplate),
             "half, fitted": sentence_marks(feats, fit_floor(feats, protos_b, cache.word_vectors).scorer,
                                            boilerplate=own.boilerplate)}

    def encode(batch, floor):
        f = cache.documents(list(batch))
        return {**{f"floor:{a}": v for a, v in floor.embeddings(f, cache.word_vectors).items()},
                "base": np.asarray(f.whole)}

    whole = encode(texts, own)
    out = {a: {"labels": (spearman100(whole[f"floor:{a}"], same_value(labels[a])),
                          spearman100(whole["base"], same_value(labels[a])))} for a in aspects}
    for kind in MARKS:
        matrix = hard_negative_probe(texts, marks[kind], lambda b, f=floors[kind]: encode(b, f),
                                     n_pairs=pairs)["matrix"]
        for a in aspects:
            out[a][kind] = tuple(selectivity({b: {"x": matrix[b][c]} for b in matrix}, "x", a)
                                 for c in (f"floor:{a}", "base"))
    return out


def corpora(args, clinical, medicine):
    """(name, texts, {aspect: labels}, aspect file, aspects) per corpus."""
    for seed in args.c_seeds:
        frame = generator_c_frame(args.docs, seed)
        yield f"generator c, seed {seed}", frame["abstract"].tolist(), {a: frame[a] for a in C_ASPECTS}, \
            medicine, C_ASPECTS
    for style in args.styles:
        frame = synthetic_frame(n_train=0, n_val=0, n_test=args.docs, seed=1, style=style)
        yield f"generator {style}, seed 1", frame["abstract"].tolist(), {a: frame[a] for a in S_ASPECTS}, \
            clinical, S_ASPECTS
    frame = synthetic_frame(n_train=0, n_val=0, n_test=args.docs, seed=1, style="a")
    yield "generator a, disease and method swapped", frame["abstract"].tolist(), \
        {a: frame[a] for a in S_ASPECTS}, swapped(clinical, "disease", "method"), S_ASPECTS


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=150, help="papers per corpus")
    parser.add_argument("--pairs", type=int, default=50, help="swap pairs per aspect")
    parser.add_argument("--c-seeds", type=int, nargs="+", default=[0, 1, 2], help="generator c's corpus seeds")
    parser.add_argument("--styles", nargs="+", default=["a", "b"], help="synthetic generators (seed 1)")
    parser.add_argument("--cache", default=None, help="folder of MiniLM vectors kept between runs")
    add_smoke(parser, argv, docs=16, pairs=2, c_seeds=[0], styles=[])
    args = parser.parse_args(argv)
    folder = None if args.cache else tempfile.TemporaryDirectory(prefix="check-")
    cache = FeatureCache(Path(args.cache or folder.name), HashedBackbone() if args.smoke else FrozenBackbone("minilm"))  # smoke: no model to load
    print(f"# Stage 03's swap probe against the labels ({args.docs} papers per corpus, {args.pairs} pairs per "
          f"aspect; matrix products at {matmul_gflops():.0f} GFLOP/s)\n")
    print("| corpus | aspect | labels: floor / base | " + " | ".join(f"{k}: floor / base" for k in MARKS) + " |")
    print("|---|---|---:|" + "---:|" * len(MARKS))
    wrong = dict.fromkeys(MARKS, 0)
    below = 0
    t0 = time.perf_counter()
    clinical, medicine = load_aspects(ASPECT_FILE), load_aspects("medicine")
    for name, texts, labels, aspect_set, aspects in corpora(args, clinical, medicine):
        for a, row in corpus_rows(texts, labels, aspect_set, aspects, cache, args.pairs).items():
            floor_below = row["labels"][0] < row["labels"][1]
            below += floor_below
            for k in MARKS:
                wrong[k] += floor_below and row[k][0] > row[k][1]
            print(f"| {name} | {a} | {row['labels'][0]:.1f} / {row['labels'][1]:.1f} | "
                  + " | ".join(f"{row[k][0]:.2f} / {row[k][1]:.2f}" for k in MARKS) + " |")
    print(f"\nAspects where the labels put the floor below the base: {below}. Of those, the probe ranked the floor "
          "above: " + ", ".join(f"{k} marks {wrong[k]}" for k in MARKS)
          + f" ({time.perf_counter() - t0:.0f} s; {matmul_gflops():.0f} GFLOP/s at the end)")


if __name__ == "__main__":
    main()
