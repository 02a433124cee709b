"""The pane's readout of a tap: every text it shows says what it is, where it comes from and how far to trust it.

Three kinds of text (`decode.retrieval`):

* **own sentence** (and the paper's other own statements): what the tapped paper itself states of
  an aspect: its human summary, an LLM answer the grounding check kept, a highlighted sentence,
  or, where it has none of those, the sentence of its abstract that the unified model weighs
  most for the aspect;
* **nearest known statement, from <paper>**: the retrieval decoder's answer, one statement of one
  named paper (never the tapped paper's own), nearest the point's embedding;
* **generated**: written by an LM from the embedding (the soft-prompt decoder), no paper behind it.

Each decoded text carries its confidence: the rank of the point among all the map's papers for
the text, as a level (`decode.faithfulness.rank_level`), and one line under the list says what the
levels mean. Everything is escaped here. `hover_meta` gives the map's hover text per paper (title, year,
one summary per aspect).
"""

from __future__ import annotations

import html
from typing import Mapping, Sequence

import pandas as pd

from ..decode.faithfulness import held_out_line, levels_line
from ..decode.retrieval import KIND_GENERATED, KIND_NEAREST, KIND_OWN
from ..decode.stating import LINE as STATED_LINE

# How the paper's own statements are named, by the memory's source, in the order one is preferred.
OWN_KINDS = {"human": "human summary", "llm": "LLM answer, kept by the grounding check",
             "highlight": "highlighted sentence", "sentence": KIND_OWN}
SOURCE_NAMES = {"human": "a human summary", "llm": "an LLM answer kept by the grounding check",
                "highlight": "a highlighted sentence", "sentence": "a sentence of its abstract"}
TITLE_CHARS = 120


def pick_own(statements: list[tuple[str, str]], sentence: str | None = None) -> tuple[str, str] | None:
    """(kind, text) of what a paper states of an aspect: its preferred own statement (text, source) of the
    retrieval memory (`OWN_KINDS`' order), else its abstract's sentence for the aspect, else None."""
    for source, kind in OWN_KINDS.items():
        for text, got in statements:
            if got == source:
                return kind, text
    return (KIND_OWN, sentence) if sentence else None


def own_statements_html(own: Mapping[str, tuple[str, str] | None]) -> str:
    """The tapped paper's own statements, one per aspect, each with its kind."""
    items = []
    for aspect, found in own.items():
        if found is None:
            items.append(f"<li><b>{html.escape(aspect)}</b>: <i>no statement of its own (the run has no summary of "
                         "it, and the unified model has no sentence weights)</i></li>")
            continue
        kind, text = found
        items.append(f"<li><b>{html.escape(aspect)}</b>: {html.escape(text)} <small>({html.escape(kind)})</small></li>")
    return "<p><b>What it states</b> (its own text, per aspect)</p><ul>" + "".join(items) + "</ul>"


def kind_words(row: Mapping, titles: Mapping[str, str]) -> str:
    """"nearest known statement, from <title> (a human summary)" or "generated (written by the LM ...)"."""
    paper = row.get("from paper")
    if row.get("kind") == KIND_NEAREST and isinstance(paper, str) and paper:
        title = (titles.get(paper) or paper)[:TITLE_CHARS]
        source = SOURCE_NAMES.get(str(row.get("source")), "")
        return f"{KIND_NEAREST}, from “{title}”" + (f" ({source})" if source else "")
    return f"{KIND_GENERATED} (written by the LM from the embedding; no paper states it)"


def decoded_item(row: Mapping, titles: Mapping[str, str]) -> str:
    """One decoded text as a list item: aspect and text, then what it is (kind, paper, source) and its confidence."""
    confidence = row.get("confidence")
    note = kind_words(row, titles) + (f" · {confidence}" if isinstance(confidence, str) else "")
    return (f"<li><b>{html.escape(str(row['aspect']))}</b>: {html.escape(str(row['decoded']))}"
            f"<br><small>{html.escape(note)}</small></li>")


def decoded_heading(frame: pd.DataFrame, point: str) -> str:
    """What the list of decoded texts is: known statements of other papers, or generated text."""
    kinds = set(frame.get("kind", pd.Series(dtype=object)))
    own_hidden = " (its own hidden)" if point == "paper" else ""
    if kinds == {KIND_NEAREST}:
        return (f"<p><b>Nearest known statements to its embedding</b>: each a statement of one other paper"
                f"{own_hidden}</p>")
    if kinds <= {KIND_GENERATED}:
        return "<p><b>Generated from its embedding</b> by the run's LM decoder</p>"
    return f"<p><b>Texts from its embedding</b>: known statements of other papers{own_hidden}, or generated</p>"


def decoded_html(frame: pd.DataFrame, titles: Mapping[str, str], corpus_size: int,
                 levels: Mapping[str, Mapping] | None = None, point: str = "paper") -> str:
    """The decoded texts of one point (`describe_with_confidence`'s rows), with a heading that says what they are
    and one line that says what the confidence levels mean (and stage 04's figures behind them, where known)."""
    items = "".join(decoded_item(r, titles) for _, r in frame.iterrows())
    shown = {a: (levels or {}).get(a) for a in frame.get("aspect", [])}
    notes = []
    if "round-trip rank" in frame:
        notes.append(levels_line(corpus_size, point))
        if "aspect margin" in frame and frame["aspect margin"].notna().any():
            notes.append(STATED_LINE)
        figures = held_out_line(shown)
        if figures:
            notes.append(figures)
    foot = "".join(f"<p><small>{html.escape(n)}</small></p>" for n in notes)
    return decoded_heading(frame, point) + "<ul>" + items + "</ul>" + foot


def hover_meta(corpus, aspects: Sequence[str], shown: Mapping[str, Mapping[str, str]] | None = None) -> pd.DataFrame:
    """Per document: doc_id, title, year and one summary per aspect for the hover text.

    Takes the corpus's own `summary_<aspect>` column where it has one (ACLSum's human
    summaries), else the paper's LLM answer that the readout shows (`shown`: {aspect: {doc_id:
    text}}, `llm_statements` of the run's retrieval memory, which holds only what the grounding
    check kept), else nothing. The run's raw answers are never read here: most of what a small
    model writes is cut short, generic or copied, and the hover must not show what the readout hides.
    """
    docs = corpus.docs.reset_index(drop=True)
    meta = pd.DataFrame({"doc_id": docs["doc_id"].astype(str), "title": docs.get("title", "").fillna("")})
    if "year" in docs:
        meta["year"] = docs["year"]
    for extra in ("split", "labels"):
        if extra in docs:
            meta[extra] = docs[extra].map(lambda v: ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else v)
    for aspect in aspects:
        column = f"summary_{aspect}"
        values = docs[column] if column in docs else pd.Series([None] * len(docs))
        llm = (shown or {}).get(aspect, {})
        meta[column] = [v if isinstance(v, str) and v else llm.get(d) for v, d in zip(values, meta["doc_id"])]
    return meta


def llm_statements(decoders: Mapping | None) -> dict[str, dict[str, str]]:
    """{aspect: {doc_id: its first LLM answer in the retrieval memory}}: the LLM text a tap may show of a paper."""
    out: dict[str, dict[str, str]] = {}
    for aspect, decoder in (decoders or {}).items():
        memory = getattr(decoder, "memory", None)
        if memory is None:
            continue
        first: dict[str, str] = {}
        for text, doc, source in zip(memory.texts, memory.doc_ids, memory.sources):
            if source == "llm":
                first.setdefault(str(doc), text)
        out[aspect] = first
    return out
