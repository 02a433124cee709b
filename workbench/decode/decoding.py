"""Stage 04: build, train and load the embedding decoders of a run.

Two decoders: the retrieval decoder (`retrieval.py`, the CPU-first default: the
known statement nearest an embedding) and the paper's soft-prompt decoder (`soft_prompt.py`,
soft tokens for a frozen LM). This module is the stage:

    build_retrieval_decoders(run_dir, ...)    -> <run_dir>/decoders/retrieval/ (no training)
    decoder_data(run_dir, corpus, aspects)   (embedding, summaries) per document and aspect
    train_decoders(run_dir, data, aspects)    -> <run_dir>/decoders/<aspect>/ (or shared/)
    set_default_decoder(run_dir, kind)        which kind stages 05 and 06 load
    load_decoders(run_dir)                    {aspect: decoder}, ready to .describe()
    evaluate_decoders(run_dir, data, ...)     faithfulness (Table 3) -> decoders/metrics.json, confidence.json
    calibrate_confidence(run_dir, ...)        the confidence levels, for a run without stage 04's own pass

Which embedding the decoder learns from. The paper trains on the mean of the aspect
models' embeddings of a paper's summaries (the distillation targets). We train on the
*unified model's embedding of the abstract* by default (`source="unified"`), because
that is what the decoder is asked to decode afterwards: papers embedded by the unified
model, new abstracts, and points inverted out of a map built from unified embeddings.
The unified model is trained to hit the targets, so both lie in the same space; the
teacher targets stay available as `decoder_data(..., source="targets")` for the paper's setting.

How faithful decoding is (the paper's Table 3, the round trip, the confidence of a decoded
text) is measured in `faithfulness.py`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np
import pandas as pd

from .soft_prompt import CONFIG_NAME, HISTORY_NAME, DecodeSampling, DecoderConfig, EmbeddingDecoder
from .soft_prompt_training import DecoderItems, DecoderTrainResult, train_decoder
from .faithfulness import load_confidence, round_trip, save_confidence
from ..core.rundir import RunDir, decoding_encoder_dir, read_split
from ..core.files import write_json
from ..core.vectors import unit_rows

from .faithfulness import FaithfulnessConfig, RoundTrip, decoding_report, faithfulness_table
from ..core.models import load_causal_lm
from ..core.progress import notice
from ..generate.views import collect_views
from ..embed.embeddings import embed_corpus
from ..embed.targets import load_targets
from .retrieval import (CHECKS, ENCODER_UNIFIED, FOLDER, KIND_GENERATED, MEMORY_NAME, build_memories, fingerprint,
                        load_retrieval_decoders, save_memories)

SHARED = "shared"
DONE_NAME = "done.json"
DEFAULT_NAME = "default.json"  # which kind of decoder the later stages load: {"kind": "retrieval"}


@dataclass
class DecoderData:
    """Training material for one aspect's decoder: one item per document with summaries.

    embeddings [N, D] (unit rows) and texts[i] (the summaries of doc_ids[i]); train_idx
    and val_idx index the items by the run's train/validation split (stage 02).
    """

    aspect: str
    doc_ids: list[str]
    embeddings: np.ndarray
    texts: list[list[str]]
    train_idx: list[int]
    val_idx: list[int]
    source: str = "unified"
    # The unified embeddings of every paper of the corpus (source "unified"), among which the round trip
    # ranks a decoded paper: the rank a tap on the map shows. None: ranked among `embeddings`.
    corpus_embeddings: np.ndarray | None = field(default=None, repr=False)

    def fingerprint(self) -> str:
        """Hash of everything training depends on, so a re-run skips finished decoders."""
        h = hashlib.sha256()
        h.update(json.dumps([self.aspect, self.source, self.doc_ids, self.texts, self.train_idx,
                             self.val_idx]).encode())
        h.update(np.ascontiguousarray(self.embeddings, dtype=np.float32).tobytes())
        return h.hexdigest()[:16]

    def stats(self) -> dict:
        """Counts for the notebook's data table."""
        return {"aspect": self.aspect, "train docs": len(self.train_idx), "validation docs": len(self.val_idx),
                "summaries": sum(len(t) for t in self.texts), "embedding dim": int(self.embeddings.shape[1]),
                "source": self.source}


