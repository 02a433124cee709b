"""Stage 06: the paper's evaluation tables for a run, on any corpus (numbers in evaluation.py).

    evaluation_corpus(corpus, run_dir)      the held-out documents (ACLSum: the test split)
    ground_truths(...)                      {name: (n, n)} similarity matrices nobody trained on
    embedding_rows(...)                     the unified model's aspects, baselines, reference rows
    retrieval_pairs / retrieval_encoders    Table 1 inputs
    truths_by_encoder(...)                  the same truths under several reference encoders
    backbone_of / head_vs_backbone          does each head beat the encoder it starts from?
    decoding_table(...)                     Table 3: matching, reconstructed, shuffled, unconditioned
    held_out_decoding(...)                  Table 3 on the held-out papers, reconstructed points, confidence

Ground truths, in order of preference for a corpus:
* human aspect summaries (ACLSum test split): two papers are similar in an aspect as
  much as their human summaries of it are, under a fixed reference encoder that the
  workbench never trains (the packaged mpnet);
* the LLM judge's pairwise scores of stage 01 (appendix A.5), where it ran;
* human labels (a `labels` column): similar when two papers share a label.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.vectors import unit_rows
from ..core.rundir import RunDir
from ..core.display import plot_matrix
from ..core.models import resolve_model
from ..generate.views import collect_views, sample_in_order
from ..decode.faithfulness import (BERTSCORE_LAYERS, FaithfulnessConfig, RoundTrip, decoding_report, confidence_check,
                                   load_confidence, missing_confidence, neighbour_density)
from ..embed.checkpoints import load_model
from ..embed.embeddings import embed_corpus
from ..embed.encoders import CONFIG_NAME
from ..embed.features import FROZEN_MAX_LENGTH, FeatureCache, FrozenBackbone
from ..embed.guard import load_guard
from ..maps.tsne import leave_one_out_reconstruction
from ..maps.tsne_math import MIN_MAP_POINTS
from ..measures.health import BASE
from ..measures.evaluation import (judge_similarity, label_similarity, summary_similarity, permutation_test, bootstrap_ci,
                         rowwise_spearman)

REFERENCE_ENCODER = "mpnet"


def evaluation_corpus(corpus, run_dir=None, split: str | None = "test", unseen: int = 0, seed: int = 0):
    """The documents to evaluate on: the corpus's `split` rows if it has them, else the run's validation documents.

    Never the training documents: with no split column and no stage-02 split, this raises.
    unseen: on the validation path, also up to this many papers that no stage saw (outside stage 01's
    sample and the papers stage 03's check read, so neither trained on nor used to choose a head) and
    that carry a `label_<aspect>` value, a seeded sample in corpus order: Table 2 against the user's
    labels then reads hundreds of papers instead of the few dozen validation papers. Papers without
    summaries add nothing to Table 1.
    """
    docs = corpus.docs
    path = RunDir(run_dir).split_file if run_dir is not None else None
    run_split = json.loads(path.read_text()) if path is not None and path.is_file() else None
    if split and "split" in docs and (docs["split"] == split).any():
        # A corpus made only of that split (aclsum:test) that stage 02 trained on has nothing held out
        # (views.held_out_ids); one the run never saw is all held out.
        trained_on = run_split is not None and bool(set(run_split["train"]) & set(corpus.ids))
        if not ((docs["split"] == split).all() and trained_on):
            return corpus.subset(where=docs["split"] == split)
    if run_split is not None:
        ids = [str(d) for d in run_split["validation"]]
        labels = [c for c in docs.columns if str(c).startswith("label_")]
        if unseen and labels:
            # Papers stage 03's check read chose the heads: they are not unseen (guard.check_papers).
            checked = (load_guard(run_dir) or {}).get("paper_ids", [])
            seen = set(ids) | {str(d) for d in run_split["train"]} | {str(d) for d in checked}
            labelled = docs[labels].notna().any(axis=1).to_numpy()
            candidates = [d for d, ok in zip(docs["doc_id"].astype(str), labelled) if ok and d not in seen]
            ids += sample_in_order(candidates, unseen, seed)
        return corpus.subset(ids=ids)
    raise ValueError(f"the corpus has no {split!r} split and the run has no aspect_models/split.json: "
                     "nothing held out to evaluate on")


TEXT_CACHES: dict = {}  # (folder, backbone key, device) -> FeatureCache: a text is encoded once per run


def encode_texts(model: str, texts: Sequence[str], pooling: str = "mean", max_length: int | None = None,
                 batch_size: int = 32, device: str | None = None, run_dir=None,
                 keep_layer: int | None = None) -> np.ndarray:
    """Unit embeddings of texts with an off-the-shelf encoder (packaged name, folder or hub id), no head.

    Every text goes through a feature cache (`features.FeatureCache`): stage 06 meets the
    same human summary in the ground truths, Table 1 and the reference rows, and each is
    encoded once. With `run_dir` the cache is the run's own (``<run_dir>/features/``), which
    the frozen-mode stages 02-03 already filled with MiniLM vectors of the corpus: the MiniLM
    rows then cost nothing, and a re-run of stage 06 encodes nothing. max_length defaults to
    the frozen mode's (256 tokens, MiniLM's training length; 9% of ACLSum abstracts are longer).
    keep_layer: the texts not cached yet are read by `bertscore.read`, which also keeps their
    token vectors at that layer, so BERTScore against them costs no second pass (mean pooling).
    """
    backbone = FrozenBackbone(str(model), pooling=pooling, max_length=max_length or FROZEN_MAX_LENGTH, device=device)
    folder = None if run_dir is None else RunDir(run_dir).features(backbone.key)
    key = (str(folder), backbone.key, device)
    if key not in TEXT_CACHES:
        # One run's caches at a time: a kernel kept from run to run would otherwise hold every
        # run's vectors (they stay on disk in each run's features/ folder).
        for other in [k for k in TEXT_CACHES if k[0] != key[0]]:
            del TEXT_CACHES[other]
        TEXT_CACHES[key] = FeatureCache(None, backbone, batch_size=batch_size) if run_dir is None else \
            FeatureCache.for_run(run_dir, backbone, batch_size=batch_size)
    cache = TEXT_CACHES[key]
    if keep_layer is not None and pooling == "mean":
        from ..decode.bertscore import read

        new = cache.missing(texts)
        if new:
            cache.add(new, read(str(model), new, keep_layer, pooled=True, max_length=backbone.max_length,
                                batch_size=batch_size, device=device))
    return unit_rows(cache.vectors(list(texts)))


def probe_encoder(model, base_model: str | None = None) -> Callable[[list[str]], dict[str, np.ndarray]]:
    """`encode(texts)` for the probe: the model's heads, plus "base" (the whole text by the base encoder).

    A frozen-backbone model (stage 03 CPU mode) already holds the base encoder's
    whole-text vectors in its feature cache, so "base" costs nothing. Otherwise `base_model`
    (e.g. "minilm") embeds the texts again; without it there is no "base" column.
    """
    def encode(texts: list[str]) -> dict[str, np.ndarray]:
        out = dict(model.encode(list(texts)))
        base = model.base_vectors(texts)  # frozen mode: cached by the encode call just made
        if base is not None:
            out[BASE] = base
        elif base_model:
            out[BASE] = encode_texts(base_model, texts, max_length=getattr(model, "max_length", 256))
        return out

    return encode


def ground_truths(eval_corpus, aspects: Sequence[str], run_dir=None, reference: str = REFERENCE_ENCODER,
                  min_judged_pairs: int = 10) -> dict[str, np.ndarray]:
    """{name: (n, n) similarity, NaN unknown} for the evaluation documents.

    Names: the aspect itself for human-summary truths ("challenge"), "judge:<aspect>" for
    LLM-judge truths with at least `min_judged_pairs` scored pairs, "labels" for shared
    labels, and for a `label_<aspect>` column of the user's categories the aspect itself (or
    "label:<aspect>" beside a human summary). The reference encoder reads the human
    summaries; it is never trained here.
    """
    docs = eval_corpus.docs.reset_index(drop=True)
    ids = docs["doc_id"].astype(str).tolist()
    out: dict[str, np.ndarray] = summary_truths(eval_corpus, aspects, reference, run_dir)
    if run_dir is not None and RunDir(run_dir).judgements.is_file():
        for aspect in aspects:
            truth = judge_similarity(run_dir, ids, aspect)
            if np.isfinite(truth).sum() // 2 >= min_judged_pairs:
                out[f"judge:{aspect}"] = truth
    if "labels" in docs and docs["labels"].notna().sum() >= 2:
        out["labels"] = label_similarity(docs["labels"].tolist())
    # A user's own categories per aspect (a `label_<aspect>` column, e.g. label_disease): two papers are
    # similar in that aspect when they share a category. Named by the aspect where the corpus has no human
    # summary of it, so Table 2's diagonal and the head-against-encoder test read them as that aspect's truth.
    for aspect in aspects:
        column = f"label_{aspect}"
        if column in docs and docs[column].notna().sum() >= 2:
            out[aspect if aspect not in out else f"label:{aspect}"] = label_similarity(docs[column].tolist())
    return out


def summary_truths(eval_corpus, aspects: Sequence[str], reference: str = REFERENCE_ENCODER,
                   run_dir=None) -> dict[str, np.ndarray]:
    """{aspect: (n, n)}: cosine similarity of the documents' human summaries of each aspect under `reference`.

    Only aspects whose summary column is filled for every evaluation document.
    """
    docs = eval_corpus.docs.reset_index(drop=True)
    # Table 3's BERTScore compares decoded texts with these summaries; where this encoder is one
    # BERTScore reads, its token vectors are kept from this pass (`bertscore.py`).
    layer = BERTSCORE_LAYERS.get(resolve_model(reference).name)
    out: dict[str, np.ndarray] = {}
    for aspect in aspects:
        column = f"summary_{aspect}"
        if column in docs and docs[column].map(lambda v: isinstance(v, str) and bool(v.strip())).all():
            vectors = encode_texts(reference, docs[column].tolist(), run_dir=run_dir, keep_layer=layer)
            out[aspect] = summary_similarity(vectors)
    return out


def missing_truths_note(aspects: Sequence[str]) -> str:
    """What stage 06 says where the evaluated papers have no ground truth of any aspect (a corpus of one's own
    without label columns): which tables need one, what to add, and what still holds without one."""
    columns = ", ".join(f"`label_{a}`" for a in aspects)
    return ("**No ground truth on these papers**: Table 2, its significance and the heads-against-encoder test "
            f"need one: your own categories per aspect ({columns} columns in the corpus file), human summaries "
            "(`summary_<aspect>`) or the LLM judge's scores (stage 01's `n_judge_pairs`). Without one, these "
            "sections are skipped; the health checks and stage 03's verdict per head (section 4b) need none.")


def truths_by_encoder(eval_corpus, aspects: Sequence[str], encoders: Sequence[str], run_dir=None) -> dict:
    """{encoder: {name: (n, n)}}: the ground truths under each reference encoder, so nothing is tuned to one.

    The first encoder is the main one and gets every kind of truth (`ground_truths`); the
    others only the human-summary truths, keyed by the bare aspect like the main ones
    (tables show them with a suffix, "challenge @minilm", see `with_truth_suffix`).
    """
    encoders = list(encoders)
    if not encoders:
        raise ValueError("truths_by_encoder needs at least one reference encoder")
    out = {encoders[0]: ground_truths(eval_corpus, aspects, run_dir, reference=encoders[0])}
    for encoder in encoders[1:]:
        out[encoder] = summary_truths(eval_corpus, aspects, encoder, run_dir)
    return out


def with_truth_suffix(table: pd.DataFrame, encoder: str) -> pd.DataFrame:
    """The table with its ground-truth columns named for a non-main reference encoder: "challenge @minilm"."""
    return table.rename(columns=lambda c: f"{c} @{encoder}")


def embedding_rows(run_dir, eval_corpus, aspects: Sequence[str], baselines: Sequence[str] = ("minilm", "mpnet"),
                   human_reference: str | None = "minilm", device: str | None = None) -> dict:
    """The rows of the correlation table: {"unified": {aspect: (n, D)}, "<baseline>": (n, d), ...}.

    baselines embed the abstract with an off-the-shelf encoder (mean pooling). With
    `human_reference`, the human summaries embedded by that encoder are added as a
    reference row ("human summaries", per aspect): how far a perfect summary of one aspect
    gets on its own and on the other ground truths.
    """
    emb = embed_corpus(RunDir(run_dir).unified_model, eval_corpus, run_dir, progress=False)
    rows: dict = {"unified": {a: unit_rows(emb[a]) for a in aspects}}
    texts = eval_corpus.texts()
    for name in baselines:
        rows[f"{name} (abstract)"] = encode_texts(name, texts, device=device, run_dir=run_dir)
    docs = eval_corpus.docs
    if human_reference and all(f"summary_{a}" in docs for a in aspects):
        if docs[[f"summary_{a}" for a in aspects]].map(lambda v: isinstance(v, str)).all().all():
            rows["human summaries"] = {a: encode_texts(human_reference, docs[f"summary_{a}"].tolist(), device=device,
                                                       run_dir=run_dir) for a in aspects}
    return rows


def retrieval_pairs(eval_corpus, aspects: Sequence[str], run_dir=None) -> dict[str, tuple[list[str], list[str]]]:
    """Table 1 pairs per aspect: (first view, second view) of each evaluation document.

    From the corpus's human views (summary, then the first highlight sentence) where the
    evaluation documents have them, else from the run's LLM summaries (the first two).
    """
    # The run's other papers have summaries too: leaving them out here is expected, not a changed corpus.
    views = collect_views(list(aspects), run_dir, eval_corpus, include_human=True, exclude_splits=(),
                          warn_unknown=False)
    ids = set(eval_corpus.ids)
    out = {}
    for aspect in aspects:
        pairs = [(v[0], v[1]) for d, v in views[aspect].views.items() if d in ids and len(v) >= 2]
        if pairs:
            out[aspect] = ([a for a, _ in pairs], [b for _, b in pairs])
    return out


def retrieval_encoders(run_dir, aspects: Sequence[str], base_model: str | None = "minilm",
                       baselines: Sequence[str] = ("mpnet",), device: str | None = None) -> dict:
    """Encoders for Table 1: each aspect model (on every aspect), the untrained base encoder, baselines."""
    encoders: dict = {}
    for aspect in aspects:
        folder = RunDir(run_dir).aspect_model(aspect)
        if folder.is_dir():
            model = load_model(folder, device=device)
            head = aspect if aspect in model.aspects else model.aspects[0]
            encoders[f"{aspect} model"] = (lambda m, h: lambda texts: m.encode(list(texts), aspects=h)[h])(model, head)
    for name in ([base_model] if base_model else []) + list(baselines):
        encoders[f"{name} (off the shelf)"] = (lambda n: lambda texts: encode_texts(n, texts, device=device,
                                                                                    run_dir=run_dir))(name)
    return encoders


def diagonal_significance(similarities: Mapping[str, np.ndarray], truths: Mapping[str, np.ndarray],
                          aspects: Sequence[str], n_permutations: int = 200, seed: int = 0) -> pd.DataFrame:
    """Appendix A.6 for every ordered pair: is aspect a's embedding closer to a's truth than aspect b's?

    similarities: {aspect: (n, n)} of the model's aspect embeddings. Rows: truth/embedding
    aspect a, columns: the competitor b; cells: p-values (small = a is significantly better).
    """
    table = pd.DataFrame(index=list(aspects), columns=list(aspects), dtype=float)
    for a in aspects:
        if a not in truths:
            continue
        for b in aspects:
            if a != b:
                table.loc[a, b] = permutation_test(similarities[a], similarities[b], truths[a], n_permutations,
                                                   seed)["p_value"]
    return table


def decoding_table(decoders, embeddings: Mapping[str, np.ndarray], references: Mapping[str, list[list[str]]],
                   aspect_models: Mapping[str, object] | None = None,
                   reconstructed: Mapping[str, tuple[np.ndarray, list[int]]] | None = None,
                   bertscore_model: str = "mpnet", seed: int = 0,
                   perplexity_docs: int | None = None) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The paper's Table 3 per aspect: perplexity and BERTScore for matching, shuffled, unconditioned
    and (where given) reconstructed embeddings, plus the round-trip confidence.

    embeddings[aspect] [n, D] with references[aspect][i] the true summaries of document i.
    reconstructed[aspect] = (vectors [m, D], document indices [m]): embeddings recovered
    by the appendix A.11 leave-one-out path through the map. perplexity_docs: score
    perplexity on the first that many documents only (decoding and the round trip use all).
    """
    rows, examples = {}, {}
    config = FaithfulnessConfig(bertscore_model=bertscore_model, unconditioned=True, seed=seed,
                                perplexity_docs=perplexity_docs)
    for aspect, emb in embeddings.items():
        model = (aspect_models or {}).get(aspect)
        metrics, ex = decoding_report(decoders[aspect], emb, references[aspect],
                                      RoundTrip(model, emb) if model is not None else None,
                                      reconstructed=(reconstructed or {}).get(aspect), config=config)
        rows[aspect], examples[aspect] = metrics, ex
    order = ["ppl matching", "ppl shuffled", "ppl unconditioned", "ppl reconstructed", "ppl matching, same papers",
             "bertscore matching", "bertscore shuffled", "bertscore reconstructed", "bertscore matching, same papers",
             "round-trip cosine", "round-trip MRR", "documents"]
    table = pd.DataFrame(rows).T
    table = table[[c for c in order if c in table] + [c for c in table if c not in order]]
    counts = [c for c in ("documents", "summaries", "perplexity documents", "reconstructed documents", "corpus size")
              if c in table]
    return table.astype({c: "Int64" for c in counts}), examples


