"""What a few answers are worth when the workbench chooses the sentences: the teaching loop on CSAbstruct.

A simulated user drives `workbench.teach.loop.TeachLoop` as a person would: the workbench asks about sentences
of TRAIN papers only (its chooser, `workbench/teach/chooser.py`), the user answers each from the human roles
(challenge = background + objective, approach = method, outcome = result, none = other; a workbench sentence
states an aspect where it matches a human sentence of that role, `data.sentences.match_highlights`), and the
loop refits after each batch. "N marks per aspect" means at most N x (aspects + 1) answers in all, every answer
counted. The corpus the workbench reads is the whole CSAbstruct file without its roles (the floor and the
learner read no label); only the simulated user reads them. A user seed draws the half of the train papers
that user's corpus lets the workbench ask about, and seeds the chooser's draws.

Scored on the TEST papers (`--split dev` to choose constants: every constant of `workbench/teach/` was chosen
there) with the MiniLM truth exactly as `../shared/benchmarks/taught_marks.py` computes it: per paper and
aspect the unit mean of its human-marked sentences' vectors; mean per-paper Spearman x100 over the papers
that have the aspect; worst of the user seeds. Beside it, on the same seeds: MiniLM's whole abstract, stage
03's label-free floor (`floor.fit_floor` on the whole file), and `taught_marks.py`'s fixed recipe (N random
train sentences of each role group, balanced by the labels, a logistic regression on vector and position,
pooled by its probability), run here.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/teach.py --cache /tmp/teach-cache [--split dev] [--marks 10 30]
        [--seeds 0 1 2] [--batch 10] [--smoke]
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

import csabstruct  # noqa: E402
from _machine import matmul_gflops  # noqa: E402
from _smoke import add_smoke  # noqa: E402
from families import CachedBackbone, pooled_truth, spearman_on  # noqa: E402
from workbench.core.vectors import unit_rows  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.sentences import match_highlights  # noqa: E402
from workbench.embed.aspectfile import aspect_prototypes  # noqa: E402
from workbench.embed.features import FeatureCache, FrozenBackbone  # noqa: E402
from workbench.embed.floor import fit_floor  # noqa: E402
from workbench.teach.loop import TeachLoop  # noqa: E402

ASKABLE_SHARE = 0.5  # the share of the train papers a user seed lets the workbench ask about


class SimulatedUser:
    """Answers a question about a workbench sentence from the human roles of its paper (see the module doc)."""

    def __init__(self, frame, features, aspects):
        self.answers = {}
        for i, doc_id in enumerate(frame["doc_id"]):
            texts = features.sentence_texts[i]
            human = {a: [s for s, r in zip(frame["sentences"][i], frame["roles"][i])
                         if r in csabstruct.ASPECT_ROLES[a]] for a in aspects}
            stated = {a: match_highlights(texts, human[a]) for a in aspects}
            for k in range(len(texts)):
                self.answers[doc_id, k] = [a for a in aspects if stated[a][k] >= 0.5] or "none"

    def answer(self, question):
        return self.answers[question.doc_id, question.index]


def teach(loop: TeachLoop, user: SimulatedUser, budgets: list[int], batch: int) -> dict[int, dict]:
    """Drive the loop until each budget of answers (in all) is spent; {budget: the embeddings then}."""
    out, given = {}, 0
    for budget in sorted(budgets):
        while given < budget:
            questions = loop.next_questions(min(batch, budget - given))
            if not questions:
                break
            for q in questions:
                loop.answer(q, user.answer(q))
            given += len(questions)
            loop.refit()
        out[budget] = loop.embeddings()
    return out


def recipe(frame, cache, train, scored, n: int, seed: int, aspects) -> dict[str, list[np.ndarray]]:
    """`taught_marks.py`'s fixed recipe on the human sentences: {aspect: per scored paper its pooled vector}."""
    from sklearn.linear_model import LogisticRegression

    def table(rows):
        sents = [s for i in rows for s in frame["sentences"][i]]
        owner = np.repeat(np.arange(len(rows)), [len(frame["sentences"][i]) for i in rows])
        position = np.concatenate([np.linspace(0, 1, len(frame["sentences"][i])) if len(frame["sentences"][i]) > 1
                                   else [0.5] for i in rows])
        roles = [r for i in rows for r in frame["roles"][i]]
        answer = np.full(len(roles), len(aspects))
        for a, aspect in enumerate(aspects):
            answer[np.isin(roles, csabstruct.ASPECT_ROLES[aspect])] = a
        vectors = cache.vectors(sents)
        return np.hstack([vectors, np.stack([position, position ** 2], 1)]), owner, answer, vectors

    X, _, y, _ = table(train)
    rng = np.random.default_rng(seed)
    shown = np.concatenate([rng.choice(np.flatnonzero(y == c), min(n, int((y == c).sum())), replace=False)
                            for c in range(len(aspects) + 1)])
    logp = LogisticRegression(max_iter=3000).fit(X[shown], y[shown]).predict_log_proba(table(scored)[0])
    _, owner, _, S = table(scored)
    out = {}
    for a, aspect in enumerate(aspects):
        pooled = []
        for j in range(len(scored)):
            r = owner == j
            w = np.exp(logp[r, a] - logp[r, a].max())
            pooled.append((w / w.sum()) @ S[r])
        out[aspect] = np.stack(pooled)
    return out