def decoder_data(run_dir, corpus, aspects: Sequence[str], source: str = "unified",
                 batch_size: int = 32, max_val_docs: int | None = None) -> dict[str, DecoderData]:
    """(embedding, summaries) items per aspect for the train and validation documents of the run.

    Summaries are the run's views (LLM summaries plus, for ACLSum, the human summaries
    and highlights of the train and validation splits; test-split human text never
    reaches training). source: "unified" (the unified model's abstract embeddings,
    stage 03) or "targets" (the teachers' mean summary embeddings, as in the paper).
    max_val_docs: keep only the first that many validation documents (validation of an
    LM-sized decoder is the slow part on a CPU).
    """
    run_dir = Path(run_dir)
    train_ids, val_ids = read_split(run_dir)
    val_ids = val_ids[:max_val_docs] if max_val_docs else val_ids
    views = collect_views(list(aspects), run_dir, corpus)
    if source == "unified":
        model_dir = RunDir(run_dir).unified_model
        if not model_dir.is_dir():
            raise FileNotFoundError(f"{model_dir} is missing: run stage 03 (distill) first")
        emb = embed_corpus(model_dir, corpus, run_dir, batch_size=batch_size, progress=False)
        row = {d: i for i, d in enumerate(corpus.docs["doc_id"].astype(str))}
        vectors = {a: {d: emb[a][i] for d, i in row.items()} for a in aspects}
        everyone = {a: unit_rows(emb[a]) for a in aspects}
    elif source == "targets":
        vectors = load_targets(run_dir, list(aspects))
        everyone = {}
    else:
        raise ValueError(f"source must be 'unified' or 'targets', not {source!r}")
    out = {}
    for aspect in aspects:
        items = [d for d in train_ids + val_ids if views[aspect].views.get(d) and d in vectors[aspect]]
        val = set(val_ids)
        out[aspect] = DecoderData(
            aspect=aspect, doc_ids=items,
            embeddings=(unit_rows(np.stack([vectors[aspect][d] for d in items])) if items
                        else np.zeros((0, 1), np.float32)),
            texts=[list(views[aspect].views[d]) for d in items],
            train_idx=[i for i, d in enumerate(items) if d not in val],
            val_idx=[i for i, d in enumerate(items) if d in val], source=source,
            corpus_embeddings=everyone.get(aspect))
    return out


def _finished(folder: Path, fingerprint: str, config: DecoderConfig) -> bool:
    done = folder / DONE_NAME
    if not done.is_file() or not (folder / CONFIG_NAME).is_file():
        return False
    saved = json.loads(done.read_text())
    return saved.get("fingerprint") == fingerprint and _comparable(saved.get("config") or {}) == _comparable(config.to_dict())


def _comparable(config: dict) -> dict:
    # Where a decoder was trained (CPU or GPU) does not change what it is: a decoder trained
    # on a GPU is reused on a CPU.
    return {k: v for k, v in config.items() if k != "device"}


def _result_from_folder(folder: Path) -> DecoderTrainResult:
    done = json.loads((folder / DONE_NAME).read_text())
    history = json.loads((folder / HISTORY_NAME).read_text())
    return DecoderTrainResult(out_dir=str(folder), best_step=done["best_step"], best_val_loss=done["best_val_loss"],
                              stopped_early=done["stopped_early"], seconds=done["seconds"], history=history)


