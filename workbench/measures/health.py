"""Health check of the aspect heads: does each head use its space, and does it read its own aspect?

The evaluation of stage 06 asks whether each head follows its aspect's ground truth. This
module asks four cheaper questions of the embeddings themselves, none of which needs a
ground truth (cf. Mohr et al., "Principles of Concept Representation in Sentence
Encoders", P1: fine-tuning reshapes anisotropy, not effective rank):

* `effective_rank`: how many directions a head really spreads the papers over (Roy &
  Vetterli 2007), against the base encoder the heads start from;
* `anisotropy`: the mean cosine of two random papers; near 1, every paper looks alike;
* `shared_variance`: how much of one head's space another head shares (debiased linear
  CKA, Kornblith et al. 2019; or the cross-validated ridge R^2 of one head from another);
  two heads with CKA near 1 are copies of each other, whatever their names say;
* `hard_negative_probe`: the behavioural test. Take a paper, swap the sentences that
  state one aspect for another paper's sentences of that aspect, and see which heads
  move. The head of that aspect should move; the others should not.

`health_report` gathers them into one JSON-able dict (`metrics.json`, key "health"),
`health_reading` writes it out as plain sentences, and `plot_health` draws the CKA matrix
and the probe matrix side by side. `corpus_sentence_aspects` gives the probe its
sentence labels (human highlights, else the run's LLM labels; `guard.probe_sentences` adds the
aspect file's) and `evaluate.report.probe_encoder` its
`encode` (a loaded unified model's heads plus the base encoder).

    report = health_report(embeddings, base=base, probe=hard_negative_probe(texts, labels, encode))
    print("\\n".join(health_reading(report)))
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from ..core.devices import one_blas_thread
from ..data.sentences import match_highlights, split_sentences

BASE = "base"
MIN_DOCUMENTS = 10  # fewer held-out papers: no health check (debiased CKA alone needs 4)
COPY_CKA = 0.9          # heads at least this similar are called copies
SIMILAR_CKA = 0.7       # ... and at least this similar, "share most of their structure"
ANISOTROPIC = 0.5       # mean cosine of random papers above which a head is called anisotropic
COLLAPSED_RANK = 0.5    # a head with less than this share of the base encoder's effective rank has collapsed
PROBE_MIN_RATIO = 2.0   # the own head must move at least this many times as much as the other heads

# --------------------------------------------------------------------------- geometry of one head


def _one_thread(fn):
    """Decorator: run `fn` under `one_blas_thread` (see there why)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_blas_thread():
            return fn(*args, **kwargs)

    return wrapper


def _matrix(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"want an (n, d) matrix, got shape {x.shape}")
    return x


def _unit_rows(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


@_one_thread
def effective_rank(x) -> float:
    """Entropy effective rank (Roy & Vetterli 2007) of the rows of `x` (n, d), CENTRED first.

    erank = exp(H(p)), p_k = s_k / sum(s), s the singular values of x minus its column
    mean. It is k for k equal singular values and 1 for a rank-one matrix, and varies
    smoothly in between. We centre because a shared offset (every paper containing the
    same mean vector) is one direction that tells papers apart from nothing: it is what
    `anisotropy` measures, and it should not count as a used dimension. Rows are taken as
    given (the workbench's embeddings are unit rows). At most min(n - 1, d).
    """
    x = _matrix(x)
    s = np.linalg.svd(x - x.mean(axis=0), compute_uv=False)
    s = s[s > s.max(initial=0.0) * 1e-12]  # numerically zero directions carry no entropy (0 log 0 = 0)
    if not len(s):
        return 0.0
    p = s / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def anisotropy(x, n_pairs: int = 20000, seed: int = 0) -> float:
    """Mean cosine similarity of two distinct random rows of `x` (n, d).

    Exact (every pair i < j) when there are at most `n_pairs` pairs, which for the
    workbench's 100 test papers is always; otherwise `n_pairs` uniformly drawn distinct
    pairs (seeded). 0 for an isotropic cloud, 1 when every row points the same way.
    """
    u = _unit_rows(_matrix(x))
    n = len(u)
    if n < 2:
        raise ValueError("anisotropy needs at least two rows")
    if n * (n - 1) // 2 <= n_pairs:
        # sum_{i != j} u_i . u_j = |sum_i u_i|^2 - sum_i |u_i|^2: all pairs without the n x n matrix.
        total = u.sum(axis=0)
        norms = (u * u).sum()
        return float((total @ total - norms) / (n * (n - 1)))
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, n_pairs)
    j = (i + rng.integers(1, n, n_pairs)) % n  # a uniform j != i
    return float(np.mean((u[i] * u[j]).sum(axis=1)))