def headline(per_document: Mapping, rows: Sequence[str], truths: Sequence[str], seed: int = 0) -> pd.DataFrame:
    """Mean and bootstrap 95% interval of the per-document Spearman (x100) for chosen rows on each truth."""
    out = []
    for truth in truths:
        for row in rows:
            values = per_document["spearman"].get(row, {}).get(truth)
            if values is None:
                continue
            mean, low, high = bootstrap_ci(np.asarray(values) * 100, seed=seed)
            out.append({"truth": truth, "embedding": row, "mean": mean, "low": low, "high": high})
    return pd.DataFrame(out)


def backbone_of(run_dir) -> str:
    """The encoder the run's unified model starts from: `base_model` of `<run_dir>/unified_model/workbench_config.json`.

    Both training modes record it: a frozen-backbone model ("workbench-pooled-encoder")
    pools that encoder's sentence vectors, a fine-tuned one ("workbench-aspect-encoder")
    started from its weights. Raises FileNotFoundError without the config, ValueError
    when it names no base model.
    """
    path = RunDir(run_dir).unified_model / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no unified model config at {path}; run stage 03 first")
    base = json.loads(path.read_text()).get("base_model")
    if not base:
        raise ValueError(f"{path} names no base_model: the unified model's backbone is unknown")
    return str(base)