def train_decoders(run_dir, data: Mapping[str, DecoderData], aspects: Sequence[str],
                   config: DecoderConfig | None = None, shared: bool = False, lm=None, progress: bool = True,
                   force: bool = False) -> dict[str, DecoderTrainResult]:
    """Train one decoder per aspect (the paper) or one shared decoder with an aspect token.

    data: the training material per aspect, from `decoder_data(run_dir, corpus, aspects, source)`;
    its `source` is recorded with each checkpoint. `lm`: an LM already loaded (else
    `config.lm` is loaded when a decoder needs training).
    Writes <run_dir>/decoders/<aspect>/ (or decoders/shared/) with the best checkpoint,
    history.json and done.json. A decoder whose data and config are unchanged is not
    trained again (force=True retrains). A run killed half-way restarts that decoder from
    scratch (its folder has no done.json), the finished ones are kept.
    Returns {aspect: result} (with `shared`, every aspect maps to the same result).
    """
    config = config or DecoderConfig()
    run_dir = Path(run_dir)
    data = dict(data)
    missing = [a for a in aspects if not data[a].train_idx or not data[a].val_idx]
    if missing:
        raise ValueError(f"aspects {missing} have no train or no validation document with a summary; "
                         "generate summaries (stage 01) for more documents or drop those aspects")
    jobs: list[tuple[str, Path, str, dict]] = []
    if shared:
        fingerprint = hashlib.sha256("".join(data[a].fingerprint() for a in aspects).encode()).hexdigest()[:16]
        jobs.append((SHARED, RunDir(run_dir).decoders / SHARED, fingerprint, {}))
    else:
        jobs += [(a, RunDir(run_dir).decoders / a, data[a].fingerprint(), {}) for a in aspects]
    results: dict[str, DecoderTrainResult] = {}
    for name, folder, fingerprint, _ in jobs:
        if not force and _finished(folder, fingerprint, config):
            results[name] = _result_from_folder(folder)
            continue
        if lm is None:
            lm = load_causal_lm(config.lm, device=config.device)
        (folder / DONE_NAME).unlink(missing_ok=True)
        extra = {"fingerprint": fingerprint, "source": data[aspects[0] if name == SHARED else name].source}
        if name == SHARED:
            # Items of all aspects in one list; the aspect token tells the decoder which.
            emb, texts, item_aspects, tr, va = [], [], [], [], []
            for a in aspects:
                d, offset = data[a], len(texts)
                emb.append(d.embeddings)
                texts += d.texts
                item_aspects += [a] * len(d.texts)
                tr += [offset + i for i in d.train_idx]
                va += [offset + i for i in d.val_idx]
            result = train_decoder(DecoderItems(np.concatenate(emb), texts, tr, va, item_aspects), folder, config,
                                   lm=lm, progress=progress, extra=extra)
        else:
            d = data[name]
            result = train_decoder(DecoderItems(d.embeddings, d.texts, d.train_idx, d.val_idx), folder, config,
                                   aspect=name, lm=lm, progress=progress, extra=extra)
        done = {"fingerprint": fingerprint, "config": config.to_dict(), "best_step": result.best_step,
                "best_val_loss": result.best_val_loss, "stopped_early": result.stopped_early,
                "seconds": result.seconds}
        write_json(folder / DONE_NAME, done)
        results[name] = result
    if shared:
        return {a: results[SHARED] for a in aspects}
    return results


@dataclass(frozen=True)
class RetrievalSettings:
    """What the retrieval decoder is built with (recorded in decoders/retrieval/; a change rebuilds it).

    lm: the frozen LM that scores and rewrites statements; k: statements considered per
    embedding; context: statements the LM reads (perplexity, rewrite).
    """

    lm: str = "smollm2-135m-instruct"
    k: int = 8
    context: int = 3


