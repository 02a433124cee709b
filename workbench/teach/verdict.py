"""The verdict the marks give: does the taught head read an aspect better than the encoder's whole abstract?

Per aspect, the truth of a marked paper is its sentences marked as stating the aspect, pooled (their unit mean),
as CSAbstruct's truth pools the sentences people marked. The marked papers are split into folds (`FOLDS`); each
fold's papers are embedded by a head fitted to the other folds' marks alone (`learner.fit_taught`), so no paper
is judged by a head that saw its own marks. Three readings are scored on every marked paper with a truth: the
taught head, the aspect-file floor and the encoder's whole abstract, each by the per-paper Spearman of its
similarities against the truth's (`measures.evaluation.rowwise_spearman`, x100). The difference between the
taught head and the whole abstract gets a paired bootstrap interval over papers (`DRAWS`, `LEVEL`):

* above 0: the taught head reads the aspect better than the whole abstract, and stays;
* below 0: the whole abstract reads it better; the better of the whole abstract and the floor is kept;
* across 0: too few marks to tell; the taught head stays (the marks are the best evidence there is) and the
  verdict says about how many more marked papers would narrow the interval to exclude 0 (its width shrinks as
  1 / sqrt(papers)).

`verdict_lines(run_dir)` says each aspect's verdict in words, verified or not, from the run's guard.json.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.vectors import unit_rows
from ..embed.guard import load_guard
from ..measures.evaluation import rowwise_spearman
from .learner import fit_taught, taught_floor
from .marks import sentence_key

# On CSAbstruct's dev papers (`benchmarks/teach.py --split dev --folds F --level L`) 10 folds, one paper per fold
# and a 90% interval gave no more verdicts at 10 marks per aspect than 5 folds at 95% (docs/results.md, "The
# verdict with marks against the labels'").
FOLDS = 5        # folds over the marked papers (fewer where there are fewer papers)
DRAWS = 1000     # bootstrap draws of the papers
LEVEL = 0.95     # the interval's coverage
MIN_PAPERS = 4   # marked papers stating an aspect before its three readings can be ranked at all
BETTER, WORSE, UNSURE, NONE = "better", "worse", "too few", "not checked"
KEPT_WORDS = {"head": "the trained head", "aspect file": "the head your aspect file gives",
              "base": "the encoder's whole abstract", "taught": "the head your marks taught"}


def marked_sentences(loop, marks=None) -> list[tuple[int, int, object, int | None]]:
    """(paper, sentence index, mark, table row or None for boilerplate) of every answered sentence of the corpus
    (skips left out) among `marks` (None: the loop's)."""
    out = []
    for m in (loop.marks if marks is None else marks).current():
        where = loop.where.get((m.doc_id, sentence_key(m.sentence)))
        if where is not None and not m.skipped:
            out.append((*where, m, loop.row_of.get((m.doc_id, sentence_key(m.sentence)))))
    return out


def truths(loop, found) -> dict[str, dict[int, np.ndarray]]:
    """{aspect: {paper: the unit mean of its sentences marked as stating the aspect}}."""
    out = {a: {} for a in loop.aspects}
    for a in loop.aspects:
        by_paper: dict[int, list] = {}
        for i, k, m, _ in found:
            if m.states(a):
                by_paper.setdefault(i, []).append(np.asarray(loop.features.sentences[i][k], np.float32))
        out[a] = {i: unit_rows(np.mean(v, axis=0, keepdims=True))[0] for i, v in by_paper.items()}
    return out


def held_out_embeddings(loop, found, papers: list[int], folds: int, rng) -> dict[str, np.ndarray]:
    """{aspect: [len(papers), H]}: each paper embedded by the taught floor fitted to the other folds' marks."""
    order = rng.permutation(len(papers))
    parts = np.array_split(order, min(folds, len(papers)))
    out = {a: np.zeros((len(papers), loop.features.whole.shape[1]), np.float32) for a in loop.aspects}
    for part in parts:
        held = {papers[j] for j in part}
        train = [(m, r) for i, _, m, r in found if i not in held and r is not None]
        answers = np.array([[m.states(a) for a in loop.aspects] for m, _ in train], bool).reshape(-1, len(loop.aspects))
        rows = np.array([r for _, r in train], int)
        scorer = fit_taught(loop.floor.scorer, loop.inputs[rows], answers)
        stated = [np.asarray(loop.features.sentences[i][k], np.float32) for i, k, m, _ in found
                  if i not in held and m.aspects]
        stated = np.stack(stated) if stated else None
        vectors = taught_floor(loop.floor, scorer, stated).embeddings(
            loop.features.subset([papers[j] for j in part]), loop.word_vectors)
        for a in loop.aspects:
            out[a][part] = vectors[a]
    return out


def per_paper(vectors: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """[n] per-paper Spearman x100 of the vectors' cosine similarities against the truth's."""
    v, t = unit_rows(vectors, np.float64), unit_rows(truth, np.float64)
    return rowwise_spearman(v @ v.T, t @ t.T) * 100


def interval(diff: np.ndarray, rng, draws: int = DRAWS, level: float = LEVEL) -> tuple[float, float]:
    """The paired bootstrap interval of the mean of `diff` over papers."""
    means = diff[rng.integers(len(diff), size=(draws, len(diff)))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    return float(np.percentile(means, tail)), float(np.percentile(means, 100 - tail))


def more_needed(n: int, mean: float, low: float, high: float) -> int | None:
    """About how many more marked papers would make the interval's half-width smaller than |mean| (its width
    shrinks as 1 / sqrt(papers)); None where the mean difference is 0 (no number of papers would tell)."""
    if abs(mean) < 1e-9:
        return None
    half = (high - low) / 2
    return max(1, math.ceil(n * (half / abs(mean)) ** 2) - n)


def check_aspect(scores: dict[str, np.ndarray], rng, n_marks: int, n_papers: int = 0, level: float = LEVEL) -> dict:
    """One aspect's verdict from its per-paper scores {"taught", "aspect file", "base"} (see the module doc);
    `n_papers`: the papers with a truth, where too few of them to score."""
    ok = np.all([np.isfinite(v) for v in scores.values()], axis=0)
    n = int(ok.sum()) if len(ok) else 0
    means = {c: float(np.mean(v[ok])) if n else float("nan") for c, v in scores.items()}
    out = {"papers": n or n_papers, "marks": n_marks, "scores": {c: round(v, 2) for c, v in means.items()}}
    if n < MIN_PAPERS:
        return {**out, "outcome": UNSURE, "kept": "taught", "more": MIN_PAPERS - out["papers"], "interval": None}
    diff = scores["taught"][ok] - scores["base"][ok]
    low, high = interval(diff, rng, level=level)
    out["interval"] = [round(low, 2), round(high, 2)]
    if low > 0:
        return {**out, "outcome": BETTER, "kept": "taught"}
    if high < 0:
        return {**out, "outcome": WORSE, "kept": max(("base", "aspect file"), key=lambda c: means[c])}
    return {**out, "outcome": UNSURE, "kept": "taught", "more": more_needed(n, float(diff.mean()), low, high)}


def cross_check(loop, folds: int = FOLDS, seed: int = 0, judge=None, level: float = LEVEL) -> dict[str, dict]:
    """{aspect: its verdict} on the loop's marks (see the module doc); an aspect no paper's marks state is said
    to have too few. `judge`: other marks (`Marks`) whose held-out papers give the truth, the loop's marks still
    teaching the heads (a benchmark judges a head taught wrong answers by the right ones); None: the loop's."""
    rng = np.random.default_rng(seed)
    found = marked_sentences(loop)
    judged = found if judge is None else marked_sentences(loop, judge)
    truth = truths(loop, judged)
    papers = sorted({i for i, *_ in found} | {i for i, *_ in judged})
    out = {}
    if len(papers) < 2:
        return {a: check_aspect({c: np.zeros(0) for c in ("taught", "aspect file", "base")}, rng,
                                sum(1 for *_, m, _ in judged if m.states(a))) for a in loop.aspects}
    taught = held_out_embeddings(loop, found, papers, folds, rng)
    floor = loop.floor.embeddings(loop.features.subset(papers), loop.word_vectors)
    whole = unit_rows(np.asarray(loop.features.whole, np.float32)[papers])
    for a in loop.aspects:
        rows = [j for j, i in enumerate(papers) if i in truth[a]]
        t = np.stack([truth[a][papers[j]] for j in rows]) if rows else np.zeros((0, whole.shape[1]))
        scores = {c: per_paper(v[rows], t) if len(rows) >= 3 else np.zeros(0)
                  for c, v in (("taught", taught[a]), ("aspect file", floor[a]), ("base", whole))}
        out[a] = check_aspect(scores, rng, sum(1 for *_, m, _ in judged if m.states(a)), len(rows), level)
    return out


def said(aspect: str, check: dict) -> str:
    """One aspect's verdict on the marks, in words."""
    where = f"checked on {check['papers']} of the papers you marked ({check['marks']} sentences stating it)"
    if check["outcome"] == BETTER:
        return f"{aspect}: {where}: the head your marks taught reads it better than the whole abstract"
    if check["outcome"] == WORSE:
        return (f"{aspect}: {where}: the whole abstract reads it better than the head your marks taught, so the "
                f"workbench uses {KEPT_WORDS[check['kept']]}")
    more = check.get("more")
    need = f"mark sentences in about {more} more papers to tell" if more else \
        "the taught head and the whole abstract read it alike so far"
    return f"{aspect}: {where}: too few marks to tell whether it beats the whole abstract; {need}"


def line(aspect: str, result: dict | None) -> str:
    """An aspect's verdict in words from its guard.json entry (None: the guard said nothing of it)."""
    if result and result.get("marks check"):
        return said(aspect, result["marks check"])
    if result and result.get("verified") and result.get("checked by"):
        return (f"{aspect}: checked against {result['checked by']}; the workbench uses "
                f"{KEPT_WORDS.get(result.get('kept'), result.get('kept'))}")
    return f"{aspect}: not checked against anything you gave; mark some sentences to check it"


def verdict_lines(run_dir, aspects=None) -> list[str]:
    """Each aspect's verdict in plain words, verified or not, from the run's guard.json (stage 03): one line per
    aspect of `aspects` (None: those the guard names)."""
    report = load_guard(run_dir) or {}
    results = report.get("aspects") or {}
    return [line(a, results.get(a)) for a in (results if aspects is None else aspects)]