def row(name: str, scores: dict, aspects, floor: dict | None = None) -> str:
    cells = [f"{scores[a]:.1f}" + (f" ({scores[a] - floor[a]:+.1f})" if floor else "") for a in aspects]
    mean = np.mean([scores[a] for a in aspects])
    extra = f" ({mean - np.mean([floor[a] for a in aspects]):+.1f})" if floor else ""
    return f"| {name} | " + " | ".join(cells) + f" | {mean:.1f}{extra} |"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None, help="folder of encoder vectors kept between runs")
    parser.add_argument("--split", default="test", choices=["dev", "test"], help="the papers scored")
    parser.add_argument("--marks", type=int, nargs="+", default=[10, 30], help="marks per aspect")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="user seeds (worst reported)")
    parser.add_argument("--batch", type=int, default=10, help="questions asked between two refits")
    parser.add_argument("--csab-docs", type=int, default=None, help="CSAbstruct papers per split (default: all)")
    add_smoke(parser, argv, csab_docs=4, marks=[1, 2], seeds=[0], batch=4)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    folder = None if args.cache else tempfile.TemporaryDirectory(prefix="teach-")
    cache = FeatureCache(Path(args.cache or folder.name) / "minilm", FrozenBackbone("minilm"))
    print(f"# Teaching loop on CSAbstruct ({args.split} papers scored)\n\nmatrix product: {matmul_gflops():.0f} "
          f"GFLOP/s (1600 x 768 @ 768 x 3072 fp32, torch); load {os.getloadavg()[0]:.1f}\n")
    frame = csabstruct.load()
    if args.csab_docs:
        frame = frame.groupby("split", sort=False).head(args.csab_docs).reset_index(drop=True)
    acl = load_aspects("acl")
    aspects = list(acl.names)
    features = cache.documents(frame["abstract"].tolist())
    word_vectors = FeatureCache(None, CachedBackbone(cache)).word_vectors
    floor = fit_floor(features, aspect_prototypes(acl, aspects, cache.vectors), word_vectors)
    train = np.flatnonzero(frame["split"] == "train")
    scored = np.flatnonzero(frame["split"] == args.split)
    truths = {a: pooled_truth(cache, [[s for s, r in zip(frame["sentences"][i], frame["roles"][i])
                                       if r in csabstruct.ASPECT_ROLES[a]] for i in scored]) for a in aspects}
    score = lambda emb: {a: spearman_on(emb[a], *truths[a]) for a in aspects}  # noqa: E731
    user = SimulatedUser(frame, features, aspects)
    print(f"{len(frame)} abstracts the corpus, {len(train)} train papers asked about (a half per seed), "
          f"{len(scored)} {args.split} papers scored; floor: {floor.scorer.description}; "
          f"setup {time.perf_counter() - start:.0f} s\n")
    whole = score({a: unit_rows(features.whole[scored]) for a in aspects})
    floor_scores = score({a: v[scored] for a, v in floor.embeddings(features, word_vectors).items()})
    budgets = [m * (len(aspects) + 1) for m in args.marks]
    taught, random_marks, shown = {m: [] for m in args.marks}, {m: [] for m in args.marks}, {}
    for seed in args.seeds:
        rng = np.random.default_rng(seed)
        askable = frame["doc_id"][rng.choice(train, max(1, int(len(train) * ASKABLE_SHARE)), replace=False)]
        t0 = time.perf_counter()
        loop = TeachLoop(features, floor, frame["doc_id"], askable=askable, word_vectors=word_vectors, seed=seed)
        for budget, emb in teach(loop, user, budgets, args.batch).items():
            m = budget // (len(aspects) + 1)
            taught[m].append(score({a: v[scored] for a, v in emb.items()}))
        shown[seed] = (loop.status(), time.perf_counter() - t0)
        for m in args.marks:
            random_marks[m].append(score(recipe(frame, cache, train, scored, m, seed, aspects)))
    worst = lambda runs: {a: min(r[a] for r in runs) for a in aspects}  # noqa: E731
    print("Mean per-paper Spearman x100 against the MiniLM truth, worst of user seeds "
          f"{', '.join(map(str, args.seeds))}; in brackets the difference from the floor.\n")
    print("| embedding | " + " | ".join(aspects) + " | mean |")
    print("|---|" + "---:|" * (len(aspects) + 1))
    print(row("MiniLM whole abstract", whole, aspects))
    print(row("stage 03's label-free floor", floor_scores, aspects))
    for m in args.marks:
        print(row(f"{m} random balanced marks per aspect (taught_marks.py's recipe)", worst(random_marks[m]),
                  aspects, floor_scores))
        print(row(f"{m} marks per aspect, the workbench asking (teach loop)", worst(taught[m]), aspects,
                  floor_scores))
    print()
    for seed, (status, seconds) in shown.items():
        print(f"user seed {seed}: {seconds:.0f} s; " + "; ".join(
            f"{a} {s['yes']} yes / {s['no']} no, sure of {100 * s['sure']:.0f}%" for a, s in status.items()))
    for m in args.marks:
        t, r = worst(taught[m]), worst(random_marks[m])
        print(f"at {m} marks: heads above the floor by " + ", ".join(f"{t[a] - floor_scores[a]:+.1f}" for a in aspects)
              + f"; mean over aspects above the random-marks recipe by {np.mean([t[a] - r[a] for a in aspects]):+.1f}")
    print(f"\n{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
