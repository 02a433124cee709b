"""Stage 03's guard: no head is shipped following its aspect less than the encoder does, and the user is told.

After stage 03 has trained the unified model, each head is checked on its validation papers
by the swap probe (`health.hard_negative_probe`), which needs no ground truth: swap the
sentences that state aspect a for another paper's and see how far each embedding moves. A
head that follows its aspect moves for its own aspect's swaps and little for the others'.
Its *selectivity* is

    selectivity(h, a) = moved(h | swap of a) / mean over the other aspects b of moved(h | swap of b)

The whole-abstract vector of the encoder ("base") moves about alike for every swap, so its
selectivity is the level any head must beat. Three columns are compared per aspect: the
trained head, the aspect file's zero-shot floor (`aspectfile.py`, held in a head of the same
kind) and the base. A head less selective than the base, or less than half as selective as the
floor, is replaced by the floor (`kept: "aspect file"`); the decision and the numbers go to
`unified_model/guard.json` and the model's config, and stage 03 and 06 say it in words.

Where the sentences come from the aspect file itself, the floor is measured on its own
choice of sentences and has the advantage; the factor of 2 leaves a trained head its place
unless the floor follows the aspect far more. On ACLSum (human highlights) every head is
kept: 1.73, 5.26 and 2.75 against the floor's 1.00, 3.95 and 1.20.

The sentences that state each aspect come from the corpus's human highlights or stage 01's
LLM sentence labels where there are some (`health.corpus_sentence_aspects`), else from the
aspect file itself (`aspectfile.sentence_marks`).
"""

from __future__ import annotations

import copy
import json
from typing import Sequence

import numpy as np

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir
from ..evaluate.health import corpus_sentence_aspects, hard_negative_probe
from .aspectfile import TEMPERATURE, aspect_prototypes, sentence_marks
from .checkpoints import load_model
from .features import FeatureCache, FrozenBackbone
from .heads import PooledAspectModel

BASE = "base"
MARGIN = 0.0  # a head is kept when its selectivity is at least the base's plus this ...
FLOOR_FACTOR = 2.0  # ... and more than 1 / FLOOR_FACTOR of the aspect-file head's


def floor_state(head, query: np.ndarray, bias: float, temperature: float = TEMPERATURE) -> dict:
    """The state of a `SentencePoolingHead` that computes the aspect file's zero-shot vector.

    Scores s . query / temperature; with the bias well below them, sigmoid(x) is exp(x) to a
    few per cent, so the head's normalised sigmoid weights are the softmax of `aspectfile`.
    Gate 0: half whole abstract, half pooled sentences (aspectfile.BLEND). No projection.
    """
    import torch

    state = {k: v.detach().clone() for k, v in head.state_dict().items()}
    state["query"] = torch.as_tensor(query / temperature, dtype=state["query"].dtype)
    state["position"] = torch.zeros_like(state["position"])
    state["bias"] = torch.tensor(float(bias), dtype=state["bias"].dtype)
    state["gate"] = torch.zeros_like(state["gate"])
    if "up" in state:
        state["up"] = torch.zeros_like(state["up"])
    return state


def floor_bias(features, query: np.ndarray, temperature: float = TEMPERATURE) -> float:
    """A bias 4 below the median of the documents' best sentence score: the softmax regime of `floor_state`."""
    best = [float((np.asarray(s) @ query).max()) / temperature for s in features.sentences if len(s)]
    return -(float(np.median(best)) + 4.0) if best else 0.0


def selectivity(matrix: dict, column: str, aspect: str) -> float:
    """moved(column | swap of aspect) over the mean moved(column | swap of another aspect)."""
    others = [matrix[b][column] for b in matrix if b != aspect and column in matrix[b]]
    if aspect not in matrix or not others or not np.mean(others) > 0:
        return float("nan")
    return float(matrix[aspect][column] / np.mean(others))


def aspect_sentences(corpus, aspects: Sequence[str], run_dir, features, prototypes) -> tuple[list[dict], str]:
    """(per document {aspect: [mark per sentence]}, where they came from): the corpus's human highlights or
    stage 01's LLM sentence labels where at least four papers have them for every aspect, else the sentences
    the aspect file points at (`aspectfile.sentence_marks`)."""
    try:
        marks = corpus_sentence_aspects(corpus, aspects, run_dir)
    except ValueError:
        marks = []
    if sum(1 for m in marks if all(m.get(a) for a in aspects)) >= 4:
        return marks, "human highlights or LLM sentence labels"
    return sentence_marks(features, prototypes), "the aspect file (zero-shot sentence scores)"


def probe_sentences(run_dir, corpus, aspect_set, aspects: Sequence[str]) -> tuple[list[dict], str]:
    """`aspect_sentences` for stage 06's swap probe: the sentence vectors from the run's unified model (frozen
    heads) or, for a fine-tuned model, from MiniLM's cache in the run directory."""
    run = RunDir(run_dir)
    model = load_model(run.unified_model, run_dir=run)
    cache = model.cache if isinstance(model, PooledAspectModel) and model.cache is not None else \
        FeatureCache.for_run(run, FrozenBackbone("minilm"))
    features = cache.documents(corpus.texts())
    try:
        protos = aspect_prototypes(aspect_set, aspects, cache.vectors)
    except ValueError:  # an aspect the file says nothing about: only human or LLM labels can serve
        return corpus_sentence_aspects(corpus, aspects, run), "human highlights or LLM sentence labels"
    return aspect_sentences(corpus, aspects, run, features, protos)


