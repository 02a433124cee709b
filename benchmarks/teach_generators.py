"""What a few answers are worth on corpora whose aspects are known by construction: the teaching loop on
generators a, b and c.

The same simulated user as `benchmarks/teach.py` drives `workbench.teach.loop.TeachLoop` (its `teach`,
`built_to_lose` and `user_answers`, imported), on one corpus per (generator, corpus seed):

* generators a and b (`scripts/synthetic_corpus.py`) with `data/clinical-study-aspects.yaml` as the aspect file
  (disease, method, population); generator c (`scripts/generator_c.py`) with the shipped `medicine` preset
  (disease, methodology, patient group). On each the drug is a nuisance no aspect names.
* The workbench reads the abstracts alone: the corpus is loaded without its `highlights_`, `summary_` and
  `label_` columns, and stage 03's label-free floor (`floor.fit_floor`) is fitted to the whole corpus, as
  stage 03 fits it. Only the simulated user reads the generator's stating sentences (`highlights_<aspect>`):
  a workbench sentence states an aspect where it matches one of them (`data.sentences.match_highlights`).
* Before any question, the corpus seed draws a fixed half of the papers: they are never shown and are the
  scored set; the workbench asks about the other half only. The user seed is the corpus seed (seeds 1 to 3
  report, worst seed; seed 0 chooses, `--seeds 0`).
* "N marks per aspect" is at most N x (aspects + 1) answers in all, each counted ("none" and "skip" too); the
  loop refits after every `--batch` answers.

Scored on the scored half: per head, the mean per-paper Spearman x100 of its cosine similarities against
"same value" of each factor (`aspect_file.same_value`), its own factor's ceiling (a perfect ranking,
`aspect_file.ceiling`) and its share of it; beside it MiniLM's whole abstract and stage 03's floor. At each
budget the marks' verdict (`workbench.teach.verdict.cross_check`) beside the labels' margin (the head less
MiniLM's whole abstract on its own factor, scored half), and the same for two heads built to lose, judged on
the held-out papers' true marks: the head taught the answers shuffled among the shown sentences
(`teach.built_to_lose`), and the label-free floor itself (`floor_verdict`; on generator c seed 2 its disease
head is far below MiniLM's whole abstract). Last, the bars of the teaching issue, each said met or not.

Smoke mode reads hashed word vectors (`_smoke.HashedBackbone`), 24 papers, one seed, generators a and c (each
bar's code path): no model to load.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/teach_generators.py --cache /tmp/teach-gen-cache
        [--generators a b c] [--seeds 1 2 3] [--docs 150] [--marks 10 30] [--batch 10] [--smoke]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from _machine import matmul_gflops  # noqa: E402
from _smoke import HashedBackbone, add_smoke  # noqa: E402
from aspect_file import ASPECT_FILE, ceiling, same_value  # noqa: E402
from families import CachedBackbone, spearman_on  # noqa: E402
from synthetic_corpus import ASPECTS as AB_ASPECTS, NUISANCE, synthetic_frame  # noqa: E402
from teach import VERDICT, built_to_lose, print_verdicts, teach, user_answers  # noqa: E402
from workbench.core.vectors import unit_rows  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.corpus import Corpus  # noqa: E402
from workbench.embed.aspectfile import aspect_prototypes  # noqa: E402
from workbench.embed.features import FeatureCache, FrozenBackbone, position_features  # noqa: E402
from workbench.embed.floor import fit_floor  # noqa: E402
from workbench.teach.loop import TeachLoop  # noqa: E402
from workbench.teach.marks import Marks  # noqa: E402
from workbench.teach.verdict import BETTER, UNSURE, WORSE, cross_check  # noqa: E402

# scripts/generator_c.py by its path: benchmarks/generator_c.py has the same module name.
_spec = importlib.util.spec_from_file_location(
    "generator_c_corpus", Path(__file__).resolve().parents[1] / "scripts" / "generator_c.py")
gen_c = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_c)

SCORED_SHARE = 0.5  # the half of each corpus never shown, scored
LABELS = ("highlights_", "summary_", "label_")  # columns only the simulated user reads
WHOLE, FLOOR = "MiniLM whole abstract", "stage 03's label-free floor"
OWN = "own factor"  # print_verdicts' truth key: each head against "same value" of its own factor
CONTRAST = 0.5  # the diagnostic rows' share of a paper's other sentences taken away (chosen on generator c seed 0)
STATED = "the true stating sentences pooled (every paper, no marks needed: what the encoder allows)"
STATED_LESS = f"the same less {CONTRAST} x the paper's other sentences"
TAUGHT_LESS = f"{{m}} marks, the head less {CONTRAST} x the paper's sentences it reads as not stating (candidate)"


@dataclass
class Generator:
    """One generator as the benchmark runs it: its aspect file, its aspects (= its factors) and its corpus."""
    name: str
    aspect_file: object
    aspects: list
    frame: object  # (docs, seed) -> the generator's frame


GENERATORS = {
    "a": Generator("a", ASPECT_FILE, list(AB_ASPECTS),
                   lambda docs, seed: synthetic_frame(n_train=0, n_val=0, n_test=docs, seed=seed, style="a")),
    "b": Generator("b", ASPECT_FILE, list(AB_ASPECTS),
                   lambda docs, seed: synthetic_frame(n_train=0, n_val=0, n_test=docs, seed=seed, style="b")),
    "c": Generator("c", "medicine", list(gen_c.ASPECTS), gen_c.generator_c_frame),
}


@dataclass
class GeneratedCorpus:
    """One (generator, seed) corpus: what the workbench reads, who answers, what is scored against what."""
    generator: Generator
    seed: int
    doc_ids: list
    features: object
    floor: object
    word_vectors: object
    askable: list        # paper ids the workbench may ask about
    scored: np.ndarray   # rows never shown, scored
    answers: dict        # (doc_id, sentence index) -> the aspects the sentence states
    truths: dict         # {factor: "same value" over the scored papers}
    ceilings: dict       # {aspect: its factor's ceiling over the scored papers}


def load_generated(gen: Generator, seed: int, docs: int, cache: FeatureCache) -> GeneratedCorpus:
    """Generate a corpus, load it as a user would (no label column), fit the floor, draw the scored half."""
    frame = gen.frame(docs, seed).reset_index(drop=True)
    read = Corpus(frame.drop(columns=[c for c in frame if c.startswith(LABELS) or c == "sentences"]))
    doc_ids = [str(d) for d in frame["doc_id"]]
    features = cache.documents(read.texts())
    word_vectors = FeatureCache(None, CachedBackbone(cache)).word_vectors
    floor = fit_floor(features, aspect_prototypes(load_aspects(gen.aspect_file), gen.aspects, cache.vectors),
                      word_vectors)
    order = np.random.default_rng(seed).permutation(len(frame))  # drawn before any question
    scored = np.sort(order[:int(len(frame) * SCORED_SHARE)])
    askable = [doc_ids[i] for i in np.sort(order[int(len(frame) * SCORED_SHARE):])]
    listed = lambda v: [str(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else []  # noqa: E731
    human = {a: [listed(v) for v in frame[f"highlights_{a}"]] for a in gen.aspects}
    factors = gen.aspects + [NUISANCE]
    truths = {f: same_value(frame[f].iloc[scored]) for f in factors}
    ceilings = {a: ceiling(frame[a].iloc[scored], seed) for a in gen.aspects}
    return GeneratedCorpus(gen, seed, doc_ids, features, floor, word_vectors, askable, scored,
                           user_answers(doc_ids, features, human), truths, ceilings)


def score(corpus: GeneratedCorpus, emb: dict) -> dict:
    """{(aspect, factor): Spearman x100 of the aspect's vectors on the scored papers against "same value" of the
    factor}; the labels' verdict reads (aspect, its own factor), `print_verdicts` (OWN, aspect)."""
    everywhere = np.ones(len(corpus.scored), bool)
    out = {(a, f): spearman_on(emb[a][corpus.scored], truth, everywhere)
           for a in corpus.generator.aspects for f, truth in corpus.truths.items()}
    out.update({(OWN, a): out[a, a] for a in corpus.generator.aspects})
    return out