def build_retrieval_decoders(run_dir, corpus, aspects: Sequence[str],
                             settings: RetrievalSettings = RetrievalSettings(), force: bool = False,
                             progress: bool = False, aspect_set=None) -> dict:
    """The training-free decoder: the statements worth showing per aspect, embedded once (decoders/retrieval/).

    Only the run's train and validation papers enter the memory: their human statements, the LLM
    answers the grounding check kept, none with a prompt artefact (with `aspect_set`, the run's
    aspect file, also none that carries its example sentences), and, for a paper with none of
    those, its own sentence for the aspect (`retrieval.build_memories`). An aspect stage 02 trained
    no model of has only its papers' own sentences, embedded by the unified model's aspect-file
    head, as a notice says; without any such sentence it gets no memory, said too, and where no
    aspect has one no decoder is written (stages 05 and 06 then show no decoded text). Skipped
    when the statements, their embeddings and the settings are unchanged. Returns a summary per
    aspect (statements, papers, sources, and what was left out) for the notebook's table.
    """
    folder = RunDir(run_dir).decoders / FOLDER
    memories = build_memories(run_dir, corpus, aspects, progress=progress, aspect_set=aspect_set)
    floor = [a for a, m in memories.items() if m.encoder == ENCODER_UNIFIED]
    empty = [a for a, m in memories.items() if not m.texts and a not in floor]
    if empty:
        raise ValueError(f"aspects {empty} have no known statement in the train or validation papers; "
                         "generate summaries (stage 01) for more documents or drop those aspects")
    said = [a for a in floor if memories[a].texts]
    if said:
        notice(f"the retrieval memory of {', '.join(said)} holds each paper's own sentence for "
               f"{'them' if len(said) > 1 else 'it'}, read by the unified model's aspect-file head: stage 02 "
               "trained no aspect model, having no usable LLM answer, and this needs none")
    silent = [a for a in floor if not memories[a].texts]
    if silent:
        notice(f"no retrieval memory of {', '.join(silent)}: stage 02 trained no aspect model and no paper of the "
               "run has a sentence to stand for it, so a map shows no decoded text of "
               f"{'them' if len(silent) > 1 else 'it'}")
        memories = {a: m for a, m in memories.items() if a not in silent}
    if not memories:
        for name in (DONE_NAME, MEMORY_NAME):  # a memory of an earlier run would speak for this one
            (folder / name).unlink(missing_ok=True)
        notice("no retrieval decoder written: no aspect has a statement to decode into")
        return {}
    recorded = {"lm": str(settings.lm), "k": int(settings.k), "context": int(settings.context), "checks": CHECKS}
    done = folder / DONE_NAME
    stale = force or not done.is_file() or json.loads(done.read_text()).get("fingerprint") != fingerprint(memories,
                                                                                                          recorded)
    if stale:
        done.unlink(missing_ok=True)  # a folder without done.json is incomplete, should this be killed
        written = save_memories(folder, memories, recorded)
        write_json(done, {"fingerprint": written, "settings": recorded}, indent=None)
    return {a: {"statements": len(m.texts), "papers": len(set(m.doc_ids)),
                **{s: m.sources.count(s) for s in sorted(set(m.sources))},
                "left out": sum(m.left_out.values())} for a, m in memories.items()}


def set_default_decoder(run_dir, kind: str) -> None:
    """Record which kind of decoder the later stages (05 maps, 06 evaluation) load by default."""
    if kind not in {"retrieval", "per_aspect", "shared", *DECODER_KINDS}:
        raise ValueError(f"kind must be retrieval, per_aspect, shared or a registered kind {sorted(DECODER_KINDS)}, "
                         f"not {kind!r}")
    root = RunDir(run_dir).decoders
    root.mkdir(parents=True, exist_ok=True)
    write_json(root / DEFAULT_NAME, {"kind": kind}, indent=None)


# --------------------------------------------------------------------------- using decoders


@runtime_checkable
class Decoder(Protocol):
    """What every decoder of one aspect offers the stages after 04 (maps, evaluation): the one interface.

    `statements` gives, per embedding, {"text", "doc_id", "cosine"} and, optionally, "kind": doc_id
    is the one paper the text is taken from where the decoder takes known statements
    (`names_sources`; kind "nearest known statement"), else None (written by the LM; kind
    "generated", assumed where a decoder gives no kind and no paper); cosine is the text's
    similarity to the embedding where the decoder knows it, else NaN (-inf: every candidate was
    excluded). `describe` is the same as text
    lists, `perplexities` scores reference texts given embeddings (Table 3).
    """

    aspect: str
    reports_unconditioned: bool
    names_sources: bool

    def statements(self, embeddings, exclude=None, rewrite: bool = False, max_new_tokens: int = 48,
                   **sampling) -> list[dict]: ...

    def describe(self, embeddings, exclude=None, **sampling) -> list[list[str]]: ...

    def perplexities(self, requests, batch_size: int = 8) -> dict[str, float]: ...