def _mean_spearman100(sim: np.ndarray, truth: np.ndarray) -> float:
    rho = rowwise_spearman(sim, truth)
    return 100.0 * float(np.nanmean(rho)) if np.isfinite(rho).any() else np.nan


def head_vs_backbone(similarities: Mapping[str, np.ndarray], truths: Mapping[str, np.ndarray],
                     aspects: Sequence[str], backbone_sim: np.ndarray, n_permutations: int = 200,
                     seed: int = 0) -> pd.DataFrame:
    """Does each head beat the whole-abstract embedding of the encoder it starts from, on its own aspect?

    similarities: {aspect: (n, n)} of the unified model's heads; truths: {aspect: (n, n)}
    ground truths (aspects without one are left out); backbone_sim: (n, n) similarity of
    the backbone's mean-pooled abstract embeddings (see `backbone_of`). For each aspect,
    the appendix A.6 permutation test of the head against the backbone on that aspect's
    truth (one-sided: small p = the head is significantly better).

    Rows: aspect. Columns: "head" and "backbone (whole abstract)" (mean per-document
    Spearman x100, Table 2's number), "gain" (head - backbone, points), "p-value", and
    "own head best" (True when no other head scores higher on this aspect's truth).
    """
    rows = {}
    for a in aspects:
        if a not in truths:
            continue
        test = permutation_test(similarities[a], backbone_sim, truths[a], n_permutations, seed)
        scores = {b: _mean_spearman100(similarities[b], truths[a]) for b in aspects}
        others = [v for b, v in scores.items() if b != a and np.isfinite(v)]
        rows[a] = {"head": 100.0 * test["correlation_a"], "backbone (whole abstract)": 100.0 * test["correlation_b"],
                   "gain": 100.0 * test["observed_difference"], "p-value": test["p_value"],
                   "own head best": bool(np.isfinite(scores[a]) and all(scores[a] >= v for v in others))}
    columns = ["head", "backbone (whole abstract)", "gain", "p-value", "own head best"]
    table = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    return table.astype({"own head best": bool}) if len(table) else table