def stated_pooled(corpus: GeneratedCorpus, less: float = 0.0) -> dict:
    """{aspect: [N, H]}: each paper's sentences the user says state the aspect, their unit mean, less `less` x the
    unit mean of its other sentences (a paper with none: its whole abstract). A diagnostic bound: what pooling
    the right sentences gives with this encoder's sentence vectors."""
    F, out = corpus.features, {}
    for a in corpus.generator.aspects:
        rows = []
        for i, doc_id in enumerate(corpus.doc_ids):
            S = unit_rows(np.asarray(F.sentences[i], np.float32))
            yes = np.array([a in corpus.answers[doc_id, k] for k in range(len(S))], bool)
            if not yes.any():
                rows.append(F.whole[i])
                continue
            rows.append(S[yes].mean(0) - (less * S[~yes].mean(0) if (~yes).any() else 0.0))
        out[a] = unit_rows(np.stack(rows).astype(np.float32))
    return out


def less_unstated(loop: TeachLoop, emb: dict, less: float = CONTRAST) -> dict:
    """{aspect: [N, H]}: the taught head less `less` x its paper's sentences weighted by how surely the taught
    scorer reads them as not stating the aspect (1 - p): what a paper's other sentences share (the drug, on these
    generators) taken away. A candidate step, measured here only."""
    out = {}
    for j, a in enumerate(loop.aspects):
        rows = []
        for i, sents in enumerate(loop.features.sentences):
            S = unit_rows(np.asarray(sents, np.float32))
            w = 1 - loop.scorer.probabilities(S, position_features(len(S)))[:, j] if len(S) else np.zeros(0)
            rows.append(emb[a][i] - less * (w @ S) / max(float(w.sum()), 1e-9) if len(S) else emb[a][i])
        out[a] = unit_rows(np.stack(rows).astype(np.float32))
    return out


