"""How clearly a sentence of an abstract states one aspect: its *aspect margin*, read by the unified model's heads.

Each aspect head of the unified model (stage 03) weighs the sentences of an abstract (`PooledAspectModel.attention`,
each head's weights summing to 1 over the abstract). A sentence's margin for an aspect is the log of that aspect's
weight on it less the largest log weight another aspect's head gives it: positive where the sentence is more this
aspect's than any other's. No label is read: only the model's own weights.

Two readers use it: the pane's confidence (`stating.stated_level`: a near sentence that reads as another aspect is
"topic only"), and the retrieval memory (`retrieval.build_memories`): a paper with no statement of an aspect whose
head a person's marks taught (`reads_marks`) gives the memory the sentence that states that aspect most clearly
(its highest margin), and none at all where even that sentence's margin is below `MEMORY_MARGIN`. The sentence a
head weighs most need not state its aspect: an approach head weighs the background sentence most where every head
weighs it a lot. A floor's head (no marks) keeps the sentence it weighs most: its margin tells no better.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .artefacts import marker_reason

LOG_FLOOR = 1e-12
# The least margin a paper's own sentence needs to enter the memory of an aspect whose head reads marks: the pane's
# `stating.STATES_MARGIN`, so that no sentence it would call "topic only" is held. Checked on CSAbstruct dev
# (`benchmarks/aspect_confidence.py --split dev --memory ...`): 1.5 and 2.5 leave approach 13 and 2 of 102 papers'
# sentences, and LLM answers take their place (213 and 409 of the 885 texts shown, against 142).
MEMORY_MARGIN = 1.0
LEFT_OUT = "own sentence reads as another aspect"  # memory.json's "left out" reason for a paper without one


def aspect_margins(weights: Mapping[str, float]) -> dict[str, float]:
    """{aspect: log weight of the aspect less the largest log weight of another} for one sentence's weights
    ({aspect: the aspect head's pooling weight on it}); 0 for every aspect where there is only one."""
    names = list(weights)
    row = margin_table(np.array([[float(weights[a]) for a in names]], np.float64).reshape(1, len(names)))[0]
    return {a: float(m) for a, m in zip(names, row)}


def margin_table(weights: np.ndarray) -> np.ndarray:
    """Aspect margins [S, A] of S sentences from their heads' weights [S, A] (`aspect_margins`, all rows at once):
    each column's log weight less the row's largest log weight in another column; zeros for a single aspect."""
    logs = np.log(np.maximum(np.asarray(weights, np.float64), LOG_FLOOR))
    if logs.ndim != 2 or logs.shape[1] < 2:
        return np.zeros_like(logs)
    order = np.argsort(-logs, axis=1, kind="stable")
    rows = np.arange(len(logs))
    first, second = logs[rows, order[:, 0]], logs[rows, order[:, 1]]
    others = np.where(np.arange(logs.shape[1])[None, :] == order[:, :1], second[:, None], first[:, None])
    return logs - others


def reads_marks(model, aspect: str) -> bool:
    """Whether the aspect's head weighs sentences by a person's marks (its scorer is a taught one, `teach`).

    Only there does the margin tell what a sentence states: on CSAbstruct dev, a head taught from 120 marks put a
    method sentence in 77% of the approach texts shown at `MEMORY_MARGIN` against 62% by its weight; the aspect
    file's floor (a position mixture) read approach no better by its margin (area under the ROC curve 0.60, shown
    texts 32% against 31%), so a floor's head keeps the sentence it weighs most."""
    heads = getattr(model, "heads", None)
    head = heads[aspect] if heads is not None and aspect in heads else None
    return getattr(getattr(head, "scorer", None), "kind", None) == "taught"


def stating_sentences(model, texts: Sequence[str], aspects: Sequence[str], least: float = MEMORY_MARGIN,
                      every_head: bool = False) -> list[dict[str, tuple[str, float]]]:
    """Per text, {aspect: (its sentence with the highest margin for the aspect, that margin)} where that margin is
    `least` or more; the margin is read against every head of the model (as the pane reads it). An aspect whose
    head reads no marks (`reads_marks`; every_head=True reads them all by margin) or a model of one head: its
    sentence weighed most, at an infinite margin. A sentence with a format marker ("Summary:", a heading) is
    passed over. [] for a model without sentence weights."""
    if not getattr(model, "pool", False) or not hasattr(model, "attention") or not len(texts):
        return []
    heads = list(model.aspects)
    wanted = [a for a in aspects if a in heads]
    if not wanted:
        return [{} for _ in texts]
    by_margin = {a: len(heads) > 1 and (every_head or reads_marks(model, a)) for a in wanted}
    out = []
    for frame in model.attention(list(texts), heads):
        sentences = [str(s) for s in frame["sentence"]]
        clean = np.array([bool(s.strip()) and marker_reason(s) is None for s in sentences], bool)
        weights = frame[heads].to_numpy()
        margins = margin_table(weights)
        found = {}
        for a in wanted:
            k = heads.index(a)
            column = np.where(clean, margins[:, k] if by_margin[a] else weights[:, k], -np.inf)
            best = int(np.argmax(column)) if len(column) else -1
            if best >= 0 and np.isfinite(column[best]):
                margin = float(column[best]) if by_margin[a] else np.inf
                if margin >= least:
                    found[a] = (sentences[best], margin)
        out.append(found)
    return out