def head_backbone_intervals(similarities: Mapping[str, np.ndarray], truths: Mapping[str, np.ndarray],
                            aspects: Sequence[str], backbone_sim: np.ndarray, seed: int = 0) -> pd.DataFrame:
    """Bootstrap 95% intervals over documents for `head_vs_backbone`'s two scores (`headline` rows
    "head" and "backbone", with `truth` the aspect)."""
    shown = [a for a in aspects if a in truths]
    per_document = {"spearman": {"head": {a: rowwise_spearman(similarities[a], truths[a]) for a in shown},
                                 "backbone": {a: rowwise_spearman(backbone_sim, truths[a]) for a in shown}}}
    return headline(per_document, ["head", "backbone"], shown, seed=seed)


def plot_head_vs_backbone(intervals: pd.DataFrame, backbone: str = "backbone", ax=None, title: str = ""):
    """Grouped bars per aspect: the head and its backbone's whole-abstract embedding, with their intervals."""
    import matplotlib.pyplot as plt

    aspects = list(dict.fromkeys(intervals["truth"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 * len(aspects) + 2.5, 3.2))
    width = 0.38
    x = np.arange(len(aspects))
    for k, (row, label, color) in enumerate([("head", "aspect head", "#4c72b0"),
                                             ("backbone", f"{backbone} (whole abstract)", "#b0b0b0")]):
        part = intervals[intervals["embedding"] == row].set_index("truth").reindex(aspects)
        mean = part["mean"].to_numpy(dtype=float)
        errors = np.vstack([mean - part["low"].to_numpy(dtype=float), part["high"].to_numpy(dtype=float) - mean])
        ax.bar(x + (k - 0.5) * width, mean, width, yerr=errors, capsize=3, color=color, label=label)
    ax.set_xticks(x, aspects)
    ax.set_ylabel("mean per-paper Spearman x100")
    ax.legend(fontsize="small")
    ax.set_title(title)
    return ax


def plot_correlation_tables(corr: dict, title: str = ""):
    """The Table 2 and Table 7 heatmaps of a `correlation_table` result side by side; returns the figure."""
    import matplotlib.pyplot as plt

    spearman, top = corr["spearman"], corr["top10"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.45 * len(spearman) + 2))
    prefix = f"{title}: " if title else ""
    plot_matrix(spearman, ax=axes[0], title=f"{prefix}mean per-paper Spearman x100", diagonal=True)
    plot_matrix(top, ax=axes[1], title=f"{prefix}top-{corr['k']} overlap x100", diagonal=True)
    fig.tight_layout()
    return fig