def floor_verdict(loop: TeachLoop) -> dict:
    """The verdict on the label-free floor itself, a head built to lose where it reads an aspect worse than the
    whole abstract: a loop with no marks teaching embeds by the floor, judged on the held-out papers' TRUE marks
    (`cross_check(..., judge=)`). The loop is left as it was."""
    true = loop.marks
    try:
        loop.marks = Marks()
        loop.refit()
        return cross_check(loop, judge=true, **VERDICT)
    finally:
        loop.marks = true
        loop.refit()


def run_seed(corpus: GeneratedCorpus, marks: list[int], batch: int) -> dict:
    """Teach one corpus with user seed = corpus seed; the scores and verdicts at every budget."""
    aspects = corpus.generator.aspects
    t0 = time.perf_counter()
    loop = TeachLoop(corpus.features, corpus.floor, corpus.doc_ids, askable=corpus.askable,
                     word_vectors=corpus.word_vectors, seed=corpus.seed)
    out = {"whole": score(corpus, {a: unit_rows(corpus.features.whole) for a in aspects}),
           "floor": score(corpus, corpus.floor.embeddings(corpus.features, corpus.word_vectors)),
           "stated": score(corpus, stated_pooled(corpus)),
           "stated less": score(corpus, stated_pooled(corpus, CONTRAST)),
           "taught": {}, "taught less": {}, "verdict": {}, "shuffled": {}, "floor verdict": {}}
    given = 0
    for m in sorted(marks):
        budget = m * (len(aspects) + 1)
        said, lost, step = {}, {"shuffled": {}}, budget - given
        # `teach` counts the answers of its own call: it is given what this budget adds to the last.
        emb = teach(loop, corpus.answers, [step], batch, said, lost)[step]
        given = budget
        out["taught"][m] = score(corpus, emb)
        out["taught less"][m] = score(corpus, less_unstated(loop, emb))
        out["verdict"][m] = said[step]
        head, check = lost["shuffled"][step]
        out["shuffled"][m] = (score(corpus, head), check)
        out["floor verdict"][m] = (out["floor"], floor_verdict(loop))
    out["status"], out["seconds"] = loop.status(), time.perf_counter() - t0
    return out


