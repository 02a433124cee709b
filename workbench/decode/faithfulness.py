"""How faithful decoding is: the paper's Table 3 (`decoding_report`), the round trip, a decoded text's confidence.

Round trip. A decoded text is embedded again by the aspect's own model (stage 02); its
cosine to the embedding it was decoded from, and where that embedding's document ranks
among the corpus for it, need no reference text, so they score decodings of arbitrary
points too. `confidence_label` reports the rank next to each decoded text, with a level
that is a function of the rank (high, medium, low: `rank_level`), measured on the run's
validation papers by stage 04 (`save_confidence`, `load_confidence`).

A decoder here is what `decoding.load_decoders` returns: an object with `describe` and
`perplexities` (`decoding.AspectDecoder`), or a retrieval decoder, which also has `decode`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
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
from .report_cache import ReportStore
from .retrieval import KIND_GENERATED, KIND_NEAREST
from ..generate.views import held_out_ids

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


@dataclass(frozen=True)
class FaithfulnessConfig:
    """How `decoding_report` measures a decoder.

    sampling: decoding settings for the decoded texts (default greedy, at most 48 new tokens).
    bertscore_model: the fixed encoder BERTScore compares texts with.
    unconditioned: also score perplexity without any embedding (None: only for a base LM,
        where the paper reports it: a chat LM without soft tokens is off its training path).
    seed: the shuffled control's derangement.
    perplexity_docs: score perplexity on the first reference of the first that many documents
        only (an LM pass each; decoding is cheaper); None scores every reference.
    """

    sampling: Mapping | None = None
    bertscore_model: str = BERTSCORE_MODEL
    unconditioned: bool | None = None
    seed: int = 0
    perplexity_docs: int | None = None


@dataclass(frozen=True)
class RoundTrip:
    """What the round trip needs: the aspect model that embeds a decoded text, and the
    corpus embeddings [M, D] its target is ranked among (None: the decoded documents' own)."""

    aspect_model: object
    corpus_embeddings: np.ndarray | None = None


def decoding_report(decoder, embeddings, references: Sequence[Sequence[str]], round_trip: RoundTrip | None = None,
                    names: Sequence[str] | None = None, exclude=None, reconstructed=None,
                    config: FaithfulnessConfig = FaithfulnessConfig()) -> tuple[dict, pd.DataFrame]:
    """Faithfulness of one aspect's decoder on documents with known summaries (paper Table 3).

    embeddings [N, D] and references[i] (the true summaries of document i). Returns
    (metrics, examples):
    - perplexity of the true summaries given the matching embedding, a shuffled one
      (another document's) and none ("unconditioned"; see `FaithfulnessConfig`);
    - BERTScore F1 of the decoded text against the document's own summaries and against
      another document's ("shuffled");
    - round trip (needs `round_trip`, a `RoundTrip`): mean cosine, mean rank and MRR of the
      target among its corpus embeddings (defaults to `embeddings`).
    examples: one row per document (named by `names`) with the decoded text and its round-trip confidence.
    exclude[i]: papers whose known texts may not be used for document i (the retrieval
    decoder's memory; stage 04 passes each validation paper itself). reconstructed = (vectors
    [m, D], document indices [m]): embeddings recovered through the map (appendix A.11) for a
    few documents; their perplexity and BERTScore come with the matching embedding's on the same
    documents ("..., same papers"), the like-for-like comparison, in the same LM pass.
    The settings (sampling, BERTScore encoder, seed, perplexity_docs...) are `config`.
    """
    emb = unit_rows(np.atleast_2d(embeddings))
    n = len(emb)
    if len(references) != n or any(not r for r in references):
        raise ValueError("each embedding needs a non-empty list of reference summaries")
    # A rerun with the same decoder files, papers and settings reads the report it wrote (`report_cache.py`).
    store = ReportStore.of(decoder, round_trip)
    key = None if store is None else store.key(
        emb, [list(r) for r in references], None if names is None else [str(x) for x in names],
        exclude, reconstructed, config,
        None if round_trip is None else round_trip.corpus_embeddings)
    found = None if key is None else store.get(key)
    if found is not None:
        return found
    perm = derangement(n, config.seed)
    metrics = {"documents": n, "summaries": sum(len(r) for r in references),
               **_perplexities(decoder, emb, references, exclude, reconstructed, config, perm)}
    settings = {"greedy": True, "max_new_tokens": 48, **(config.sampling or {})}
    found = decoder.statements(emb, exclude=exclude, **settings)
    decoded = [f["text"] for f in found]
    # A decoder that takes known statements names the paper each is taken from.
    sources = [f["doc_id"] for f in found] if decoder.names_sources else None
    # The shuffled control pairs the same decodings with the same references; `bertscore.py`
    # reads each distinct text once per session, so it costs no further encoder pass.
    both = bertscore(decoded + [decoded[j] for j in perm], list(references) * 2, model=config.bertscore_model)
    f1, f1_shuffled = both[:n], both[n:]
    metrics.update({"bertscore matching": float(f1.mean()), "bertscore shuffled": float(f1_shuffled.mean())})
    if reconstructed is not None:
        metrics.update(_reconstructed_bertscore(decoder, reconstructed, references, exclude, settings, f1,
                                                config.bertscore_model))
    examples = pd.DataFrame({"document": list(names) if names is not None else list(range(n)),
                             "summary": [r[0] for r in references], "decoded": decoded, "bertscore": f1})
    if sources is not None:
        examples["from paper"] = sources
    if round_trip is not None:
        _add_round_trip(examples, metrics, decoder, decoded, emb, round_trip)
    if key is not None:
        store.put(key, metrics, examples)
    return metrics, examples


def _perplexities(decoder, emb: np.ndarray, references, exclude, reconstructed, config: FaithfulnessConfig,
                  perm: np.ndarray) -> dict:
    """The perplexity half of `decoding_report`: every request it scores goes to the decoder in one call,
    so that a prompt two of them share (matching and reconstructed, say) is read once."""
    n, perplexity_docs = len(emb), config.perplexity_docs
    m = n if perplexity_docs is None else max(2, min(n, perplexity_docs))
    # With a document limit, one reference per document (its first: the human summary where
    # there is one): each is an LM pass, and a validation paper can have a dozen highlights.
    flat = [(i, t) for i in range(m) for t in (references[i] if perplexity_docs is None else references[i][:1])]
    idx, texts = [i for i, _ in flat], [t for _, t in flat]
    own = None if exclude is None else [exclude[i] for i in idx]
    # The shuffled control reads another scored paper's embedding (so the retrieval decoder reads
    # each context once for both); it must not read the true paper's own texts either.
    shuffle = perm if m == n else derangement(m, config.seed)
    shuffled_own = None if exclude is None else [[exclude[i], exclude[shuffle[i]]] for i in idx]
    requests = {"ppl matching": (emb[idx], texts, own), "ppl shuffled": (emb[shuffle[idx]], texts, shuffled_own)}
    unconditioned = decoder.reports_unconditioned if config.unconditioned is None else config.unconditioned
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
    return {"perplexity documents": m, "ppl unconditioned": float("nan"), **decoder.perplexities(requests)}


def _reconstructed_bertscore(decoder, reconstructed, references, exclude, settings: dict, f1: np.ndarray,
                             bertscore_model: str) -> dict:
    """BERTScore of texts decoded from the reconstructed embeddings, beside the matching ones' on the same papers."""
    vectors, picked = np.atleast_2d(reconstructed[0]), [int(i) for i in reconstructed[1]]
    rebuilt = [c[0] if c else "" for c in decoder.describe(
        unit_rows(vectors), exclude=None if exclude is None else [exclude[i] for i in picked], **settings)]
    return {"bertscore reconstructed": float(bertscore(rebuilt, [references[i] for i in picked],
                                                       model=bertscore_model).mean()),
            "bertscore matching, same papers": float(f1[picked].mean()),
            "reconstructed documents": len(picked)}


def _add_round_trip(examples: pd.DataFrame, metrics: dict, decoder, decoded: list[str], emb: np.ndarray,
                    spec: RoundTrip) -> None:
    """Embed each decoded text again and rank its target: per-paper columns into `examples`, means into `metrics`."""
    rt = round_trip(decoded, emb, spec.aspect_model, decoder.aspect,
                    spec.corpus_embeddings if spec.corpus_embeddings is not None else emb)
    examples["round-trip cosine"] = rt["cosine"].to_numpy()
    examples["round-trip rank"] = rt["rank"].to_numpy()
    examples["corpus size"] = rt["corpus size"].to_numpy()  # the papers the rank is among (confidence levels)
    metrics.update({"round-trip cosine": float(rt["cosine"].mean()), "round-trip rank": float(rt["rank"].mean()),
                    "round-trip MRR": float(np.mean(1.0 / rt["rank"])), "corpus size": int(rt["corpus size"][0])})


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
# What a reader can check is the *rank*: the text, embedded again by the aspect's model (stage 02), and
# the map's papers; rank = 1 + the number of papers whose embedding is nearer the text than the point it
# was decoded from (a tapped paper, an empty spot, a placed abstract). Rank 1: no paper is nearer the text
# than that point. The level is a function of the rank alone:
#   high    rank <= high_within  (at most HIGH_SHARE of the papers, and at most HIGH_MAX)
#   low     rank >  low_beyond   (more than LOW_SHARE of the papers, or more than LOW_MAX)
#   medium  between.
# On 4,205 papers: high within the 10 nearest papers, low beyond the 50 nearest, so a text with hundreds of
# papers nearer than the tapped one reads low. Stage 04 measures the levels on the run's validation papers,
# decoded as a tap decodes a paper (its own statements hidden): per level, how many, their median rank and
# their BERTScore against the paper's own statements (the held-out agreement), in decoders/confidence.json.
# The thresholds follow the size of the map the text is shown on (`rank_thresholds`); an entry's high_within
# and low_beyond record them at stage 04's corpus size. An older confidence.json (a round-trip and density
# score cut at terciles, which read "high" with hundreds of papers nearer) still loads; its levels are then
# read from the rank too, with a notice.

HIGH_SHARE, HIGH_MAX = 0.01, 10
LOW_SHARE, LOW_MAX = 0.1, 50
LEVELS = ("high", "medium", "low")
RULE = (f"rank of the point among all papers for the text: high within the nearest {HIGH_SHARE:.0%} (at most "
        f"{HIGH_MAX}), low beyond the nearest {LOW_SHARE:.0%} (at most {LOW_MAX}); figures of the run's validation "
        "papers, decoded with their own statements hidden")
OLD_FIELDS = ("cosine", "density", "low_below", "high_from")  # an older calibration's rule
RANK_FIELDS = ("high_within", "low_beyond")
DENSITY_NEIGHBOURS = 10


def neighbour_density(vectors, corpus, k: int = DENSITY_NEIGHBOURS) -> np.ndarray:
    """Mean cosine of each vector to its k nearest corpus rows; a row identical to the vector (the paper itself) is skipped."""
    sims = unit_rows(np.atleast_2d(vectors)) @ unit_rows(np.atleast_2d(corpus)).T
    sims[sims > 1 - 1e-4] = -np.inf  # a tapped paper is in the corpus: its own row says nothing
    k = max(1, min(k, sims.shape[1] - 1))
    top = -np.sort(-sims, axis=1)[:, :k]
    return np.where(np.isfinite(top), top, np.nan).mean(axis=1) if len(top) else np.zeros(0)


def rank_thresholds(corpus_size: int) -> tuple[int, int]:
    """(high_within, low_beyond) on a map of `corpus_size` papers: high at rank <= high_within, low above low_beyond."""
    n = int(corpus_size)
    high = max(1, min(HIGH_MAX, int(np.floor(HIGH_SHARE * n))))
    return high, max(high, min(LOW_MAX, int(round(LOW_SHARE * n))))


def rank_level(rank, corpus_size) -> str | None:
    """"high", "medium" or "low" for a point of rank `rank` among `corpus_size` papers; None where one is unknown."""
    if rank is None or corpus_size is None or not np.isfinite(float(rank)) or not int(corpus_size):
        return None
    high, low = rank_thresholds(corpus_size)
    return "high" if rank <= high else "low" if rank > low else "medium"


def levels_line(corpus_size: int, point: str = "paper") -> str:
    """The pane's one line on what the levels mean on a map of `corpus_size` papers."""
    high, low = rank_thresholds(corpus_size)
    medium = f"medium = {high} to {low - 1}, " if low > high else ""
    return (f"Confidence is the rank of this {point} among all {int(corpus_size):,} papers for the text, embedded "
            f"again by the aspect's model: high = {'no' if high == 1 else f'at most {high - 1}'} other papers "
            f"nearer the text than this {point}, {medium}low = {low} or more.")


def held_out_line(levels_by_aspect: Mapping[str, Mapping]) -> str:
    """Stage 04's figures behind the levels, per aspect: how many validation papers (decoded with their own
    statements hidden) reached each level and their BERTScore against their own statements; "" where none."""
    parts, older = [], []
    for aspect, levels in levels_by_aspect.items():
        if not levels:
            continue
        if not is_rank_calibration(levels):
            older.append(aspect)
            continue
        held = levels.get("held out") or {}
        figures = []
        for name in LEVELS:
            got = held.get(name) or {}
            score = got.get("BERTScore")
            figures.append(f"{name} {int(got.get('papers') or 0)}" + (f" ({score:.2f})" if score is not None else ""))
        parts.append(f"{aspect}: {', '.join(figures)}")
    line = ""
    if parts:
        line = ("Stage 04's validation papers, decoded with their own statements hidden, per level (BERTScore "
                "against their own statements): " + "; ".join(parts) + ".")
    if older:
        line += (" " if line else "") + (f"The calibration of {', '.join(older)} is an older one (round trip and "
                                         "density): re-run stage 04 for these figures.")
    return line


def rank_calibration(ranks, corpus_size: int, agreement=None) -> dict:
    """An aspect's entry of confidence.json from its validation papers' ranks among `corpus_size` papers and, where
    measured, their agreement (BERTScore of the decoding against the paper's own statements)."""
    ranks = np.asarray(ranks, dtype=float)
    agree = np.full(len(ranks), np.nan) if agreement is None else np.asarray(agreement, dtype=float)
    keep = np.isfinite(ranks)
    ranks, agree = ranks[keep], agree[keep]
    if len(ranks) < 3:
        raise ValueError(f"calibrating the confidence needs at least 3 decoded papers, got {len(ranks)}")
    high, low = rank_thresholds(corpus_size)
    level = np.array([rank_level(r, corpus_size) for r in ranks])
    held = {}
    for name in LEVELS:
        picked = level == name
        scores = agree[picked][np.isfinite(agree[picked])]
        held[name] = {"papers": int(picked.sum()),
                      "median rank": float(np.median(ranks[picked])) if picked.any() else None,
                      "BERTScore": float(scores.mean()) if len(scores) else None}
    return {"papers": int(len(ranks)), "corpus size": int(corpus_size), "high_within": high, "low_beyond": low,
            "held out": held}


def is_rank_calibration(levels: Mapping) -> bool:
    """Whether an aspect's calibration is this rule's (rank thresholds), not an older one's."""
    return all(k in levels for k in RANK_FIELDS)


def save_confidence(run_dir, held_out: Mapping[str, pd.DataFrame], keep: Mapping | None = None) -> dict:
    """Write decoders/confidence.json from stage 04's decoded validation papers, {aspect: frame} with the columns
    "round-trip rank", "corpus size" and, optionally, "bertscore" (`decoding_report`'s examples). An aspect with
    fewer than 3 ranked papers is left out, with a notice. `keep`: other aspects' levels, kept as they are."""
    levels = {a: v for a, v in (keep or {}).items() if a not in held_out}
    for aspect, frame in held_out.items():
        try:
            if "round-trip rank" not in frame or "corpus size" not in frame or not len(frame):
                raise ValueError("no paper was ranked (no aspect model, or no corpus to rank among)")
            levels[aspect] = rank_calibration(frame["round-trip rank"], int(frame["corpus size"].iloc[0]),
                                              frame["bertscore"] if "bertscore" in frame else None)
        except ValueError as exc:
            notice(f"{aspect}: confidence not calibrated ({exc}); its decodings show their rank with no level")
    write_json(RunDir(run_dir).confidence, {"rule": RULE, "aspects": levels}, indent=1)
    return levels


def round_trip_papers(corpus, run_dir, n: int, seed: int = 0) -> list[str]:
    """Up to `n` papers whose round trips calibrate the aspects stage 04 could not score: the run's validation
    papers where stage 02 kept some, else a seeded sample of the papers no stage holds out (`held_out_ids`)."""
    run = RunDir(run_dir)
    val = run.split()[1] if run.split_file.is_file() else []
    if len(val) >= 3:
        return val[:n]
    held = set(held_out_ids(corpus))
    pool = [str(d) for d in corpus.ids if str(d) not in held]
    picked = np.random.default_rng(seed).choice(len(pool), min(n, len(pool)), replace=False) if pool else []
    return [pool[i] for i in sorted(picked)]


def missing_confidence(run_dir) -> str | None:
    """What to say when the run has decoders but no decoders/confidence.json (deleted, or made before it existed)."""
    run = RunDir(run_dir)
    if run.confidence.is_file() or not run.decoders.is_dir() or not any(run.decoders.iterdir()):
        return None
    return (f"{run.confidence} is missing: decoded texts show their rank with no confidence level (high, "
            "medium, low); re-run stage 04 (workbench run --stages 04), or rebuild it with "
            "workbench.decode.decoding.calibrate_confidence(run_dir, corpus, aspects)")


def _check_levels(value) -> None:
    """Raise (KeyError, TypeError, ValueError) where an aspect's entry is neither this rule's nor an older one's."""
    if not isinstance(value, Mapping):
        raise TypeError(f"an aspect's entry is a {type(value).__name__}, not a mapping")
    if is_rank_calibration(value):
        if int(value["high_within"]) < 1 or int(value["low_beyond"]) < int(value["high_within"]):
            raise ValueError(f"rank thresholds {value['high_within']}, {value['low_beyond']} are out of order")
        return
    (cm, cs), (dm, ds) = value["cosine"], value["density"]  # an older calibration: its fields must be whole
    [float(x) for x in (cm, cs, dm, ds, value["low_below"], value["high_from"])]


def load_confidence(run_dir, quiet: bool = False) -> dict:
    """{aspect: levels} of decoders/confidence.json; {} without it (no stage 04, or a run made before it existed).

    A run with decoders but no calibration says so (`missing_confidence`, a notice) unless quiet:
    the caller then says it itself. An older calibration (round trip and density) loads too; unless
    quiet, a notice says that its levels are now read from the rank, without held-out figures.
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
            _check_levels(value)
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is not a confidence calibration ({exc}); re-run stage 04") from exc
    older = sorted(a for a, v in levels.items() if not is_rank_calibration(v))
    if older and not quiet:
        notice(f"{path} is an older calibration (round trip and density) for {', '.join(older)}: the levels shown "
               "are from the rank alone (high, medium, low as the pane says), without held-out figures; re-run "
               "stage 04 (workbench run --stages 04) to measure them on the run's validation papers")
    return levels


def confidence_level(rank, corpus_size, levels: Mapping | None) -> str | None:
    """"high", "medium" or "low" by the rank (`rank_level`); None without a calibration of the aspect, or a rank."""
    if not levels:
        return None
    return rank_level(rank, corpus_size)


def confidence_label(rank, corpus_size, levels: Mapping | None = None, point: str = "paper") -> str:
    """A short human reading of a decoded text's confidence, shown next to it: its level and its rank in words.

    rank: 1 + how many of the `corpus_size` papers are nearer the text, embedded again, than the
    point it was decoded from (`round_trip`); levels: the aspect's calibration (`load_confidence`),
    without which the rank is shown with no level.
    """
    if rank is None or corpus_size is None or not np.isfinite(float(rank)):
        return "confidence unknown: the run has no aspect model to embed the text again (stage 02)"
    nearer, n = int(rank) - 1, f"{int(corpus_size):,}"
    where = (f"no other of the {n} papers is nearer this text than this {point}" if nearer == 0 else
             f"{nearer:,} of the {n} papers {'is' if nearer == 1 else 'are'} nearer this text than this {point}")
    level = confidence_level(rank, corpus_size, levels)
    if level is None:
        return f"confidence not calibrated: {where} (re-run stage 04 to calibrate)"
    return f"{level} confidence: {where}"


def confidence_check(examples: Mapping[str, pd.DataFrame], densities=None,
                     levels: Mapping[str, Mapping] | None = None) -> pd.DataFrame:
    """Whether the levels mean something on held-out papers: per aspect and level, the papers, their median rank and
    their mean BERTScore against their human summaries (stage 06's decoding examples, with "round-trip rank" and
    "corpus size"). Confident decodings should score higher than low ones. densities: accepted from callers of
    the older rule, unused (the level follows the rank)."""
    rows = []
    for aspect, frame in examples.items():
        if aspect not in (levels or {}) or "round-trip rank" not in frame:
            continue
        size = frame["corpus size"] if "corpus size" in frame else pd.Series(len(frame), index=frame.index)
        level = [rank_level(float(r), int(n)) for r, n in zip(frame["round-trip rank"], size)]
        for name in LEVELS:
            picked = [lv == name for lv in level]
            scores, ranks = frame.loc[picked, "bertscore"], frame.loc[picked, "round-trip rank"]
            rows.append({"aspect": aspect, "level": name, "papers": int(len(scores)),
                         "median rank": float(ranks.median()) if len(ranks) else float("nan"),
                         "BERTScore vs human summary": float(scores.mean()) if len(scores) else float("nan")})
    return pd.DataFrame(rows)


def point_word(exclude) -> str:
    """What a decoded point is, in the pane's words: a paper of the map (its own statements excluded), or a spot."""
    return "paper" if exclude else "point"


def _decoded_row(decoder, aspect: str, vector, exclude, settings: Mapping) -> dict:
    """One aspect's decoded text, what kind of text it is and, for a known statement, its paper and source."""
    found = decoder.statements(vector, exclude=[exclude], **settings)[0]
    paper = found.get("doc_id") if decoder.names_sources else None
    row = {"aspect": aspect, "decoded": found["text"],
           "kind": found.get("kind") or (KIND_NEAREST if paper else KIND_GENERATED)}
    if decoder.names_sources:  # say where the text comes from: one paper
        row["from paper"] = paper
        row["source"] = found.get("source")
    return row


def describe_with_confidence(decoders: Mapping, embeddings: Mapping[str, np.ndarray],
                             aspect_models: Mapping[str, object] | None = None,
                             corpus_embeddings: Mapping[str, np.ndarray] | None = None,
                             sampling: Mapping | None = None, exclude: str | None = None,
                             levels: Mapping[str, Mapping] | None = None, point: str | None = None) -> pd.DataFrame:
    """Decode one embedding per aspect ({aspect: [D]}) and rank each text's point among the corpus.

    The entry point for arbitrary points (a map inversion, a user's text): one row per aspect with
    the text, its kind ("nearest known statement" of one paper, or "generated"), for a known
    statement the paper it is from ("from paper") and its source (an LLM answer, a human summary,
    a highlight, an abstract's sentence), the round trip (cosine, rank among the corpus, corpus
    size), the level and a readable confidence. exclude: a paper whose own statements may not be
    used (the paper being decoded); levels: {aspect: calibration} (`load_confidence`); point: what
    the decoded point is in the confidence's words ("paper", "spot"; default by `exclude`).
    """
    rows = []
    settings = {"greedy": True, "max_new_tokens": 48, **(sampling or {})}
    for aspect, vector in embeddings.items():
        if aspect not in decoders:
            raise KeyError(f"no decoder for aspect {aspect!r} (have {sorted(decoders)})")
        row = _decoded_row(decoders[aspect], aspect, vector, exclude, settings)
        if aspect_models is not None and aspect in aspect_models:
            corpus = corpus_embeddings.get(aspect) if corpus_embeddings else None
            rt = round_trip([row["decoded"]], vector, aspect_models[aspect], aspect, corpus).iloc[0]
            rank = int(rt["rank"]) if "rank" in rt else None
            size = int(rt["corpus size"]) if "corpus size" in rt else None
            calibration = (levels or {}).get(aspect)
            row.update({"round-trip cosine": float(rt["cosine"]), "round-trip rank": rank, "corpus size": size,
                        "level": confidence_level(rank, size, calibration),
                        "confidence": confidence_label(rank, size, calibration, point or point_word(exclude))})
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