@dataclass(frozen=True)
class HeldOutDecodingConfig:
    """How much of stage 06's decoding table (`held_out_decoding`) is computed.

    eval_docs: held-out papers considered (decoding, BERTScore, round trip);
    reconstruct_docs: of those, papers sent through the leave-one-out map path (0 skips it);
    perplexity_docs: papers whose perplexity is scored (an LM pass each; None: all);
    bertscore_model: the fixed reference encoder; seed: the shuffled control and the maps.
    """

    eval_docs: int = 100
    reconstruct_docs: int = 5
    perplexity_docs: int | None = 20
    bertscore_model: str = "mpnet"
    seed: int = 0


def held_out_decoding(decoders, unified: Mapping[str, np.ndarray], held, aspects: Sequence[str], run_dir,
                      all_embeddings: Mapping[str, np.ndarray] | None = None,
                      config: HeldOutDecodingConfig = HeldOutDecodingConfig()) -> dict:
    """Table 3 on the held-out papers, the reconstructed points of appendix A.11 and the confidence check.

    unified[aspect]: the unified model's [n, D] embeddings of `held`'s papers (embedding_rows'
    "unified" row). Papers with a human summary of every aspect (`summary_<aspect>` columns)
    among the first `config.eval_docs` are decoded; fewer than two gives {"skipped": reason}. The
    first `config.reconstruct_docs` of them are each left out of a map of the others, placed and
    inverted (leave_one_out_reconstruction). The confidence a map shows beside a decoded text
    is checked against the human summaries, with each paper's density taken among
    `all_embeddings` (every paper of the run, where a map's points lie).

    Returns {"table", "examples", "reconstruction_cosine", "confidence", "warnings"} (the last three may be
    absent; "warnings": a missing decoders/confidence.json, or too few held-out papers for the reconstruction,
    for the caller to say and record in metrics.json).
    """
    docs = held.docs.reset_index(drop=True)
    use = np.arange(min(config.eval_docs, len(docs)))
    refs = {a: [[docs.at[i, f"summary_{a}"]] if f"summary_{a}" in docs and isinstance(docs.at[i, f"summary_{a}"], str)
                else [] for i in use] for a in aspects}
    keep = [i for i in range(len(use)) if all(refs[a][i] for a in aspects)]
    if len(keep) < 2:
        return {"skipped": f"{len(keep)} held-out paper(s) have a human summary of every aspect (summary_<aspect> "
                           "columns); it needs two or more"}
    emb = {a: unified[a][use][keep] for a in aspects}
    refs = {a: [refs[a][i] for i in keep] for a in aspects}
    out, reconstructed = {}, {}
    # Each paper is left out of a map of the other held-out papers: too few of them leave no map to draw.
    if config.reconstruct_docs and len(docs) - 1 < MIN_MAP_POINTS:
        out["warnings"] = [f"reconstruction skipped: {len(docs)} held-out papers, and the map of the others that "
                           f"each is placed on needs {MIN_MAP_POINTS} (reconstruct_docs=0 turns it off)"]
    elif config.reconstruct_docs:
        picked = list(range(min(config.reconstruct_docs, len(keep))))
        outs = [leave_one_out_reconstruction(unified, int(use[keep[i]]), None, seed=config.seed) for i in picked]
        reconstructed = {a: (np.stack([o["reconstructed"][a] for o in outs]), picked) for a in aspects}
        out["reconstruction_cosine"] = {a: float(np.mean([o["cosine"][a] for o in outs])) for a in aspects}
    models = {a: RunDir(run_dir).decoding_encoder(a) for a in aspects}  # the space each aspect is decoded in
    out["table"], out["examples"] = decoding_table(decoders, emb, refs, models, reconstructed,
                                                   bertscore_model=config.bertscore_model, seed=config.seed,
                                                   perplexity_docs=config.perplexity_docs)
    everyone = all_embeddings if all_embeddings is not None else unified
    check = confidence_check(out["examples"], {a: neighbour_density(emb[a], everyone[a]) for a in aspects},
                             load_confidence(run_dir, quiet=True))
    if len(check):
        out["confidence"] = check
    missing = missing_confidence(run_dir)
    if missing:
        out["warnings"] = [*out.get("warnings", []), f"confidence check skipped: {missing}"]
    return out