def margins(runs: dict, key: str) -> dict:
    """{marks: [(the labels' margins keyed (OWN, aspect), the verdict) per seed]} for `print_verdicts`: the head's
    own-factor score less MiniLM's whole abstract's on that seed's scored papers (whole taken as 0 there)."""
    out = {}
    for run in runs.values():
        for m, (scores, check) in ((m, v if isinstance(v, tuple) else (run["taught"][m], v))
                                   for m, v in run[key].items()):
            out.setdefault(m, []).append(({k: scores[k] - run["whole"][k] for k in scores if k[0] == OWN}, check))
    return out


def cell(values: list[tuple[float, float]]) -> str:
    """The worst seed's score and the worst seed's share of the ceiling (%), "score (share%)"."""
    return f"{min(v for v, _ in values):.1f} ({min(s for _, s in values):.0f}%)"


def print_scores(gen: Generator, corpora: dict, runs: dict, marks: list[int]) -> None:
    """The scores' table: each head on its own factor (worst seed) with its share of the ceiling, the drug."""
    aspects = gen.aspects
    share = lambda seed, s, a: 100 * s[a, a] / corpora[seed].ceilings[a]  # noqa: E731
    print(f"\nMean per-paper Spearman x100 against 'same value' of each head's own factor on the scored half, worst "
          f"of seeds {', '.join(map(str, runs))} (in brackets the worst seed's share of the ceiling); {NUISANCE}: "
          "the most any head follows it\n")
    print("| embedding | " + " | ".join(aspects) + f" | {NUISANCE} (most) |")
    print("|---|" + "---:|" * (len(aspects) + 1))
    print("| ceiling (lowest) | " + " | ".join(f"{min(c.ceilings[a] for c in corpora.values()):.1f}"
                                             for a in aspects) + " | |")
    rows = [(WHOLE, lambda r: r["whole"]), (FLOOR, lambda r: r["floor"])]
    rows += [(f"{m} marks per aspect, the workbench asking", lambda r, m=m: r["taught"][m]) for m in marks]
    rows += [(STATED, lambda r: r["stated"]), (STATED_LESS, lambda r: r["stated less"])]
    rows += [(TAUGHT_LESS.format(m=m), lambda r, m=m: r["taught less"][m]) for m in marks]
    for name, get in rows:
        cells = [cell([(get(r)[a, a], share(seed, get(r), a)) for seed, r in runs.items()]) for a in aspects]
        drug = max(get(r)[a, NUISANCE] for r in runs.values() for a in aspects)
        print(f"| {name} | " + " | ".join(cells) + f" | {drug:.1f} |")
    print()
    for seed, r in runs.items():
        top = max(marks)
        print(f"seed {seed} ({r['seconds']:.0f} s): at {top} marks, each head on its own factor / the most on another "
              "factor / the drug: " + "; ".join(
                  f"{a} {r['taught'][top][a, a]:.1f} / {max(r['taught'][top][a, f] for f in aspects if f != a):.1f}"
                  f" / {r['taught'][top][a, NUISANCE]:.1f}" for a in aspects)
              + f"; {WHOLE} on the drug {r['whole'][aspects[0], NUISANCE]:.1f}; marks: " + "; ".join(
                  f"{a} {s['yes']} yes / {s['no']} no" for a, s in r["status"].items()))


