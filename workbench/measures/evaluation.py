"""Stage 06 numbers: how well embedding similarities follow aspect-specific ground truths.

The paper's evaluation (sections 3.3 and 4.2, appendices A.5, A.6, B.4), as plain numpy:

* ground truths as (n, n) similarity matrices with NaN for unknown pairs: the LLM judge's
  scores (`judge_similarity`), shared human labels (`label_similarity`), or cosine
  similarity of reference-encoder embeddings of human summaries (`summary_similarity`);
* per document, the Spearman correlation between embedding and ground-truth similarity
  to all other documents (`rowwise_spearman`, Table 2) and the top-k overlap with ties
  in the truth counted (`top_k_overlap`, Table 7); `correlation_table` builds both
  matrices for several models and aspects;
* the cell-mixing permutation test of appendix A.6 (`permutation_test`), bootstrap
  confidence intervals over documents (`bootstrap_ci`), retrieval MRR (`retrieval_table`,
  Table 1) and a written reading of a correlation matrix (`reading`);
* the aspect spaces' agreement (`aspect_space_correlations`, stage 03).

`<run_dir>/metrics.json` (`write_metrics`, `load_metrics`, `compare_metrics`) is in
`runmetrics.py`, the heatmaps of these tables (`plot_matrix`) in `display.py`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .metrics import mrr, retrieval_ranks
from ..core.vectors import as_array, unit_rows

COMBINED = "combined"

# --------------------------------------------------------------------------- similarities


def cosine_similarity_matrix(emb) -> np.ndarray:
    """(n, n) cosine similarities between the rows of `emb` (n, d), in float64.

    A row holding NaN (e.g. a document without a summary) gives a NaN row and column.
    """
    x = as_array(emb)
    if x.ndim != 2:
        raise ValueError(f"cosine_similarity_matrix wants an (n, d) array, got shape {x.shape}")
    return unit_rows(x, np.float64) @ unit_rows(x, np.float64).T


def _with_nan_diagonal(sim: np.ndarray) -> np.ndarray:
    np.fill_diagonal(sim, np.nan)  # a document's similarity to itself is never a ground truth
    return sim


def _known(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    """Pairs that count: both similarities finite, never the document itself."""
    pred, true = np.asarray(pred, dtype=np.float64), np.asarray(true, dtype=np.float64)
    if pred.ndim != 2 or pred.shape != true.shape or pred.shape[0] != pred.shape[1]:
        raise ValueError(f"want two (n, n) matrices of the same shape, got {pred.shape} and {true.shape}")
    mask = np.isfinite(pred) & np.isfinite(true)
    np.fill_diagonal(mask, False)
    return mask


# --------------------------------------------------------------------------- per-document metrics


def _masked_ranks(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per row, 1-based ranks of the masked-in entries with ties averaged (as scipy's rankdata).

    Masked-out entries are set to +inf, so they sort last and never disturb the ranks of
    the entries that count; their own ranks are meaningless and must stay masked.
    """
    v = np.where(mask, x, np.inf)
    order = np.argsort(v, axis=1, kind="stable")
    s = np.take_along_axis(v, order, axis=1)
    n = s.shape[1]
    idx = np.broadcast_to(np.arange(n), s.shape)
    differs = s[:, 1:] != s[:, :-1]
    first = np.ones_like(s, dtype=bool)
    first[:, 1:] = differs
    last = np.ones_like(s, dtype=bool)
    last[:, :-1] = differs
    # Each tie group spans [start, end]; every member gets the average position.
    start = np.maximum.accumulate(np.where(first, idx, 0), axis=1)
    end = np.minimum.accumulate(np.where(last, idx, n - 1)[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty_like(v)
    np.put_along_axis(ranks, order, (start + end) / 2.0 + 1.0, axis=1)
    return ranks


def _centred(ranks: np.ndarray, mask: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranks minus their row mean over the mask (0 outside it), and the row sums of squares."""
    r = np.where(mask, ranks, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = r.sum(axis=1) / counts
    d = np.where(mask, r - mean[:, None], 0.0)
    return d, (d * d).sum(axis=1)


def _rowwise_from_centred(dx, ssx, dy, ssy, counts) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = (dx * dy).sum(axis=1) / np.sqrt(ssx * ssy)
    # Fewer than 3 pairs say nothing about an ordering; constant ranks have no correlation.
    # (A tiny tolerance: average ranks are exact halves, so a constant row sums to exactly 0.)
    rho[(counts < 3) | (ssx <= 1e-12) | (ssy <= 1e-12)] = np.nan
    return rho


def rowwise_spearman(pred_sim, true_sim) -> np.ndarray:
    """Per document i, Spearman correlation of pred_sim[i, j] with true_sim[i, j] over j != i.

    Only pairs where both values are finite count (NaN in `true_sim` marks pairs the
    judge did not score, a missing label, ...). Ties get average ranks, as in
    scipy.stats.spearmanr. Returns an (n,) array; NaN for rows with fewer than 3 known
    pairs or with a constant prediction or truth. The paper's Table 2 is the mean over
    documents, times 100.
    """
    pred, true = np.asarray(pred_sim, dtype=np.float64), np.asarray(true_sim, dtype=np.float64)
    mask = _known(pred, true)
    counts = mask.sum(axis=1)
    dx, ssx = _centred(_masked_ranks(pred, mask), mask, counts)
    dy, ssy = _centred(_masked_ranks(true, mask), mask, counts)
    return _rowwise_from_centred(dx, ssx, dy, ssy, counts)


def _kth_largest(values: np.ndarray, k: int) -> np.ndarray:
    """Per row, the k-th largest value (masked entries must already be -inf)."""
    return -np.partition(-values, k - 1, axis=1)[:, k - 1]


def top_k_overlap(pred_sim, true_sim, k: int = 10) -> np.ndarray:
    """Per document, the share of its k nearest documents under `pred_sim` that are true neighbours.

    True neighbours: every known document whose truth similarity is >= the k-th largest
    one, so ties in the truth (integer judge scores tie a lot) are all counted, as the
    authors do (Table 7). Self and unknown pairs (NaN) are left out. When the prediction
    ties at the k-th place, the tied documents share the remaining places equally (the
    expected overlap under random tie-breaking), so the result does not depend on the
    order of the documents. NaN for rows with k or fewer known pairs, where every
    candidate would count as a neighbour.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    pred, true = np.asarray(pred_sim, dtype=np.float64), np.asarray(true_sim, dtype=np.float64)
    mask = _known(pred, true)
    counts = mask.sum(axis=1)
    out = np.full(pred.shape[0], np.nan)
    rows = counts > k
    if not rows.any():
        return out
    p = np.where(mask, pred, -np.inf)[rows]
    t = np.where(mask, true, -np.inf)[rows]
    true_neighbours = t >= _kth_largest(t, k)[:, None]
    threshold = _kth_largest(p, k)[:, None]
    above = p > threshold
    tied = p == threshold
    free = k - above.sum(axis=1, keepdims=True)  # places left for the documents tied at the k-th value
    weight = above + tied * (free / tied.sum(axis=1, keepdims=True))
    out[rows] = (weight * true_neighbours).sum(axis=1) / k
    return out


# --------------------------------------------------------------------------- ground truths


def judge_similarity(records_or_run_dir, doc_ids: Sequence[str], aspect: str) -> np.ndarray:
    """(n, n) ground truth from the LLM judge's scores for one aspect (paper, appendix A.5).

    `records_or_run_dir`: a run directory (its `judgements.jsonl`), the JSONL file itself,
    a list of record dicts or a DataFrame of them (fields aspect, doc_a, doc_b, score,
    status). Only parsed answers (status "ok") count; the matrix is symmetric, and
    repeated scores of a pair (several samples, or both orders) are averaged. Unscored
    pairs and the diagonal are NaN. Documents not in `doc_ids` are ignored.
    """
    frame = _judge_frame(records_or_run_dir)
    ids = list(doc_ids)
    index = {d: i for i, d in enumerate(ids)}
    n = len(ids)
    total, count = np.zeros((n, n)), np.zeros((n, n))
    if len(frame):
        ok = frame[(frame["aspect"] == aspect) & (frame.get("status", "ok") == "ok")]
        ok = ok[ok["score"].notna() & ok["doc_a"].isin(index) & ok["doc_b"].isin(index)]
        a = ok["doc_a"].map(index).to_numpy(dtype=int)
        b = ok["doc_b"].map(index).to_numpy(dtype=int)
        s = ok["score"].to_numpy(dtype=np.float64)
        # Add each score to both (a, b) and (b, a): the judge's order of A and B is not a direction.
        np.add.at(total, (a, b), s)
        np.add.at(count, (a, b), 1)
        np.add.at(total, (b, a), s)
        np.add.at(count, (b, a), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = np.where(count > 0, total / count, np.nan)
    return _with_nan_diagonal(sim)


def _judge_frame(source) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source
    if isinstance(source, (str, os.PathLike)):
        from ..generate.summaries import JUDGEMENT_KEY
        from ..core.rundir import JUDGEMENTS
        from ..core.store import RecordStore

        path = Path(source)
        if path.is_dir():
            path = path / JUDGEMENTS
        if not path.is_file():
            raise FileNotFoundError(f"no judge records at {path}; run the judge (stage 01, judge_pairs) first")
        return RecordStore(path, JUDGEMENT_KEY).to_frame()
    return pd.DataFrame(list(source))


def _label_set(value) -> frozenset | None:
    """A document's labels as a set; None when it has none (missing, NaN or an empty list)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (list, tuple, set, frozenset, np.ndarray, pd.Series)):
        labels = frozenset(v for v in value if _label_set(v) is not None)
        return labels or None
    return frozenset([value])


def label_similarity(labels: Sequence) -> np.ndarray:
    """(n, n) ground truth from human labels: 1 if two documents share a label, else 0.

    Each entry is one label or a list of labels (a paper may address several
    hypotheses); None, NaN or an empty list marks a document without labels, whose
    row and column are NaN. The diagonal is NaN. (Paper section 4.2: "1 if two
    abstracts address the same hypothesis and 0 otherwise".)
    """
    sets = [_label_set(v) for v in labels]
    vocab = sorted({label for s in sets if s for label in s}, key=repr)
    column = {label: j for j, label in enumerate(vocab)}
    member = np.zeros((len(sets), len(vocab)))
    for i, s in enumerate(sets):
        for label in s or ():
            member[i, column[label]] = 1.0
    sim = (member @ member.T > 0).astype(np.float64)
    missing = np.array([s is None for s in sets], dtype=bool)
    sim[missing, :] = np.nan
    sim[:, missing] = np.nan
    return _with_nan_diagonal(sim)


def summary_similarity(summary_embeddings) -> np.ndarray:
    """(n, n) ground truth: cosine similarity of reference-encoder embeddings of human summaries.

    `summary_embeddings` is an (n, d) array (a NaN row for a document without a summary)
    or a list with, per document, a (d,) vector, a (k, d) array of several summaries
    (averaged first) or None. The caller runs the reference encoder. Diagonal NaN.
    """
    if isinstance(summary_embeddings, np.ndarray) or hasattr(summary_embeddings, "detach"):
        emb = as_array(summary_embeddings)
    else:
        items = [None if e is None else as_array(e) for e in summary_embeddings]
        dims = {e.shape[-1] for e in items if e is not None and e.size}
        if len(dims) != 1:
            raise ValueError(f"summary embeddings need one common dimension, got {sorted(dims)}")
        d = dims.pop()
        emb = np.stack([np.full(d, np.nan) if e is None or not e.size else e.reshape(-1, d).mean(axis=0)
                        for e in items])
    return _with_nan_diagonal(cosine_similarity_matrix(emb))


# --------------------------------------------------------------------------- tables


def _similarities(embeddings, similarities) -> dict:
    """name -> (n, n) similarity, or name -> {aspect: (n, n)} for a multi-aspect model."""
    out = {}
    for name, emb in embeddings.items():
        if isinstance(emb, Mapping):
            out[name] = {aspect: cosine_similarity_matrix(e) for aspect, e in emb.items()}
        else:
            out[name] = cosine_similarity_matrix(emb)
    for name, sim in (similarities or {}).items():
        out[name] = np.asarray(sim, dtype=np.float64)
    return out


def correlation_table(embeddings: Mapping[str, np.ndarray | Mapping[str, np.ndarray]],
                      truths: Mapping[str, np.ndarray], k: int = 10,
                      similarities: Mapping[str, np.ndarray] | None = None,
                      truth_aspects: Mapping[str, str] | None = None) -> dict:
    """The paper's Table 2 (mean per-document Spearman) and Table 7 (top-k overlap), x100.

    embeddings: name -> (n, d) array (a baseline), or name -> {aspect: (n, d)} (the unified
        model), which gives rows "<name>:<aspect>" and a "<name>:combined" row that, for
        each ground-truth column, uses the embedding of the matching aspect (NaN when
        none matches).
    truths: ground-truth name -> (n, n) similarity, NaN for unknown pairs.
    similarities: extra rows given directly as (n, n) similarity, e.g. the human labels
        used as a predictor (Table 2's "Hypo-Labels" row).
    truth_aspects: which aspect the combined row uses for a ground-truth column whose
        name is not an aspect, e.g. {"hypothesis labels": "hypothesis"}.

    Returns {"spearman": DataFrame, "top10": DataFrame (top-k, k = result["k"]),
    "n_docs": DataFrame (documents with a defined Spearman value), "k": k,
    "per_document": {"spearman": {row: {column: (n,)}}, "top10": ...}} (rows = models,
    columns = ground truths; per-document arrays feed `bootstrap_ci`).
    """
    truth_aspects = dict(truth_aspects or {})
    sims = _similarities(embeddings, similarities)
    per_doc = {"spearman": {}, "top10": {}}

    def add(row: str, sim: np.ndarray) -> None:
        per_doc["spearman"][row] = {t: rowwise_spearman(sim, truth) for t, truth in truths.items()}
        per_doc["top10"][row] = {t: top_k_overlap(sim, truth, k) for t, truth in truths.items()}

    for name, sim in sims.items():
        if not isinstance(sim, dict):
            add(name, sim)
            continue
        for aspect, s in sim.items():
            add(f"{name}:{aspect}", s)
        # Combined: reuse the aspect rows' values; a column without a matching aspect stays NaN.
        n = len(next(iter(truths.values()))) if truths else 0
        for metric in per_doc:
            per_doc[metric][f"{name}:{COMBINED}"] = {
                t: (per_doc[metric][f"{name}:{truth_aspects.get(t, t)}"][t]
                    if truth_aspects.get(t, t) in sim else np.full(n, np.nan))
                for t in truths}

    def table(metric: str, reduce) -> pd.DataFrame:
        frame = pd.DataFrame({row: {t: reduce(v) for t, v in cols.items()} for row, cols in per_doc[metric].items()},
                             dtype=float).T
        return frame.reindex(index=list(per_doc[metric]), columns=list(truths))

    def mean100(values: np.ndarray) -> float:
        return 100.0 * float(np.nanmean(values)) if np.isfinite(values).any() else np.nan

    return {"spearman": table("spearman", mean100), "top10": table("top10", mean100),
            "n_docs": table("spearman", lambda v: float(np.isfinite(v).sum())), "k": k, "per_document": per_doc}


def retrieval_table(encoders: Mapping[str, Callable[[list[str]], np.ndarray] | Mapping[str, Callable]],
                    pairs: Mapping[str, tuple[list[str], list[str]]]) -> pd.DataFrame:
    """The paper's Table 1: MRR of retrieving the second view of each document from its first.

    encoders: model name -> function texts -> (len(texts), d) embeddings; or model name ->
        {aspect: function}, for a row that uses each aspect's own model ("Main model").
    pairs: aspect -> (queries, candidates), query i matching candidate i; each query is
        ranked against all candidates by cosine similarity (workbench.measures.metrics).
    Rows: models; columns: aspects; `table.attrs["n_pairs"]` the number of queries per aspect.
    """
    rows = {}
    for name, encoder in encoders.items():
        row = {}
        for aspect, (queries, candidates) in pairs.items():
            encode = encoder.get(aspect) if isinstance(encoder, Mapping) else encoder
            if encode is None:
                row[aspect] = np.nan
                continue
            # One call for both sides, so that a batching encoder embeds them the same way.
            emb = as_array(encode(list(queries) + list(candidates)))
            row[aspect] = mrr(retrieval_ranks(emb[:len(queries)], emb[len(queries):]))
        rows[name] = row
    table = pd.DataFrame.from_dict(rows, orient="index", dtype=float).reindex(columns=list(pairs))
    table.attrs["n_pairs"] = {aspect: len(q) for aspect, (q, _) in pairs.items()}
    return table


# --------------------------------------------------------------------------- significance


def _row_standardised(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Each row centred and scaled over its known cells (0 elsewhere); ranks within a row unchanged."""
    counts = np.maximum(mask.sum(axis=1, keepdims=True), 1)
    filled = np.where(mask, x, 0.0)
    mean = filled.sum(axis=1, keepdims=True) / counts
    sd = np.sqrt((np.where(mask, x - mean, 0.0) ** 2).sum(axis=1, keepdims=True) / counts)
    return np.where(mask, (x - mean) / np.maximum(sd, 1e-12), 0.0)


def permutation_test(sim_a, sim_b, truth, n_permutations: int = 1000, seed: int = 0) -> dict:
    """Appendix A.6: is aspect a's similarity more correlated with `truth` than aspect b's?

    The statistic is the mean per-document Spearman correlation with `truth` (Table 2's
    number). Each permutation builds S_r by taking every cell from S_a or S_b with
    probability 1/2 and compares corr(S_r) - corr(S_b) with the observed
    corr(S_a) - corr(S_b) (the paper counts corr(S_r) >= corr(S_a), the same event).
    p = (1 + #{permutations at least as extreme}) / (1 + n_permutations), so it is never
    below 1 / (n_permutations + 1). Returns {"observed_difference", "p_value",
    "n_permutations", "correlation_a", "correlation_b"} (correlations as fractions).
    """
    a, b = np.asarray(sim_a, dtype=np.float64), np.asarray(sim_b, dtype=np.float64)
    t = np.asarray(truth, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"sim_a and sim_b differ in shape: {a.shape} and {b.shape}")
    mask = _known(a, t) & np.isfinite(b)
    counts = mask.sum(axis=1)
    # The truth's ranks never change between permutations: rank it once.
    dy, ssy = _centred(_masked_ranks(t, mask), mask, counts)

    def corr(sim: np.ndarray) -> float:
        dx, ssx = _centred(_masked_ranks(sim, mask), mask, counts)
        rho = _rowwise_from_centred(dx, ssx, dy, ssy, counts)
        return float(np.nanmean(rho)) if np.isfinite(rho).any() else np.nan

    corr_a, corr_b = corr(a), corr(b)
    observed = corr_a - corr_b
    # Mix row-standardised matrices. Two embeddings' cosines live on different scales (one
    # head's similarities may span 0.3-0.9, another's 0.6-1.0); mixed raw, each row's ranking
    # would be decided by which matrix a cell came from, every mixture would correlate worse
    # than either matrix, and even a worse S_a would look "significant". Standardising each
    # row leaves every row's ranks, and so corr_a and corr_b, unchanged.
    za, zb = _row_standardised(a, mask), _row_standardised(b, mask)
    rng = np.random.default_rng(seed)
    extreme = 0
    for _ in range(n_permutations):
        mixed = np.where(rng.random(a.shape) < 0.5, za, zb)
        # A small tolerance: a permutation equal to S_a must count as "at least as high".
        if corr(mixed) - corr_b >= observed - 1e-12:
            extreme += 1
    return {"observed_difference": observed, "p_value": (extreme + 1) / (n_permutations + 1),
            "n_permutations": int(n_permutations), "correlation_a": corr_a, "correlation_b": corr_b}


def bootstrap_ci(values, n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high): the mean over documents and its percentile bootstrap interval.

    NaN entries (documents without a defined value) are dropped first; all NaN gives
    (nan, nan, nan).
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return (np.nan, np.nan, np.nan)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)
    alpha = (1.0 - ci) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return (float(x.mean()), float(low), float(high))


# --------------------------------------------------------------------------- reading


def diagonal_reading(table: pd.DataFrame, suffix: str = " model", references: Sequence[str] = ("base encoder",),
                     pairs: Mapping[str, int] | None = None, tie: float = 0.02) -> str:
    """Markdown lines reading a Table 1 matrix (rows: the aspects retrieved, columns: the models): for each aspect,
    whether its own model (column "<aspect><suffix>") retrieves best, and the reference columns beside it.

    A gap under `tie` is called a tie: the MRR of a hundred pairs moves by about that much
    from one sample of pairs to another (its standard error is about 0.02 near 0.9).
    """
    models = [c for c in table.columns if str(c).endswith(suffix)]
    lines = []
    for aspect in table.index:
        own_column = f"{aspect}{suffix}"
        if own_column not in table.columns:
            continue
        own = float(table.at[aspect, own_column])
        rivals = table.loc[aspect, [c for c in models if c != own_column]].astype(float)
        where = f" over {pairs[aspect]} pairs" if pairs and aspect in pairs else ""
        close = not rivals.empty and abs(own - rivals.max()) < tie
        if rivals.empty or own >= rivals.max():
            text = f"its own model retrieves best{where} ({own:.3f}" + (
                f"; next the {rivals.idxmax()}, {rivals.max():.3f})" if not rivals.empty else ")")
        else:
            text = (f"the {rivals.idxmax()} retrieves better than its own model{where} ({rivals.max():.3f} against "
                    f"{own:.3f})" + ("" if close else f": on these pairs the {aspect} space is not specific to its aspect"))
        if close:
            text += f", a difference under {tie:g}: a tie on this many pairs, not a finding"
        shown = [f"{r} {float(table.at[aspect, r]):.3f}" for r in references if r in table.columns]
        lines.append(f"- **{aspect}**: {text}" + (f"; {', '.join(shown)}" if shown else "") + ".")
    return "\n".join(lines)


def reading(spearman_table: pd.DataFrame, truth_names: Sequence[str], model_prefix: str,
            baselines: Sequence[str]) -> str:
    """A short markdown reading of a correlation matrix, written from its numbers.

    For each aspect in `truth_names` with a row "<model_prefix>:<aspect>": its value on its
    own column; whether that is the row's highest among `truth_names` (it follows its own
    aspect best, which is not to say it ignores the others) or which columns score higher
    (it leaks into them); whether another aspect row of the model does better on this
    column; and whether it beats each baseline row on this column.
    """
    columns = [c for c in truth_names if c in spearman_table.columns]
    model_rows = {c: f"{model_prefix}:{c}" for c in columns if f"{model_prefix}:{c}" in spearman_table.index}
    if not model_rows:
        return f"- No rows named `{model_prefix}:<aspect>` for these ground truths; nothing to read."
    lines = []
    for aspect, row in model_rows.items():
        own = spearman_table.at[row, aspect]
        if not np.isfinite(own):
            lines.append(f"- **{aspect}**: no value on its own ground truth.")
            continue
        parts = [f"- **{aspect}**: {own:.1f} on its own ground truth"]
        values = spearman_table.loc[row, columns].drop(aspect)
        higher = values[values > own].sort_values(ascending=False)
        if higher.empty:
            parts.append("the ground truth it follows best in its row")
        else:
            parts.append("leaks into " + ", ".join(f"{c} ({v:.1f})" for c, v in higher.items()))
        rivals = {c: spearman_table.at[r, aspect] for c, r in model_rows.items() if c != aspect}
        better = {c: v for c, v in rivals.items() if np.isfinite(v) and v > own}
        if better:
            parts.append("the " + ", ".join(f"{c} embedding ({v:.1f})" for c, v in better.items())
                         + " does better on this ground truth")
        beats = [b for b in baselines if b in spearman_table.index and spearman_table.at[b, aspect] < own]
        loses = [b for b in baselines if b in spearman_table.index and spearman_table.at[b, aspect] >= own]
        if beats and not loses:
            parts.append("above every baseline (" + _listing(spearman_table, beats, aspect) + ")")
        else:
            if beats:
                parts.append("above " + _listing(spearman_table, beats, aspect))
            if loses:
                parts.append("not above " + _listing(spearman_table, loses, aspect))
        lines.append("; ".join(parts) + "." + _next_step(aspect, higher, better, loses))
    return "\n".join(lines)


def _next_step(aspect: str, leaks, better, loses) -> str:
    """What the reading means for the user's next step, in one sentence (empty when all is well)."""
    if loses:
        return (f" *Next:* for maps weighted by {aspect}, the baseline embedding of the whole abstract serves as "
                f"well as this head; sharper {aspect} summaries (a capable generator, a clearer aspect description "
                "and examples) or more papers are what would let the head beat it.")
    if better:
        return (f" *Next:* another aspect's embedding reads {aspect} at least as well: its description may overlap "
                "that aspect's; make the two descriptions and their exclude lists tell them apart.")
    if len(leaks):
        return (f" *Next:* the {aspect} head also follows {', '.join(leaks.index)}: a weight on {aspect} moves those "
                f"papers too; the exclude list of {aspect} can name what it should ignore.")
    return ""


def _listing(table: pd.DataFrame, rows: Iterable[str], column: str) -> str:
    return ", ".join(f"{r} {table.at[r, column]:.1f}" for r in rows)


# --------------------------------------------------------------------------- aspect spaces


def aspect_space_correlations(embeddings: Mapping[str, np.ndarray], max_docs: int | None = 500, seed: int = 0):
    """How differently the aspect spaces order the corpus: a [K, K] DataFrame of mean per-document Spearman.

    For each document and each space, its cosine similarities to all other documents
    form a row; cell (a, b) is the Spearman correlation between the document's rows in
    spaces a and b, averaged over documents. The diagonal is 1; an off-diagonal value
    well below 1 means the two spaces find different neighbours, i.e. each captures
    something of its own. At most `max_docs` documents (a seeded sample) are used.
    """
    import pandas as pd
    from scipy.stats import rankdata

    names = list(embeddings)
    n = len(next(iter(embeddings.values())))
    if n < 3:
        raise ValueError(f"need at least 3 documents to correlate similarity rows, got {n}")
    idx = np.arange(n)
    if max_docs and n > max_docs:
        idx = np.sort(np.random.default_rng(seed).choice(n, max_docs, replace=False))
    off = ~np.eye(len(idx), dtype=bool)  # a document's similarity to itself says nothing
    z = {}
    for name in names:
        x = np.asarray(embeddings[name])[idx].astype(np.float64)  # the sample first: no float64 copy of a million rows
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        sims = (x @ x.T)[off].reshape(len(idx), len(idx) - 1)
        r = rankdata(sims, axis=1)
        r -= r.mean(axis=1, keepdims=True)
        z[name] = r / np.maximum(np.linalg.norm(r, axis=1, keepdims=True), 1e-12)
    matrix = np.array([[float(np.mean(np.sum(z[a] * z[b], axis=1))) for b in names] for a in names])
    return pd.DataFrame(matrix, index=names, columns=names)


def mean_off_diagonal(frame) -> float:
    """The mean of a square matrix's off-diagonal cells (lower = more disentangled aspect spaces)."""
    values = np.asarray(frame, dtype=float)
    return float(values[~np.eye(len(values), dtype=bool)].mean()) if len(values) > 1 else float("nan")