@dataclass
class AspectDecoder:
    """A decoder bound to one aspect (a per-aspect decoder, or a shared one with its aspect token)."""

    aspect: str
    decoder: EmbeddingDecoder = field(repr=False)
    source_files: tuple = ()  # the folder it was loaded from (`report_cache.py` keys its reports by the files)

    @property
    def shared(self) -> bool:
        """True when the underlying decoder serves several aspects."""
        return self.decoder.aspects is not None

    def _aspect(self):
        return self.aspect if self.shared else None

    @property
    def reports_unconditioned(self) -> bool:
        """Whether Table 3's unconditioned control applies (a base LM; a chat LM without soft tokens is off its path)."""
        return not self.decoder.chat

    names_sources = False  # the LM writes the text; no paper speaks for it

    def describe(self, embeddings, exclude=None, **sampling) -> list[list[str]]:
        """Decode embeddings [N, D] (or one [D]) into text: candidates per embedding (see EmbeddingDecoder.generate).

        sampling: the fields of `DecodeSampling` (max_new_tokens, greedy, ...), as every decoder of the
        `Decoder` interface takes them, plus generate's batch_size and progress.
        exclude is accepted for the retrieval decoder's interface; this decoder has no memory to exclude from.
        """
        batching = {k: sampling.pop(k) for k in ("batch_size", "progress") if k in sampling}
        return self.decoder.generate(unit_rows(np.atleast_2d(embeddings)), DecodeSampling(**sampling),
                                     aspect=self._aspect(), **batching)

    def statements(self, embeddings, exclude=None, rewrite: bool = False, max_new_tokens: int = 48,
                   **sampling) -> list[dict]:
        """The first candidate per embedding as {"text", "doc_id": None, "kind": "generated", "cosine": NaN}
        (the `Decoder` interface)."""
        found = self.describe(embeddings, exclude, max_new_tokens=max_new_tokens, **sampling)
        return [{"text": c[0] if c else "", "doc_id": None, "kind": KIND_GENERATED, "cosine": float("nan")}
                for c in found]

    def perplexity(self, embeddings, texts: Sequence[str], batch_size: int = 8, exclude=None) -> float:
        """Perplexity of texts[i] given embeddings[i]; embeddings=None is the unconditioned control."""
        emb = None if embeddings is None else unit_rows(np.atleast_2d(embeddings))
        return self.decoder.perplexity(emb, texts, batch_size, aspect=self._aspect())

    def perplexities(self, requests, batch_size: int = 8) -> dict[str, float]:
        """{name: (embeddings or None, texts, exclude)} -> {name: perplexity}, one `perplexity` call each."""
        return {name: self.perplexity(emb, texts, batch_size) for name, (emb, texts, _) in requests.items()}


# Decoder kinds added from outside: kind -> loader(run_dir, aspects, device=None, lm=None) -> {aspect: Decoder}.
DECODER_KINDS: dict = {}


def register_decoder(kind: str, loader) -> None:
    """Add a kind of decoder: `load_decoders(run_dir, kind=kind)` (and, after `set_default_decoder(run_dir, kind)`,
    every map and stage 06) gets `loader(run_dir, aspects, device=device, lm=lm)`: {aspect: an object that answers
    the `Decoder` protocol (`aspect`, `names_sources`, `reports_unconditioned`, `statements`, `describe`,
    `perplexities`)}."""
    if kind in {"auto", "retrieval", "per_aspect", "shared"}:
        raise ValueError(f"{kind!r} is a built-in decoder kind")
    DECODER_KINDS[kind] = loader