def quality_bars(gen: Generator, corpora: dict, runs: dict, marks: list[int]) -> list[tuple[str, bool, str]]:
    """(bar, met, figures) of the quality bars on one generator (see the module doc)."""
    aspects, low, top = gen.aspects, min(marks), max(marks)
    share = lambda seed, s, a: 100 * s[a, a] / corpora[seed].ceilings[a]  # noqa: E731
    out = []
    if gen.name == "c":
        worst = {a: min(share(seed, r["taught"][top], a) for seed, r in runs.items()) for a in aspects}
        out.append((f"c: at {top} marks each head reaches 85% of its factor's ceiling", min(worst.values()) >= 85,
                    ", ".join(f"{a} {v:.1f}%" for a, v in worst.items())))
        gap = {a: min(r["taught"][top][a, a] - max(r["taught"][top][a, f] for f in corpora[seed].truths if f != a)
                      for seed, r in runs.items()) for a in aspects}
        out.append((f"c: at {top} marks each head follows its own factor most", min(gap.values()) > 0,
                    "own less the most on another factor (drug included), worst seed: "
                    + ", ".join(f"{a} {v:+.1f}" for a, v in gap.items())))
        drug = {a: max(r["taught"][top][a, NUISANCE] - r["whole"][a, NUISANCE] for r in runs.values())
                for a in aspects}
        out.append((f"c: at {top} marks every head follows the drug less than {WHOLE}", max(drug.values()) < 0,
                    "head less whole on the drug, worst seed: " + ", ".join(f"{a} {v:+.1f}" for a, v in drug.items())))
    else:
        gap = {a: min(share(seed, r["taught"][top], a) - share(seed, r["floor"], a) for seed, r in runs.items())
               for a in aspects}
        out.append((f"{gen.name}: at {top} marks each head within 1 point of the floor's share of the ceiling, "
                    "or above",
                    min(gap.values()) >= -1, "head's share less the floor's, worst seed: "
                    + ", ".join(f"{a} {v:+.1f}" for a, v in gap.items())))
    gap = {a: min(r["taught"][low][a, a] - r["floor"][a, a] for r in runs.values()) for a in aspects}
    out.append((f"{gen.name}: at {low} marks no head more than 1 below the floor", min(gap.values()) >= -1,
                "head less floor, worst seed: " + ", ".join(f"{a} {v:+.1f}" for a, v in gap.items())))
    return out