# --------------------------------------------------------------------------- what two heads share


def _unbiased_hsic(k: np.ndarray, l: np.ndarray) -> float:
    """Song et al. (2012) unbiased HSIC estimator of two (n, n) Gram matrices (n >= 4)."""
    n = len(k)
    k, l = k.copy(), l.copy()
    np.fill_diagonal(k, 0.0)
    np.fill_diagonal(l, 0.0)
    ones_k, ones_l = k.sum(axis=0), l.sum(axis=0)
    value = (k * l).sum() + ones_k.sum() * ones_l.sum() / ((n - 1) * (n - 2)) - 2.0 * ones_k @ ones_l / (n - 2)
    return float(value / (n * (n - 3)))


@_one_thread
def linear_cka(x, y, debiased: bool = True) -> float:
    """Linear CKA (Kornblith et al. 2019) between two representations of the same n rows.

    1 when `y` is a rotation, reflection or isotropic scaling of `x` (plus an offset), 0 for
    unrelated spaces. The plain (biased) estimator ||Yc^T Xc||_F^2 / (||Xc^T Xc||_F
    ||Yc^T Yc||_F) is far from 0 for unrelated spaces when n is not much larger than the
    effective dimension: about d / (d + n), i.e. ~0.8 for two random 384-dim spaces on 100
    papers. `debiased=True` (default) uses the unbiased HSIC estimator instead, which is
    near 0 for unrelated spaces at any n (and may dip slightly below 0). Needs n >= 4.
    """
    x, y = _matrix(x), _matrix(y)
    if len(x) != len(y):
        raise ValueError(f"the two representations must have the same rows, got {len(x)} and {len(y)}")
    if debiased:
        if len(x) < 4:
            raise ValueError("debiased CKA needs at least 4 rows")
        k, l = x @ x.T, y @ y.T
        hxy, hxx, hyy = _unbiased_hsic(k, l), _unbiased_hsic(k, k), _unbiased_hsic(l, l)
        return float(hxy / math.sqrt(hxx * hyy)) if hxx > 0 and hyy > 0 else float("nan")
    xc, yc = x - x.mean(axis=0), y - y.mean(axis=0)
    den = np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc)
    return float(np.linalg.norm(yc.T @ xc) ** 2 / den) if den > 0 else float("nan")