def load_decoders(run_dir, aspects: Sequence[str] | None = None, device: str | None = None,
                  lm=None, kind: str = "auto", skip_missing: bool = False) -> dict[str, AspectDecoder]:
    """Load the run's decoders (per aspect, or the shared one), loading the LM once.

    kind: "retrieval" (the nearest known statements, `retrieval.py`), "per_aspect",
    "shared" (soft-prompt decoders), or "auto": the kind stage 04 chose (decoders/default.json),
    else per-aspect soft-prompt decoders where they exist and the shared one for the other
    aspects. Raises FileNotFoundError naming what is missing; with skip_missing, a soft-prompt decoder missing
    for some of `aspects` (one stage 02 trained no model of: stage 04 trains it no decoder) leaves that aspect
    out, as a notice says, and the others are decoded.
    """
    if kind not in {"auto", "per_aspect", "shared", "retrieval", *DECODER_KINDS}:
        raise ValueError(f"kind must be auto, retrieval, per_aspect, shared or a registered kind "
                         f"{sorted(DECODER_KINDS)}, not {kind!r}")

    root = RunDir(run_dir).decoders
    if kind == "auto" and (root / DEFAULT_NAME).is_file():
        kind = json.loads((root / DEFAULT_NAME).read_text()).get("kind", "auto")
    if kind in DECODER_KINDS:
        return DECODER_KINDS[kind](run_dir, aspects, device=device, lm=lm)
    if kind not in {"auto", "per_aspect", "shared", "retrieval"}:  # a kind registered when the run was made
        raise FileNotFoundError(f"{root / DEFAULT_NAME} names the decoder kind {kind!r}, which is not registered "
                                "in this session: register_decoder it first")
    if kind == "retrieval":
        return load_retrieval_decoders(root / FOLDER, aspects, lm=lm, device=device)
    found = {p.name for p in root.iterdir() if (p / DONE_NAME).is_file()} if root.is_dir() else set()
    found.discard(FOLDER)
    if kind == "shared":
        found &= {SHARED}
    elif kind == "per_aspect":
        found -= {SHARED}
    if not found:
        raise FileNotFoundError(f"no trained decoder under {root}: run stage 04 (decode) first")
    shared = None
    out: dict[str, AspectDecoder] = {}
    names = list(aspects) if aspects is not None else sorted(found - {SHARED})
    shared_knows = list(json.loads((root / SHARED / CONFIG_NAME).read_text())["aspects"]) if SHARED in found else []
    names = names or shared_knows
    missing = [a for a in names if a not in found and a not in shared_knows]
    if missing and skip_missing and len(missing) < len(names):
        notice(f"{', '.join(missing)}: no decoder under {root}, so no text of {'them' if len(missing) > 1 else 'it'}; "
               f"the other aspects are decoded")
        names = [a for a in names if a not in missing]
    for aspect in names:
        if aspect in found:
            folder = root / aspect
        elif SHARED in found:
            folder = root / SHARED
        else:
            raise FileNotFoundError(f"no decoder for aspect {aspect!r} under {root} (found: {sorted(found)})")
        if lm is None:
            lm_id = json.loads((folder / CONFIG_NAME).read_text())["lm"]
            lm = load_causal_lm(lm_id, device=device)
        if folder.name == SHARED:
            shared = shared or EmbeddingDecoder.from_pretrained(folder, lm=lm)
            if aspect not in shared.aspects:
                raise FileNotFoundError(f"the shared decoder in {folder} knows {shared.aspects}, not {aspect!r}")
            out[aspect] = AspectDecoder(aspect, shared, source_files=(folder,))
        else:
            out[aspect] = AspectDecoder(aspect, EmbeddingDecoder.from_pretrained(folder, lm=lm), source_files=(folder,))
    return out


def history_frame(run_dir, aspects: Sequence[str] | None = None) -> pd.DataFrame:
    """Validation history of every trained decoder (decoder, step, train_loss, val_loss, ...)."""
    root = RunDir(run_dir).decoders
    rows = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if (folder / HISTORY_NAME).is_file() and (aspects is None or folder.name in aspects or folder.name == SHARED):
            rows += [{"decoder": folder.name, **h} for h in json.loads((folder / HISTORY_NAME).read_text())]
    return pd.DataFrame(rows)