def verdict_bars(gen: Generator, runs: dict) -> list[tuple[str, bool, str]]:
    """(bar, met, figures) of the verdict's bars on one generator."""
    aspects, out = gen.aspects, []
    taught = margins(runs, "verdict")
    said = [(m, a, mg[OWN, a], c[a]) for m, seeds in taught.items() for mg, c in seeds for a in aspects]
    out.append((f"{gen.name}: with marks every aspect gets a verdict from them (verified)",
                all(c.get("outcome") in (BETTER, WORSE, UNSURE) for *_, c in said),
                f"{len(said)} verdicts"))
    against = [(m, a, round(g, 1), c["outcome"]) for m, a, g, c in said
               if (c["outcome"] == BETTER and g < 0) or (c["outcome"] == WORSE and g > 0)]
    out.append((f"{gen.name}: the verdict never contradicts the labels' (head against encoder)", not against,
                f"{len(against)} against (marks, aspect, margin, verdict): {against}" if against else "none against"))
    told = []
    for m, seeds in taught.items():
        for mg, c in seeds:
            clear = [a for a in aspects if mg[OWN, a] >= 5]
            told.append((m, sum(c[a]["outcome"] != UNSURE for a in clear), len(clear)))
    out.append((f"{gen.name}: where the labels' margin is 5 or more, a verdict on at least 2 of 3 aspects",
                all(n >= min(2, k) for _, n, k in told),
                "per budget and seed: " + ", ".join(f"{m}: {n} of {k}" for m, n, k in told)))
    for key, words in (("shuffled", "the head taught shuffled answers"), ("floor verdict", "the label-free floor")):
        lost = [(m, a, mg[OWN, a], c[a]["outcome"]) for m, seeds in margins(runs, key).items()
                for mg, c in seeds for a in aspects]
        losing = [(m, a, round(g, 1), o) for m, a, g, o in lost if g < 0]
        out.append((f"{gen.name}: {words}, where it loses to the encoder, is judged worse or too few",
                    all(o in (WORSE, UNSURE) for *_, o in losing),
                    f"where it loses (marks, aspect, margin, verdict): {losing or 'nowhere'}; called better where "
                    f"it wins by the labels: {sum(o == BETTER for _, _, g, o in lost if g >= 0)} of "
                    f"{sum(g >= 0 for _, _, g, _ in lost)}"))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None, help="folder of encoder vectors kept between runs")
    parser.add_argument("--generators", nargs="+", default=["a", "b", "c"], choices=sorted(GENERATORS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                        help="corpus seeds, each its own user seed (worst reported; 0 chooses)")
    parser.add_argument("--docs", type=int, default=150, help="papers per corpus (a half scored)")
    parser.add_argument("--marks", type=int, nargs="+", default=[10, 30], help="marks per aspect")
    parser.add_argument("--batch", type=int, default=10, help="questions asked between two refits")
    add_smoke(parser, argv, docs=24, seeds=[1], marks=[1, 2], batch=4, generators=["a", "c"])
    args = parser.parse_args(argv)
    start = time.perf_counter()
    folder = None if args.cache else tempfile.TemporaryDirectory(prefix="teach-gen-")
    cache = FeatureCache(None, HashedBackbone()) if args.smoke else \
        FeatureCache(Path(args.cache or folder.name) / "minilm", FrozenBackbone("minilm"))
    print(f"# Teaching loop on generators {', '.join(args.generators)} ({args.docs} papers per corpus, a half "
          f"scored)\n\nmatrix product: {matmul_gflops(1 if args.smoke else 5):.0f} GFLOP/s (1600 x 768 @ 768 x 3072 "
          f"fp32, torch); load {os.getloadavg()[0]:.1f}")
    bars = []
    for name in args.generators:
        gen, t0 = GENERATORS[name], time.perf_counter()
        corpora = {seed: load_generated(gen, seed, args.docs, cache) for seed in args.seeds}
        runs = {seed: run_seed(c, args.marks, args.batch) for seed, c in corpora.items()}
        one = next(iter(corpora.values()))
        print(f"\n## Generator {name} ({gen.aspect_file if isinstance(gen.aspect_file, str) else 'clinical-study'} "
              f"aspect file): {len(one.doc_ids)} papers, {len(one.scored)} scored, {len(one.askable)} askable; "
              f"floor: {one.floor.scorer.description} ({time.perf_counter() - t0:.0f} s)")
        print_scores(gen, corpora, runs, args.marks)
        print_verdicts(margins(runs, "verdict"), {(OWN, a): 0.0 for a in gen.aspects}, OWN, gen.aspects)
        print_verdicts(margins(runs, "shuffled"), {(OWN, a): 0.0 for a in gen.aspects}, OWN, gen.aspects,
                       "A head built to lose (answers shuffled among the shown sentences), judged on held-out TRUE "
                       "marks")
        print_verdicts(margins(runs, "floor verdict"), {(OWN, a): 0.0 for a in gen.aspects}, OWN, gen.aspects,
                       "The label-free floor as a head, judged on held-out TRUE marks")
        bars += quality_bars(gen, corpora, runs, args.marks) + verdict_bars(gen, runs)
    print("\n## The bars\n")
    for bar, met, figures in bars:
        print(f"- {bar}: {'met' if met else 'NOT MET'} ({figures})")
    print(f"\n{time.perf_counter() - start:.0f} s in all; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