def guard_section(run_dir, metrics) -> dict | None:
    """Stage 03's check of each head against its encoder (unified_model/guard.json) as the "guard" section of
    `metrics` (a `runmetrics.RunMetrics`); returns it, or None after a warning when the file is missing.

    Stage 03 writes the file whatever it decides (a check skipped says why), so a run without it
    lost it or predates it: metrics.json would otherwise come out without its guard section, unsaid.
    Read here, not by guard.load_guard, whose module imports this package's health check (an import cycle).
    """
    path = RunDir(run_dir).guard
    if not path.is_file():
        metrics.warn(f"{path} is missing: stage 03's check of each head against its encoder is not in this "
                     "evaluation (metrics.json has no \"guard\" section); re-run stage 03 (workbench run --stages "
                     "03,04,05,06) to rebuild it")
        return None
    try:
        guard = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(guard, dict):
            raise ValueError(f"a JSON {type(guard).__name__}, not an object")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path} cannot be read as stage 03's guard report ({exc}); re-run stage 03") from None
    metrics["guard"] = guard
    return guard


def decoding_reading(decoding: pd.DataFrame) -> str:
    """Markdown lines that read Table 3: per aspect, is its own embedding's text likelier than another paper's?"""
    lines = []
    for a, r in decoding.iterrows():
        better = r["ppl matching"] < r["ppl shuffled"]
        lines.append(f"- **{a}** decoding: perplexity {r['ppl matching']:.2f} matching against "
                     f"{r['ppl shuffled']:.2f} shuffled over {int(r['perplexity documents'])} papers "
                     f"({'lower with its own embedding' if better else 'no better than another paper embedding'}); "
                     f"BERTScore {r['bertscore matching']:.3f} against {r['bertscore shuffled']:.3f}.")
    lines.append("- The perplexities are over a few papers each, without a significance test: a small gap may be "
                 "chance.")
    return "\n".join(lines)


# Tables added to stage 06 from outside: name -> fn(context) -> DataFrame, where context is a dict with
# "run_dir", "held" (the held-out Corpus), "aspects", "rows" (embedding_rows: {row: {aspect: [n, D]}}) and
# "truths" ({truth: [n, n] similarities}). Notebook 06 shows each and writes it to metrics.json under its name.
EXTRA_TABLES: dict = {}


def register_table(name: str, fn) -> None:
    """Add a table to stage 06: `fn(context) -> DataFrame` (see EXTRA_TABLES for what context holds)."""
    EXTRA_TABLES[name] = fn


def extra_tables(run_dir, held, aspects: Sequence[str], rows: Mapping, truths: Mapping) -> dict[str, pd.DataFrame]:
    """Every registered stage-06 table computed for this evaluation, {name: DataFrame}."""
    context = {"run_dir": RunDir(run_dir), "held": held, "aspects": list(aspects), "rows": rows, "truths": truths}
    out = {}
    for name, fn in EXTRA_TABLES.items():
        table = fn(context)
        if not isinstance(table, pd.DataFrame):
            raise TypeError(f"stage-06 table {name!r} returned {type(table).__name__}, not a DataFrame")
        out[name] = table
    return out
