"""How faithful decoding is: the paper's Table 3 (`decoding_report`), the round trip, a decoded text's confidence.

Round trip. A decoded text is embedded again by the aspect's own model (stage 02); its
cosine to the embedding it was decoded from, and where that embedding's document ranks
among the corpus for it, need no reference text, so they score decodings of arbitrary
points too. `confidence_label` reports them next to each decoded text, with a level
calibrated on the run's validation papers (`save_confidence`, `load_confidence`).

A decoder here is what `decoding.load_decoders` returns: an object with `describe` and
`perplexities` (`decoding.AspectDecoder`), or a retrieval decoder, which also has `decode`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from .bertscore import f1 as bertscore_f1
from ..core.files import write_json
from ..core.models import resolve_model
from ..core.progress import notice
from ..core.rundir import RunDir
from ..core.vectors import unit_rows
from ..embed.checkpoints import is_model, load_model

BERTSCORE_MODEL = "mpnet"  # the fixed reference encoder the workbench never trains
BERTSCORE_LAYERS = {"mpnet": 9, "minilm": 6}  # OFFLINE_ASSETS: layers that bert-score uses for these


def bertscore(candidates: Sequence[str], references: Sequence[str | Sequence[str]], model: str = BERTSCORE_MODEL,
              num_layers: int | None = None, batch_size: int = 32, device: str | None = None) -> np.ndarray:
    """BERTScore F1 of each candidate against its reference(s) (the best of several), with a local encoder.

    model: a packaged name ("mpnet", "minilm"), a local folder or a hub id, read at
    `num_layers` (known for the packaged ones). Scores are raw (no baseline rescaling):
    compare them with each other, e.g. matching against shuffled. See `bertscore.py`: each
    text is read once per session, and stage 06's human summaries not at all here.
    """
    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} references")
    if not len(candidates):
        return np.zeros(0)
    layers = num_layers or BERTSCORE_LAYERS.get(resolve_model(model).name)
    if layers is None:
        raise ValueError(f"say which layer of {model!r} BERTScore should use (num_layers=)")
    return bertscore_f1(candidates, references, model, layers, batch_size=batch_size, device=device)


def round_trip(texts: Sequence[str], targets, aspect_model, aspect: str,
               corpus_embeddings: np.ndarray | None = None) -> pd.DataFrame:
    """Round-trip confidence of decoded texts: re-embed each with the aspect model.

    cosine: similarity of text i's embedding to targets[i] (the embedding it was decoded
    from). rank: 1 + the number of corpus documents closer to the text than the target
    (1 = the text points back to where it came from, among the whole corpus). A target
    that is itself a corpus row ties with that row and does not count against itself.
    aspect_model: an AspectEncoder with a head for `aspect` (or a path to one).
    """
    if not is_model(aspect_model):
        aspect_model = load_model(aspect_model)
    targets = unit_rows(np.atleast_2d(targets))
    if len(texts) != len(targets):
        raise ValueError(f"{len(texts)} texts but {len(targets)} targets")
    if not len(texts):
        return pd.DataFrame({"cosine": [], "rank": []})
    head = aspect if aspect in aspect_model.aspects else aspect_model.aspects[0]
    emb = unit_rows(aspect_model.encode(list(texts), aspects=head)[head])
    cosine = np.sum(emb * targets, axis=1)
    out = pd.DataFrame({"cosine": cosine})
    if corpus_embeddings is not None:
        sims = emb @ unit_rows(corpus_embeddings).T
        out["rank"] = (sims > cosine[:, None] + 1e-6).sum(axis=1) + 1
        out["corpus size"] = len(corpus_embeddings)
    return out


def derangement(n: int, seed: int) -> np.ndarray:
    """A permutation with no fixed point (each item gets another item's embedding)."""
    if n < 2:
        raise ValueError("the shuffled control needs at least two documents")
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(n)
        if not np.any(perm == np.arange(n)):
            return perm


def decoding_report(decoder, embeddings, references: Sequence[Sequence[str]], aspect_model=None,
                    corpus_embeddings: np.ndarray | None = None, names: Sequence[str] | None = None,
                    sampling: Mapping | None = None, bertscore_model: str = BERTSCORE_MODEL,
                    unconditioned: bool | None = None, seed: int = 0, exclude=None,
                    perplexity_docs: int | None = None, reconstructed=None) -> tuple[dict, pd.DataFrame]:
    """Faithfulness of one aspect's decoder on documents with known summaries (paper Table 3).

    embeddings [N, D] and references[i] (the true summaries of document i). Returns
    (metrics, examples):
    - perplexity of the true summaries given the matching embedding, a shuffled one
      (another document's) and none ("unconditioned"; by default only for a base LM,
      where the paper reports it: a chat LM without soft tokens is off its training path);
    - BERTScore F1 of the decoded text against the document's own summaries and against
      another document's ("shuffled");
    - round trip (needs aspect_model): mean cosine, mean rank and MRR of the target among
      corpus_embeddings (defaults to `embeddings`).
    examples: one row per document with the decoded text and its round-trip confidence.
    exclude[i]: papers whose known texts may not be used for document i (the retrieval
    decoder's memory; stage 04 passes each validation paper itself). perplexity_docs: score
    perplexity on the first reference of the first that many documents only (an LM pass
    each; decoding is cheaper). reconstructed = (vectors [m, D], document indices [m]):
    embeddings recovered through the map (appendix A.11) for a few documents; their
    perplexity and BERTScore come with the matching embedding's on the same documents
    ("..., same papers"), the like-for-like comparison, in the same LM pass.
    """
    emb = unit_rows(np.atleast_2d(embeddings))
    n = len(emb)
    if len(references) != n or any(not r for r in references):
        raise ValueError("each embedding needs a non-empty list of reference summaries")
    perm = derangement(n, seed)
    m = n if perplexity_docs is None else max(2, min(n, perplexity_docs))
    # With a document limit, one reference per document (its first: the human summary where
    # there is one): each is an LM pass, and a validation paper can have a dozen highlights.
    flat = [(i, t) for i in range(m) for t in (references[i] if perplexity_docs is None else references[i][:1])]
    idx, texts = [i for i, _ in flat], [t for _, t in flat]
    own = None if exclude is None else [exclude[i] for i in idx]
    # The shuffled control reads another scored paper's embedding (so the retrieval decoder reads
    # each context once for both); it must not read the true paper's own texts either.
    shuffle = perm if m == n else derangement(m, seed)
    shuffled_own = None if exclude is None else [[exclude[i], exclude[shuffle[i]]] for i in idx]
    requests = {"ppl matching": (emb[idx], texts, own), "ppl shuffled": (emb[shuffle[idx]], texts, shuffled_own)}
    if unconditioned is None:
        unconditioned = decoder.reports_unconditioned
    if unconditioned:
        requests["ppl unconditioned"] = (None, texts, None)
    if reconstructed is not None:
        vectors, picked = np.atleast_2d(reconstructed[0]), [int(i) for i in reconstructed[1]]
        pairs = [(k, t) for k, i in enumerate(picked)
                 for t in (references[i] if perplexity_docs is None else references[i][:1])]
        rows_of, rebuilt_texts = [k for k, _ in pairs], [t for _, t in pairs]
        excluded = None if exclude is None else [exclude[picked[k]] for k in rows_of]
        # The matching rows of these papers ask the prompts "ppl matching" asks: read once for both.
        requests["ppl reconstructed"] = (unit_rows(vectors)[rows_of], rebuilt_texts, excluded)
        requests["ppl matching, same papers"] = (emb[[picked[k] for k in rows_of]], rebuilt_texts, excluded)
    metrics = {"documents": n, "summaries": sum(len(r) for r in references), "perplexity documents": m,
               "ppl unconditioned": float("nan"), **decoder.perplexities(requests)}
    settings = {"greedy": True, "max_new_tokens": 48, **(sampling or {})}
    found = decoder.statements(emb, exclude=exclude, **settings)
    decoded = [f["text"] for f in found]
    # A decoder that takes known statements names the paper each is taken from.
    sources = [f["doc_id"] for f in found] if decoder.names_sources else None
    # The shuffled control pairs the same decodings with the same references; `bertscore.py`
    # reads each distinct text once per session, so it costs no further encoder pass.
    both = bertscore(decoded + [decoded[j] for j in perm], list(references) * 2, model=bertscore_model)
    f1, f1_shuffled = both[:n], both[n:]
    metrics.update({"bertscore matching": float(f1.mean()), "bertscore shuffled": float(f1_shuffled.mean())})
    if reconstructed is not None:
        rebuilt = [c[0] if c else "" for c in decoder.describe(
            unit_rows(vectors), exclude=None if exclude is None else [exclude[i] for i in picked], **settings)]
        metrics.update({"bertscore reconstructed": float(bertscore(rebuilt, [references[i] for i in picked],
                                                                   model=bertscore_model).mean()),
                        "bertscore matching, same papers": float(f1[picked].mean()),
                        "reconstructed documents": len(picked)})
    examples = pd.DataFrame({"document": list(names) if names is not None else list(range(n)),
                             "summary": [r[0] for r in references], "decoded": decoded, "bertscore": f1})
    if sources is not None:
        examples["from paper"] = sources
    if aspect_model is not None:
        rt = round_trip(decoded, emb, aspect_model, decoder.aspect,
                        corpus_embeddings if corpus_embeddings is not None else emb)
        examples["round-trip cosine"] = rt["cosine"].to_numpy()
        examples["round-trip rank"] = rt["rank"].to_numpy()
        metrics.update({"round-trip cosine": float(rt["cosine"].mean()), "round-trip rank": float(rt["rank"].mean()),
                        "round-trip MRR": float(np.mean(1.0 / rt["rank"])), "corpus size": int(rt["corpus size"][0])})
    return metrics, examples


#: Columns of `faithfulness_table` that are counts (shown without decimals).
FAITHFULNESS_COUNTS = ("documents", "summaries", "perplexity documents", "corpus size")


def faithfulness_table(metrics: Mapping[tuple[str, str], Mapping]) -> pd.DataFrame:
    """Stage 04's faithfulness table: one row per (aspect, decoder) of `decoding_report`'s metrics.

    The index is named ("aspect", "decoder") also when `metrics` is empty (a small corpus where no
    aspect has two validation papers): an empty frame with that index and no columns.
    """
    if not metrics:
        return pd.DataFrame(index=pd.MultiIndex.from_tuples([], names=["aspect", "decoder"]), dtype=float)
    return pd.DataFrame(metrics).T.rename_axis(["aspect", "decoder"])


# ---------------------------------------------------------------- confidence of a decoded text
#
# The rule, two signals, each standardised on the run's own validation papers (decoded by stage 04
# the way a tap decodes a paper: its own statements hidden):
#   round trip  the decoded text embedded again by the aspect model, cosine to the embedding it came from;
#   density     the mean cosine of that embedding to its 10 nearest papers of the corpus (a point among
#               papers is described from statements about papers like it; an outlying one is not).
# score = z(round trip) + z(density); high: as high as the best third of the validation papers' scores,
# low: as low as the worst third, medium between. Fixed cosine cut-offs cannot work: how close a text
# comes back depends on the encoder, the heads and the decoder (with the retrieval decoder every tap on
# the demo read "low"). On ACLSum's held-out papers the decodings marked high are nearer their human
# summaries (BERTScore) than those marked low for every aspect (docs/results.md; stage 06 checks it).

DENSITY_NEIGHBOURS = 10
LOW_MEANS = ("low confidence: the text, embedded again, lands far from this point, or the point lies away from "
             "the papers, compared with decodings of the run's validation papers; read it as a hint and check the "
             "nearest papers")


def neighbour_density(vectors, corpus, k: int = DENSITY_NEIGHBOURS) -> np.ndarray:
    """Mean cosine of each vector to its k nearest corpus rows; a row identical to the vector (the paper itself) is skipped."""
    sims = unit_rows(np.atleast_2d(vectors)) @ unit_rows(np.atleast_2d(corpus)).T
    sims[sims > 1 - 1e-4] = -np.inf  # a tapped paper is in the corpus: its own row says nothing
    k = max(1, min(k, sims.shape[1] - 1))
    top = -np.sort(-sims, axis=1)[:, :k]
    return np.where(np.isfinite(top), top, np.nan).mean(axis=1) if len(top) else np.zeros(0)


def confidence_levels(cosines, densities) -> dict:
    """The rule's standardisation and cut-offs from validation papers' round trips and densities."""
    cos, dens = np.asarray(cosines, dtype=float), np.asarray(densities, dtype=float)
    if cos.shape != dens.shape:
        raise ValueError(f"{len(cos)} round trips but {len(dens)} densities")
    keep = np.isfinite(cos) & np.isfinite(dens)
    cos, dens = cos[keep], dens[keep]
    if len(cos) < 3:
        raise ValueError(f"calibrating the confidence needs at least 3 decoded papers, got {len(cos)}")
    levels = {"cosine": [float(cos.mean()), float(cos.std() or 1.0)],
              "density": [float(dens.mean()), float(dens.std() or 1.0)], "papers": int(len(cos))}
    low, high = np.quantile(confidence_score(cos, dens, levels), [1 / 3, 2 / 3])
    return {**levels, "low_below": float(low), "high_from": float(high)}


def confidence_score(cosine, density, levels: Mapping):
    """z(round trip) + z(density), standardised on the validation papers (`confidence_levels`)."""
    (cm, cs), (dm, ds) = levels["cosine"], levels["density"]
    return (np.asarray(cosine, dtype=float) - cm) / cs + (np.asarray(density, dtype=float) - dm) / ds


def save_confidence(run_dir, signals_by_aspect: Mapping[str, tuple]) -> dict:
    """Write decoders/confidence.json from stage 04's (round trips, densities) per aspect (fewer than 3 papers: left out)."""
    levels = {}
    for aspect, (cosines, densities) in signals_by_aspect.items():
        try:
            levels[aspect] = confidence_levels(cosines, densities)
        except ValueError as exc:
            notice(f"{aspect}: confidence not calibrated ({exc}); its decodings show the round trip only")
    write_json(RunDir(run_dir).confidence,
               {"rule": "z(round-trip cosine) + z(density of the 10 nearest papers), terciles of the validation "
                        "papers", "aspects": levels}, indent=1)
    return levels


def missing_confidence(run_dir) -> str | None:
    """What to say when the run has decoders but no decoders/confidence.json (deleted, or made before it existed)."""
    run = RunDir(run_dir)
    if run.confidence.is_file() or not run.decoders.is_dir() or not any(run.decoders.iterdir()):
        return None
    return (f"{run.confidence} is missing: decoded texts show their round trip with no confidence level (high, "
            "medium, low); re-run stage 04 (workbench run --stages 04), or rebuild it with "
            "workbench.decode.decoding.calibrate_confidence(run_dir, corpus, aspects)")


def load_confidence(run_dir, quiet: bool = False) -> dict:
    """{aspect: levels} of decoders/confidence.json; {} without it (no stage 04, or a run made before it existed).

    A run with decoders but no calibration says so (`missing_confidence`, a notice) unless quiet:
    the caller then says it itself.
    """
    path = RunDir(run_dir).confidence
    if not path.is_file():
        missing = None if quiet else missing_confidence(run_dir)
        if missing:
            notice(missing)
        return {}
    try:
        levels = dict(json.loads(path.read_text()).get("aspects", {}))
        for value in levels.values():
            confidence_score(0.0, 0.0, value)  # every field the rule needs is there
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is not a confidence calibration ({exc}); re-run stage 04") from exc
    return levels


def confidence_level(cosine: float, density: float | None, levels: Mapping | None) -> str | None:
    """"high", "medium" or "low" by the calibrated rule; None without a calibration or a density."""
    if not levels or density is None or not np.isfinite(density):
        return None
    score = float(confidence_score(cosine, density, levels))
    return "high" if score >= levels["high_from"] else "low" if score < levels["low_below"] else "medium"


def confidence_label(cosine: float, rank: int | None = None, corpus_size: int | None = None,
                     levels: Mapping | None = None, density: float | None = None) -> str:
    """A short human reading of a decoded text's confidence, shown next to it.

    levels: the aspect's calibration (`load_confidence`) and density: the point's
    `neighbour_density`; without them the round trip is shown with no level. With a rank: how
    many of the corpus's papers the decoded text, embedded again, is nearer to than to the
    embedding it was decoded from (none: it points straight back).
    """
    where = ""
    if rank is not None and corpus_size:
        nearer = int(rank) - 1
        where = (f"; no paper of {int(corpus_size)} is nearer the text" if nearer == 0 else
                 f"; {nearer} of {int(corpus_size)} papers {'is' if nearer == 1 else 'are'} nearer the text")
    level = confidence_level(cosine, density, levels)
    if level is None:
        return f"confidence not calibrated (round-trip cosine {cosine:.2f}{where}; re-run stage 04 to calibrate)"
    return f"{level} confidence (round-trip cosine {cosine:.2f}{where})"


def confidence_check(examples: Mapping[str, pd.DataFrame], densities: Mapping[str, np.ndarray],
                     levels: Mapping[str, Mapping]) -> pd.DataFrame:
    """Whether the calibrated levels mean something on held-out papers: per aspect and level, the papers and
    their mean BERTScore against their human summaries (stage 06's decoding examples; densities[aspect][i]
    of example row i). Confident decodings should score higher than low ones."""
    rows = []
    for aspect, frame in examples.items():
        if aspect not in levels or "round-trip cosine" not in frame or aspect not in densities:
            continue
        level = [confidence_level(float(c), float(d), levels[aspect])
                 for c, d in zip(frame["round-trip cosine"], densities[aspect])]
        for name in ("high", "medium", "low"):
            picked = frame.loc[[lv == name for lv in level], "bertscore"]
            rows.append({"aspect": aspect, "level": name, "papers": int(len(picked)),
                         "BERTScore vs human summary": float(picked.mean()) if len(picked) else float("nan")})
    return pd.DataFrame(rows)


def describe_with_confidence(decoders: Mapping, embeddings: Mapping[str, np.ndarray],
                             aspect_models: Mapping[str, object] | None = None,
                             corpus_embeddings: Mapping[str, np.ndarray] | None = None,
                             sampling: Mapping | None = None, exclude: str | None = None,
                             levels: Mapping[str, Mapping] | None = None) -> pd.DataFrame:
    """Decode one embedding per aspect ({aspect: [D]}) and score each text by its round trip.

    The entry point for arbitrary points (a map inversion, a user's text): one row per
    aspect with the text, cosine, rank among the corpus and a readable confidence. A
    retrieval decoder also names the paper its statement comes from ("from paper");
    exclude: a paper whose own statements may not be used (the paper being decoded);
    levels: {aspect: calibration} (`load_confidence`) for the confidence's level.
    """
    rows = []
    settings = {"greedy": True, "max_new_tokens": 48, **(sampling or {})}
    for aspect, vector in embeddings.items():
        if aspect not in decoders:
            raise KeyError(f"no decoder for aspect {aspect!r} (have {sorted(decoders)})")
        decoder = decoders[aspect]
        found = decoder.statements(vector, exclude=[exclude], **settings)[0]
        row = {"aspect": aspect, "decoded": found["text"]}
        if decoder.names_sources:  # say where the text comes from
            row["from paper"] = found["doc_id"]
        text = row["decoded"]
        if aspect_models is not None and aspect in aspect_models:
            corpus = corpus_embeddings.get(aspect) if corpus_embeddings else None
            rt = round_trip([text], vector, aspect_models[aspect], aspect, corpus).iloc[0]
            density = float(neighbour_density(vector, corpus)[0]) if corpus is not None else None
            row.update({"round-trip cosine": float(rt["cosine"]),
                        "round-trip rank": int(rt["rank"]) if "rank" in rt else None,
                        "confidence": confidence_label(rt["cosine"], rt.get("rank"), rt.get("corpus size"),
                                                       (levels or {}).get(aspect), density)})
        rows.append(row)
    return pd.DataFrame(rows)


def _round_trip_text(cosine: float, rank=None) -> str:
    """The round trip of a decoding in a table: its cosine, and its rank among the scored papers where known."""
    return f"cosine {float(cosine):.2f}" + (f", rank {int(rank)}" if rank is not None and rank == rank else "")


def figure3_table(examples: Mapping[str, pd.DataFrame], titles: Mapping | None = None, n: int = 3) -> pd.DataFrame:
    """Paper Figure 3 style: per document and aspect, the true summary beside the reconstruction (and, for the
    retrieval decoder, the paper the reconstruction is taken from)."""
    rows = []
    for aspect, frame in examples.items():
        for _, r in frame.head(n).iterrows():
            source = {}
            if "from paper" in r:  # retrieval decoding: a statement of another paper, named so a reader can check it
                doc = r["from paper"]
                source = {"taken from": "(written by the LM)" if doc is None else
                          (titles.get(doc, doc) if titles else doc)}
            rows.append({"document": titles.get(r["document"], r["document"]) if titles else r["document"],
                         "aspect": aspect, "summary": r["summary"], "reconstruction": r["decoded"], **source,
                         **({"round trip": _round_trip_text(r["round-trip cosine"], r.get("round-trip rank"))}
                            if "round-trip cosine" in r else {})})
    return pd.DataFrame(rows)