def plot_loss_curves(history: pd.DataFrame, ax=None, title: str = "decoder validation loss"):
    """Validation (and mean training) loss per decoder against the step."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    for i, (name, part) in enumerate(history.groupby("decoder", sort=False)):
        color = f"C{i}"
        ax.plot(part["step"], part["val_loss"], marker="o", color=color, label=f"{name} validation")
        train = part.dropna(subset=["train_loss"])
        if len(train):
            ax.plot(train["step"], train["train_loss"], linestyle="--", color=color, alpha=0.6,
                    label=f"{name} training (mean since last check)")
    ax.set_xlabel("step")
    ax.set_ylabel("NLL per summary token")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return ax


def calibrate_confidence(run_dir, corpus, aspects: Sequence[str], doc_ids: Sequence[str] | None = None,
                         max_new_tokens: int = 48, merge: bool = False) -> dict:
    """Decode the given papers (default: the run's validation papers) from their unified embeddings, their own
    statements hidden, rank each among the whole corpus for its text and save the levels' figures. Stage 04 saves
    them from its own faithfulness pass instead (`save_confidence`), which decodes the same way (and adds the
    BERTScore against the papers' own statements); this is for a run without that pass, and for the aspects it
    could not score (no known statement: stage 04 then calls it with `merge`, which keeps the other aspects')."""
    run_dir = Path(run_dir)
    kept = load_confidence(run_dir, quiet=True) if merge else {}
    doc_ids = [str(d) for d in (doc_ids if doc_ids is not None else read_split(run_dir)[1])]
    position = {str(d): i for i, d in enumerate(corpus.ids)}
    rows = [position[d] for d in doc_ids]
    emb = embed_corpus(RunDir(run_dir).unified_model, corpus, run_dir, progress=False)
    decoders = load_decoders(run_dir, aspects)
    ranked = {}
    for a in aspects:
        everyone = unit_rows(emb[a])
        vectors = everyone[rows]
        texts = [c[0] if c else "" for c in decoders[a].describe(vectors, exclude=[[d] for d in doc_ids],
                                                                  greedy=True, max_new_tokens=max_new_tokens)]
        rt = round_trip(texts, vectors, decoding_encoder_dir(run_dir, a), a, everyone)
        ranked[a] = pd.DataFrame({"round-trip rank": rt["rank"], "corpus size": rt["corpus size"]})
    return save_confidence(run_dir, ranked, keep=kept)


def scored_aspects(run_dir, aspects: Sequence[str], kinds: Sequence[str] = ("retrieval",)) -> list[str]:
    """The aspects whose decoders stage 04 trains (soft prompt) and scores (faithfulness): `aspects` less those
    stage 02 trained no model of, which a notice names, with what they get instead.

    Such an aspect has no known statement (no usable LLM answer, no human one) to train the
    soft-prompt decoder on or to score a decoding against; the retrieval decoder reads it from
    its papers' own sentences (`build_retrieval_decoders`), which need no statement."""
    untrained = [a for a in aspects if a in RunDir(run_dir).untrained_reasons()]
    if untrained:
        them = "them" if len(untrained) > 1 else "it"
        instead = (f"the retrieval decoder reads {them} from each paper's own sentence" if "retrieval" in kinds else
                   f"with decoder = 'soft_prompt' a map decodes no text of {them}; decoder = 'retrieval' reads "
                   f"{them} from each paper's own sentence")
        lacking = "no faithfulness scores" + (" and no soft-prompt decoder" if "soft_prompt" in kinds else "")
        notice(f"{', '.join(untrained)}: {lacking}, since stage 02 had no usable LLM answer or human statement of "
               f"{them} to train on or score against; {instead}")
    return [a for a in aspects if a not in untrained]


@dataclass
class DecodingEvaluation:
    """What `evaluate_decoders` measured: the Table 3 rows, the decoded examples and the confidence levels."""
    table: pd.DataFrame                              # faithfulness_table: one row per (aspect, kind)
    examples: dict = field(default_factory=dict)     # {(aspect, kind): per-paper DataFrame of decode_report}
    levels: dict = field(default_factory=dict)       # {aspect: confidence levels}, {} when too few papers
    skipped: list = field(default_factory=list)      # aspects with fewer than two validation papers


@dataclass(frozen=True)
class DecoderEvalConfig:
    """What stage 04's faithfulness pass (`evaluate_decoders`) scores, and how.

    eval_docs: validation papers per aspect that are decoded (BERTScore, round trip);
    perplexity_docs: of those, papers whose perplexity is scored (an LM pass each);
    bertscore_model: the fixed reference encoder; max_new_tokens: the longest decoded text;
    seed: the shuffled control.
    """

    eval_docs: int = 50
    perplexity_docs: int = 10
    bertscore_model: str = "mpnet"
    max_new_tokens: int = 48
    seed: int = 0

    def faithfulness(self) -> FaithfulnessConfig:
        """The settings `decoding_report` takes."""
        return FaithfulnessConfig(sampling={"max_new_tokens": self.max_new_tokens},
                                  bertscore_model=self.bertscore_model, seed=self.seed,
                                  perplexity_docs=self.perplexity_docs)


def evaluate_decoders(run_dir, data: Mapping[str, DecoderData], aspects: Sequence[str], kinds: Sequence[str],
                      default_kind: str, config: DecoderEvalConfig = DecoderEvalConfig(),
                      device: str | None = None, shared: bool = False) -> DecodingEvaluation:
    """Stage 04's faithfulness pass over each kind of decoder, and what it leaves in the run directory.

    Each decoder describes up to `config.eval_docs` validation papers of each aspect from their
    embeddings, their own statements hidden (`decoding_report`: BERTScore against a shuffled
    control, the round trip, perplexities). Writes `decoders/metrics.json` and calibrates the
    confidence shown beside decoded texts from the round trips of the default kind
    (`save_confidence`). An aspect with fewer than two validation papers is skipped with a notice
    (the shuffled control needs two).
    """
    run = RunDir(run_dir)
    if not aspects:  # no aspect has statements to score against (`scored_aspects`): nothing to load or measure
        write_json(run.decoder_metrics, {}, indent=2)
        return DecodingEvaluation(faithfulness_table({}), {}, save_confidence(run, {}), [])
    # The round trip ranks a paper among every paper of the corpus, as a tap on the map does.
    corpus_vectors = {a: data[a].embeddings if data[a].corpus_embeddings is None else data[a].corpus_embeddings
                      for a in aspects}
    metrics, examples, skipped = {}, {}, []
    for kind in kinds:
        found = load_decoders(run, aspects, device=device,
                              kind=kind if kind == "retrieval" else (SHARED if shared else "per_aspect"))
        for a in aspects:
            d = data[a]
            picked = d.val_idx[:config.eval_docs]
            if len(picked) < 2:
                if a not in skipped:
                    notice(f"{a}: {len(picked)} validation paper(s) with summaries; faithfulness needs two or more, "
                           "skipped")
                    skipped.append(a)
                continue
            metrics[(a, kind)], examples[(a, kind)] = decoding_report(
                found[a], d.embeddings[picked], [d.texts[i] for i in picked],
                RoundTrip(decoding_encoder_dir(run, a), corpus_vectors[a]), names=[d.doc_ids[i] for i in picked],
                exclude=[d.doc_ids[i] for i in picked], config=config.faithfulness())
    write_json(run.decoder_metrics, {f"{a}/{k}": m for (a, k), m in metrics.items()}, indent=2)
    levels = save_confidence(run, {a: ex for (a, k), ex in examples.items() if k == default_kind})
    return DecodingEvaluation(faithfulness_table(metrics), examples, levels, skipped)
