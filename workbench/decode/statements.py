"""Stage 04: which statements of a paper may enter an aspect's retrieval memory (`retrieval.build_memories`).

Its human statements, and its LLM answers where the shown filter lets them through
(`embed/grounding.py`: grounded in its abstract and standing out of the others, no copy of
any abstract, no text cut short, looping or only announcing), none with a prompt artefact
(`artefacts.py`). The memory is all the readout, the legend and the hover show of a paper's
LLM answers. A paper left with none gets its own sentence for the aspect
(`retrieval.own_sentences`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..embed.features import FeatureCache, FrozenBackbone
from ..generate.unusable import text_reason
from .artefacts import artefact_reason


@dataclass
class Entries:
    """The statements of one aspect that enter its memory, before they are embedded, and what was left out."""

    texts: list[str] = field(default_factory=list)
    doc_ids: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)  # why -> how many

    def add(self, doc_id: str, text: str, source: str) -> None:
        """Let one paper's text enter the memory."""
        self.texts.append(text)
        self.doc_ids.append(doc_id)
        self.sources.append(source)

    def leave_out(self, why: str) -> None:
        """Count a statement left out, by why."""
        self.left_out[why] = self.left_out.get(why, 0) + 1


def grounding_verdicts(views, run_dir, corpus) -> dict[str, dict]:
    """{aspect: {(doc_id, view index): "kept" or why not}}: the shown filter's verdicts of the LLM views
    (`embed.grounding.judge_views`, `Verdict.shown`), read from the run's feature cache where stage 02 left it."""
    from ..embed.grounding import REFERENCE, judge_views

    has_llm = any(s == "llm" for v in views.values() for sources in v.sources.values() for s in sources)
    if corpus is None or not len(corpus) or not has_llm:
        return {a: {} for a in views}
    judged = judge_views(views, corpus, FeatureCache.for_run(run_dir, FrozenBackbone(REFERENCE)))
    return {a: {key: v.shown for key, v in verdicts.items()} for a, verdicts in judged.items()}


def shown_entries(views, verdicts: dict, abstracts: dict[str, str], allowed: set[str], prompt: str = "") -> Entries:
    """The views of the allowed papers worth showing: LLM answers only where the shown filter lets them through
    (`verdicts`; one no verdict covers, its text alone: `generate.unusable`), and no text with a prompt artefact
    (`artefacts.artefact_reason`; an LLM answer is also checked against the prompt)."""
    entries = Entries()
    for doc, items in views.views.items():
        if doc not in allowed:
            continue
        for k, (text, source) in enumerate(zip(items, views.sources[doc])):
            shown = (verdicts.get((doc, k)) or text_reason(text) or "kept") if source == "llm" else "kept"
            if shown != "kept":
                entries.leave_out(f"LLM answer not shown ({shown})")
                continue
            why = artefact_reason(text, prompt if source == "llm" else "", abstracts.get(doc, ""))
            if why:
                entries.leave_out(f"artefact: {why}")
                continue
            entries.add(doc, text, source)
    return entries
