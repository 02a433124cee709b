"""Sentences of an abstract: the units the pooling heads weigh (stage 02-03 CPU mode) and the LLM labels.

Splitting is done by `sentencex` (Wikimedia's rule-based segmenter, ~300 languages, no
model download), which keeps "e.g.", "et al.", "Fig. 2", "U.S." and decimals inside
their sentence. We do not write a regex of our own.

Every stage that speaks of "sentence i of document d" calls `split_sentences` on the
same abstract text, so sentence indices agree between the feature cache, the LLM's
sentence labels and the attention plots.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

LANGUAGE = "en"
_WORDS = re.compile(r"\w+")


def split_sentences(text: str, language: str = LANGUAGE) -> list[str]:
    """The sentences of `text`, stripped, in order; [] for an empty text, [text] when nothing splits."""
    if not isinstance(text, str):
        raise TypeError(f"split_sentences wants a string, got {type(text).__name__}")
    text = " ".join(text.split())
    if not text:
        return []
    from sentencex import segment

    sentences = [s.strip() for s in segment(language, text)]
    return [s for s in sentences if s] or [text]


def _words(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def match_highlights(sentences: Sequence[str], highlights: Iterable[str], min_chars: int = 10) -> list[float]:
    """1.0 for each sentence that a highlighted text contains or is contained in, else 0.0.

    Human annotations (ACLSum's highlights) come segmented and tokenised their own way;
    comparing lower-cased word sequences makes "models ( QE )" match "models (QE)", and
    containment either way lets one highlight cover a sentence our splitter cut in two.
    Highlights shorter than `min_chars` are ignored (a fragment would match anything).
    """
    marked = [h for h in (_words(str(t)) for t in highlights) if len(h) >= min_chars]
    out = []
    for sentence in sentences:
        s = _words(sentence)
        out.append(float(bool(s) and any(s in h or h in s for h in marked)))
    return out