def check_heads(run_dir, corpus, aspect_set, aspects: Sequence[str], doc_ids: Sequence[str] | None = None,
                n_pairs: int = 50, seed: int = 0, apply: bool = True) -> dict:
    """Check each head of the run's unified model against the aspect-file floor and the base; keep the best.

    corpus: the run's corpus; doc_ids: the papers checked (default: stage 02's validation
    papers). Returns {"aspects": {aspect: {"head", "aspect file", "base": selectivity, "kept",
    "verdict"}}, "marks": where the aspect sentences came from, "pairs": ...}; with apply, a
    head replaced by the floor is saved into the unified model. Writes unified_model/guard.json.
    A model that is not frozen-mode heads (the GPU fine-tuning path) is reported as not checked.
    """
    run = RunDir(run_dir)
    model = load_model(run.unified_model, run_dir=run)
    aspects = list(aspects)
    if not isinstance(model, PooledAspectModel) or not model.pool:
        report = {"checked": False, "reason": "the unified model is fine-tuned, not frozen-encoder heads"}
        write_json(run.guard, report)
        return report
    ids = [str(d) for d in (doc_ids if doc_ids is not None else run.split()[1])]
    held = corpus.subset(ids=ids)
    texts = held.texts()
    features = model.features(texts)
    try:
        protos = aspect_prototypes(aspect_set, aspects, model.cache.vectors)
    except ValueError as exc:  # an aspect the file says nothing about: nothing to build a floor from
        notice(f"heads not checked against the aspect file: {exc}")
        report = {"checked": False, "reason": str(exc)}
        write_json(run.guard, report)
        return report
    marks, source = aspect_sentences(held, aspects, run, features, protos)

    # The floor is a copy of the model's heads; the feature cache (every cached vector) is shared, not copied.
    cache, model.cache = model.cache, None
    floor = copy.deepcopy(model)
    model.cache = floor.cache = cache
    for j, a in enumerate(aspects):
        floor.heads[a].load_state_dict(floor_state(floor.heads[a], protos.queries[j],
                                                   floor_bias(features, protos.queries[j])))

    def encode(batch):
        out = dict(model.encode(batch, aspects=aspects))
        out.update({f"floor:{a}": v for a, v in floor.encode(batch, aspects=aspects).items()})
        out[BASE] = model.base_vectors(batch)
        return out

    try:
        probe = hard_negative_probe(texts, marks, encode, n_pairs=n_pairs, seed=seed)
    except ValueError as exc:
        notice(f"heads not checked: the swap probe found nothing to swap ({exc})")
        report = {"checked": False, "reason": f"the swap probe found nothing to swap ({exc})", "marks": source}
        write_json(run.guard, report)
        return report
    matrix, results, replaced = probe["matrix"], {}, []
    for a in aspects:
        if a not in matrix:
            results[a] = {"head": None, "aspect file": None, "base": None, "kept": "head",
                          "verdict": "not checked: no validation paper has a sentence of this aspect alone"}
            continue
        head, zero, base = (selectivity(matrix, a, a), selectivity(matrix, f"floor:{a}", a),
                            selectivity(matrix, BASE, a))
        if np.isfinite(head) and np.isfinite(base) and head < base + MARGIN and zero > head:
            kept, verdict = "aspect file", (f"the trained head follows {a} less than the encoder's whole abstract does "
                                            f"(selectivity {head:.2f} against {base:.2f}); replaced by the aspect "
                                            f"file's zero-shot head ({zero:.2f})")
            replaced.append(a)
        elif np.isfinite(head) and np.isfinite(zero) and zero >= FLOOR_FACTOR * head:
            kept, verdict = "aspect file", (f"the trained head follows {a} more than the encoder does ({head:.2f} "
                                            f"against {base:.2f}) but less than half as much as the aspect file's "
                                            f"zero-shot head ({zero:.2f}), which replaces it")
            replaced.append(a)
        elif np.isfinite(head) and np.isfinite(base) and head < base + MARGIN:
            kept, verdict = "head", (f"the trained head follows {a} no more than the encoder does ({head:.2f} against "
                                     f"{base:.2f}), and the aspect file does no better ({zero:.2f}): improve the "
                                     "aspect's description and examples, or the summaries")
        else:
            kept, verdict = "head", (f"the trained head follows {a} more than the encoder does ({head:.2f} against "
                                     f"{base:.2f}; the aspect file alone: {zero:.2f})")
        results[a] = {"head": head, "aspect file": zero, "base": base, "kept": kept, "verdict": verdict}
    report = {"checked": True, "marks": source, "papers": len(texts), "n_pairs": probe["n_pairs"],
              "aspects": results, "replaced": replaced}
    for a in replaced:
        notice(f"{a}: {results[a]['verdict']}")
    if apply and replaced:
        for a in replaced:
            model.heads[a].load_state_dict(floor.heads[a].state_dict())
        model.save_pretrained(run.unified_model, extra={"guard": {a: results[a]["kept"] for a in aspects}})
    write_json(run.guard, report)
    return report


def load_guard(run_dir) -> dict | None:
    """The guard's report of a run (unified_model/guard.json), or None when stage 03 did not write one."""
    path = RunDir(run_dir).guard
    return json.loads(path.read_text()) if path.is_file() else None