def fold_ids(n: int, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Which of `folds` cross-validation folds each of n rows is in (seeded, sizes differ by at most 1)."""
    ids = np.empty(n, dtype=int)
    ids[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return ids


@_one_thread
def ridge_r2(x, y, alpha: float = 0.01, folds: int = 5, seed: int = 0) -> float:
    """Cross-validated R^2 of predicting `y` (n, d_y) from `x` (n, d_x) by ridge regression with intercept.

    Out-of-fold predictions of all folds, then 1 - SSE / SST summed over the columns of
    `y` (sklearn's "variance_weighted" R^2): the share of y's variance that x predicts on
    papers the regression did not see. Asymmetric: a head may contain another without
    the converse. The default `alpha` suits unit rows (the per-direction variance of 100
    unit vectors spread over ~90 directions is ~0.01); alpha = 1 would shrink everything.
    With fewer papers than dimensions even y from itself scores well below 1 (new papers
    have directions the training papers never showed), so read R^2(a <- b) against
    R^2(a <- a), the ceiling.
    """
    x, y = _matrix(x), _matrix(y)
    ids = fold_ids(len(x), folds, seed)
    pred = np.empty_like(y)
    for f in range(folds):
        test, train = ids == f, ids != f
        mx, my = x[train].mean(axis=0), y[train].mean(axis=0)
        xt, yt = x[train] - mx, y[train] - my
        if len(xt) < x.shape[1]:
            # Fewer papers than dimensions: the same solution from the (n x n) side,
            # X^T (X X^T + aI)^-1 Y = (X^T X + aI)^-1 X^T Y, a far smaller system.
            w = xt.T @ np.linalg.solve(xt @ xt.T + alpha * np.eye(len(xt)), yt)
        else:
            w = np.linalg.solve(xt.T @ xt + alpha * np.eye(x.shape[1]), xt.T @ yt)
        pred[test] = (x[test] - mx) @ w + my
    sst = ((y - y.mean(axis=0)) ** 2).sum()
    return float(1.0 - ((y - pred) ** 2).sum() / sst) if sst > 0 else float("nan")


def shared_variance(embeddings: Mapping[str, np.ndarray], method: str = "cka", **kwargs):
    """Aspect x aspect DataFrame of how much the heads' spaces share.

    method "cka" (the headline): debiased linear CKA, symmetric, 1 on the diagonal. It is
    the standard measure for comparing representations, is blind to rotations and scale
    (which cosine neighbours are too), has no hyperparameter and no cross-validation
    noise, so one number per pair says "same space" or "different space".
    method "ridge": cell [a, b] is the cross-validated R^2 of head a predicted from head
    b (`ridge_r2`, kwargs alpha, folds, seed); asymmetric, a check on what CKA says. The
    diagonal is R^2 of a head from itself, the ceiling at this number of papers (about 0.5
    for 100 papers in 384 dimensions), not 1: that, and the choice of alpha, is why ridge
    R^2 is not the headline.
    """
    import pandas as pd

    names = list(embeddings)
    out = pd.DataFrame(np.nan, index=names, columns=names, dtype=float)
    for a in names:
        for b in names:
            if method == "cka":
                out.loc[a, b] = 1.0 if a == b else linear_cka(embeddings[a], embeddings[b], **kwargs)
            elif method == "ridge":
                out.loc[a, b] = ridge_r2(embeddings[b], embeddings[a], **kwargs)
            else:
                raise ValueError(f"method must be 'cka' or 'ridge', got {method!r}")
    return out


# --------------------------------------------------------------------------- the hard-negative probe


def corpus_sentence_aspects(corpus, aspects: Sequence[str], run_dir=None) -> list[dict[str, list[float]]]:
    """Per document of `corpus` (in its order): {aspect: [mark per sentence of split_sentences(abstract)]}.

    Human highlights (`highlights_<aspect>`, ACLSum) where the corpus has them, for every
    split (this is evaluation: nothing is trained on it); else the run's LLM sentence
    labels (stage 01, `sentence_labels.jsonl`). An aspect nobody labelled for a document
    is absent from its dict.
    """
    llm = {}
    if run_dir is not None:
        from ..generate.sentence_labels import load_sentence_labels

        llm = load_sentence_labels(run_dir, corpus, aspects)
    docs = corpus.docs.reset_index(drop=True)
    out = []
    for row, (doc_id, abstract) in enumerate(zip(corpus.ids, corpus.texts())):
        sentences, marks = split_sentences(abstract), {}
        for a in aspects:
            # As head_training.human_sentence_labels (without its test-split exclusion): highlights that all
            # lie outside the abstract give all-zero marks, since a human read it and marked none.
            column = f"highlights_{a}"
            value = docs.at[row, column] if column in docs else None
            if isinstance(value, (list, tuple, np.ndarray)):
                marks[a] = match_highlights(sentences, value)
            elif llm.get(a, {}).get(doc_id) is not None:
                marks[a] = list(llm[a][doc_id])
        out.append(marks)
    return out


def _pure(marks: Mapping[str, Sequence[float]], aspect: str, n: int) -> list[int] | None:
    """Indices of the sentences that state `aspect` alone, or None when the document cannot be used.

    A document is unusable for an aspect when its labels do not cover its n sentences,
    it has no sentence of the aspect, or one of them also states another aspect: swapping
    such a sentence would change two aspects at once.
    """
    own = marks.get(aspect)
    if own is None or len(own) != n:
        return None
    idx = [i for i in range(n) if own[i] >= 0.5]
    if not idx:
        return None
    for other, m in marks.items():
        if other != aspect and len(m) == n and any(m[i] >= 0.5 for i in idx):
            return None
    return idx


def swap_aspect(sentences_i: Sequence[str], own_i: Sequence[int], sentences_j: Sequence[str],
                own_j: Sequence[int]) -> list[str]:
    """Paper i's sentences with those at `own_i` replaced by paper j's sentences at `own_j`.

    j's sentences go, in their order, where i's first swapped sentence was; every other
    sentence of i stays, unchanged and in its order, so i and the result differ only in
    what they say about the aspect.
    """
    own_i = set(own_i)
    out: list[str] = []
    for k, s in enumerate(sentences_i):
        if k == min(own_i):
            out.extend(sentences_j[m] for m in own_j)
        elif k not in own_i:
            out.append(s)
    return out


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_unit_rows(a) * _unit_rows(b)).sum(axis=1)


def hard_negative_probe(texts: Sequence[str], sentence_aspects: Sequence[Mapping[str, Sequence[float]]],
                        encode: Callable[[list[str]], Mapping[str, np.ndarray]], n_pairs: int = 50,
                        seed: int = 0, min_ratio: float = PROBE_MIN_RATIO, sentences=None) -> dict:
    """Which heads move when one aspect's sentences of a paper are swapped for another paper's?

    For each aspect a, up to `n_pairs` papers i (seeded choice among the usable ones, see
    `_pure`) each get a partner j (seeded, another usable paper whose a-sentences differ);
    i' = i with its a-sentences replaced by j's (`swap_aspect`). `encode(texts) ->
    {head: (n, d)}` embeds the originals and every i' in one call; its keys are the
    columns (the unified model's heads, and e.g. "base" for the base encoder).

    The metric, probe[a][h]: the mean cosine distance 1 - cos_h(i, i') over the pairs,
    divided by head h's median distance between two random original papers. Heads differ
    in spread, so "0.3" means nothing alone; "0.3 of a typical distance between two
    papers" does. The diagonal should be large (near 1: i' is as far as another paper),
    the rest small. `percentile[a][h]`: the share of other papers closer to i than i' is
    under head h (0: i' is still i's nearest neighbour; ~0.5: a random paper).
    `ratio[a]`: probe[a][a] over the mean of probe[a][h] for the other aspect heads;
    `passed[a]` when it is at least `min_ratio`.

    `sentence_aspects[i]`: {aspect: [mark per sentence]} (marks >= 0.5 count), aligned
    with `sentences[i]` (default: `split_sentences(texts[i])`, as everywhere else).
    """
    if sentences is None:
        from ..data.sentences import split_sentences

        sentences = [split_sentences(t) for t in texts]
    texts, sentences = list(texts), [list(s) for s in sentences]
    if len(sentence_aspects) != len(texts) or len(sentences) != len(texts):
        raise ValueError("texts, sentence_aspects and sentences must have one entry per document")
    aspects = list(dict.fromkeys(a for marks in sentence_aspects for a in marks))
    rng = np.random.default_rng(seed)
    swapped_texts, pairs = [], {}
    for a in aspects:
        own = {i: _pure(sentence_aspects[i], a, len(sentences[i])) for i in range(len(texts))}
        usable = [i for i, idx in own.items() if idx is not None]
        chosen = []
        for i in rng.permutation(usable):
            i = int(i)
            said = {sentences[i][k] for k in own[i]}
            # A partner must say something else about the aspect, or i' would equal i.
            partners = [j for j in usable if j != i and {sentences[j][k] for k in own[j]} != said]
            if not partners:
                continue
            j = int(partners[rng.integers(len(partners))])
            chosen.append((i, j))
            swapped_texts.append(" ".join(swap_aspect(sentences[i], own[i], sentences[j], own[j])))
            if len(chosen) == n_pairs:
                break
        if chosen:
            pairs[a] = chosen
    if not pairs:
        raise ValueError("no aspect has two papers with sentences of it alone: nothing to swap")

    emb = {h: np.asarray(v, dtype=np.float64) for h, v in encode(texts + swapped_texts).items()}
    with one_blas_thread():
        return _probe_matrices(emb, len(texts), pairs, min_ratio)


def _probe_matrices(emb: dict, n: int, pairs: dict, min_ratio: float) -> dict:
    """The probe's numbers from the embeddings of the n originals followed by every i', in `pairs` order."""
    heads = list(emb)
    typical, unit = {}, {}
    for h in heads:
        unit[h] = _unit_rows(emb[h][:n])
        sim = unit[h] @ unit[h].T
        typical[h] = float(np.median(1.0 - sim[np.triu_indices(n, 1)]))
    probe, percentile, start = {}, {}, n
    for a, chosen in pairs.items():
        rows = np.array([i for i, _ in chosen])
        probe[a], percentile[a] = {}, {}
        for h in heads:
            moved = emb[h][start:start + len(chosen)]
            distance = 1.0 - _cosine_rows(emb[h][rows], moved)
            probe[a][h] = float(distance.mean() / typical[h]) if typical[h] > 0 else float("nan")
            # Rank of i' among i's neighbours: how many original papers (not i) are closer to i.
            to_others = unit[h][rows] @ unit[h].T
            to_others[np.arange(len(rows)), rows] = -np.inf
            closer = (to_others > (1.0 - distance)[:, None]).sum(axis=1)
            percentile[a][h] = float(np.mean(closer / (n - 1)))
        start += len(chosen)
    ratio, passed = {}, {}
    for a in pairs:
        others = [probe[a][h] for h in heads if h != a and h in pairs]
        if a in heads and others:
            ratio[a] = probe[a][a] / float(np.mean(others)) if np.mean(others) > 0 else float("inf")
            passed[a] = bool(ratio[a] >= min_ratio)
    return {"matrix": probe, "percentile": percentile, "ratio": ratio, "passed": passed,
            "pairs": {a: [[i, j] for i, j in chosen] for a, chosen in pairs.items()},
            "n_pairs": {a: len(chosen) for a, chosen in pairs.items()}, "typical_distance": typical,
            "min_ratio": min_ratio, "heads": heads}


# --------------------------------------------------------------------------- report, reading, plot


def health_report(embeddings: Mapping[str, np.ndarray], base=None, probe: dict | None = None,
                  ridge: bool = True, seed: int = 0) -> dict:
    """The health check as a JSON-able dict (for metrics.json, key "health").

    embeddings: {aspect: (n, d)} the unified model's heads on the same n papers; base:
    (n, d') the base encoder's whole-abstract embedding of those papers, or None; probe:
    what `hard_negative_probe` returned, or None. Keys: documents, aspects, heads
    {aspect: {dim, effective_rank, anisotropy}}, base (same, or None), cka (aspect x
    aspect, debiased), cka_with_base {aspect: CKA with the base encoder}, ridge_r2 ([a][b]:
    head a predicted from head b, [a][a] the ceiling; with `ridge`), probe. Rows are
    L2-normalised first (cosine is how heads are used). The effective rank of n papers is
    at most n - 1: on 100 papers, compare heads with the base encoder, not with d.
    """
    with one_blas_thread():
        names = list(embeddings)
        emb = {a: _unit_rows(_matrix(embeddings[a])) for a in names}
        n = int(len(next(iter(emb.values()))))
        if n < MIN_DOCUMENTS:  # a rank, a CKA or a probe of a handful of papers would be noise
            return {"documents": n, "aspects": names, "too_few": MIN_DOCUMENTS, "heads": None, "base": None,
                    "cka": None, "cka_with_base": None, "ridge_r2": None, "probe": None}

        def geometry(x):
            return {"dim": int(x.shape[1]), "effective_rank": effective_rank(x), "anisotropy": anisotropy(x, seed=seed)}

        report = {"documents": int(len(next(iter(emb.values())))), "aspects": names,
                  "heads": {a: geometry(emb[a]) for a in names}, "base": None,
                  "cka": _nested(shared_variance(emb, "cka")), "cka_with_base": None, "ridge_r2": None, "probe": None}
        if base is not None:
            b = _unit_rows(_matrix(base))
            report["base"] = geometry(b)
            report["cka_with_base"] = {a: linear_cka(emb[a], b) for a in names}
        if ridge:
            report["ridge_r2"] = _nested(shared_variance(emb, "ridge", seed=seed))
        if probe is not None:
            report["probe"] = probe
    from .runmetrics import jsonable  # plain JSON types, NaN as null: metrics.json is strict JSON

    return jsonable(report)


def _nested(frame) -> dict:
    return {str(r): {str(c): float(v) for c, v in row.items()} for r, row in frame.to_dict(orient="index").items()}


def health_reading(report: dict) -> list[str]:
    """Plain sentences on a `health_report`, for a domain expert: copies, used dimensions, anisotropy, probe."""
    if report.get("too_few"):
        return [f"{report['documents']} held-out papers are too few for a health check of the heads "
                f"(it needs {report['too_few']})."]
    names, heads, lines = report["aspects"], report["heads"], []
    # Copies first: two heads that are one space are the most important thing to know.
    cka = report["cka"]
    pairs = sorted(((cka[a][b], a, b) for i, a in enumerate(names) for b in names[i + 1:]
                    if cka[a][b] is not None), reverse=True)
    for value, a, b in pairs:
        if value >= COPY_CKA:
            lines.append(f"the {b} head is nearly a copy of the {a} head (CKA {value:.2f}): weighting one against "
                         "the other barely changes a map.")
        elif value >= SIMILAR_CKA:
            lines.append(f"the {a} and {b} heads share most of their structure (CKA {value:.2f}).")
    if pairs and pairs[0][0] < SIMILAR_CKA:
        value, a, b = pairs[0]
        lines.append(f"the heads are distinct spaces: the most similar pair, {a} and {b}, has CKA {value:.2f}.")
    for a, value in (report.get("cka_with_base") or {}).items():
        if value is not None and value >= COPY_CKA:
            lines.append(f"the {a} head is nearly a copy of the base encoder (CKA {value:.2f}).")

    base = report.get("base")
    lines.append(f"effective dimensions below are measured on {report['documents']} papers, so at most "
                 f"{report['documents'] - 1}.")
    for a in names:
        rank = heads[a]["effective_rank"]
        text = f"the {a} head uses {rank:.0f} effective dimensions"
        if base:
            text += f" against {base['effective_rank']:.0f} for the base encoder"
            if rank < COLLAPSED_RANK * base["effective_rank"]:
                text += ": it has collapsed onto a few directions"
        lines.append(text + ".")
    for a in names:
        value = heads[a]["anisotropy"]
        if value >= ANISOTROPIC:
            lines.append(f"the {a} head is anisotropic: random papers have mean cosine {value:.2f}"
                         + (f" (base encoder {base['anisotropy']:.2f})." if base else "."))
    if not any(heads[a]["anisotropy"] >= ANISOTROPIC for a in names):
        worst = max(names, key=lambda a: heads[a]["anisotropy"])
        lines.append(f"no head is anisotropic: the highest mean cosine of random papers is {heads[worst]['anisotropy']:.2f} "
                     f"({worst})" + (f", base encoder {base['anisotropy']:.2f}." if base else "."))

    probe = report.get("probe")
    if probe:
        for a, ratio in probe["ratio"].items():
            matrix = probe["matrix"][a]
            own = matrix[a]
            versus = f"; the base encoder moves {matrix[BASE]:.2f}" if matrix.get(BASE) is not None else ""
            # None is an infinite ratio written to JSON: the other heads did not move at all.
            times = "while the other heads do not move at all" if ratio is None else \
                f"{ratio:.2f}x as much as the other heads"
            head = (f"swapping the {a} sentences of {probe['n_pairs'][a]} papers moves the {a} head {times} "
                    f"({own:.2f} of a typical distance between two papers{versus})")
            lines.append(head + (f": it reads {a}." if probe["passed"][a] else
                                 f": below {probe['min_ratio']:g}x, the {a} head does not single out its aspect."))
            # The distance says how far i' moved; the neighbour rank says whether the head tells it apart.
            share = probe["percentile"][a][a]
            lines.append(f"under the {a} head a paper with swapped {a} sentences is still closer to its original than "
                         f"{100 * (1 - share):.0f}% of the other papers" +
                         (": the head still sees nearly the same paper." if share < 0.05 else "."))
    return lines


def plot_health(report: dict, axes=None):
    """The CKA matrix of the heads and the probe matrix (swapped aspect x head), side by side; returns the figure."""
    import matplotlib.pyplot as plt

    if report.get("too_few"):
        return None  # nothing measured (see health_reading)
    probe = report.get("probe")
    panels = 2 if probe else 1
    if axes is None:
        fig, axes = plt.subplots(1, panels, figsize=(4.6 * panels, 3.8), squeeze=False)
        axes = axes[0]
    fig = axes[0].figure
    names = report["aspects"]
    cka = np.array([[np.nan if report["cka"][a][b] is None else report["cka"][a][b] for b in names] for a in names])
    _heatmap(axes[0], cka, names, names, "debiased linear CKA between heads", vmin=0, vmax=1)
    if probe:
        rows, cols = list(probe["matrix"]), probe["heads"]
        values = np.array([[np.nan if probe["matrix"][r][c] is None else probe["matrix"][r][c] for c in cols]
                           for r in rows])
        _heatmap(axes[1], values, rows, cols, "probe: head movement / typical distance", vmin=0,
                 vmax=max(1.0, float(np.nanmax(values))))
        axes[1].set_ylabel("swapped sentences")
        axes[1].set_xlabel("head")
    fig.tight_layout()
    return fig


def _heatmap(ax, values, rows, cols, title, vmin, vmax):
    image = ax.imshow(values, cmap="viridis", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for (r, c), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(c, r, f"{v:.2f}", ha="center", va="center",
                    color="black" if v > vmin + 0.6 * (vmax - vmin) else "white", fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
