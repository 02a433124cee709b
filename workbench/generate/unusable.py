"""LLM answers no reader can use, read from their text alone: cut mid-sentence, repeated words, an announcement.

The packaged SmolLM2-135M writes a sentence until its token limit, so many of its answers stop
in the middle of one ("... and thereby the", "In"); it loops on a word ("Bidirectional
bidirectional neural network", "transformers and transformers") or a whole phrase; and it
sometimes writes the opening of a statement and stops there ("Our main findings are:"). Each
of these reads as broken or empty where the pane shows it as what a paper states. These rules
need no model, so every stage applies them alike (`embed.grounding`, which counts them in
`grounding.json`, and so stage 04's memory and the pane). The similarity rules (a text that
fits any paper, a copy of an abstract's sentences) need the reference encoder and live there.

`text_reason(text)` gives the verdict's name ("cut", "repeats", "announces") or None.
"""

from __future__ import annotations

import re

# Words that never end a finished English sentence: a sentence that stops on one was cut.
FUNCTION_WORDS = frozenset(
    "a an the and or but nor of to in on at by for with from into onto over under about as than that which who "
    "whose whom where when while whether if because since although though so such its their our his her this "
    "these those is are was were be been being has have had do does did can could may might must shall should "
    "will would not no very more most less least both either neither each every all any some".split())
FINAL = re.compile(r"[.!?][\"'”’)\]]*$")         # a sentence's end, perhaps inside quotes or brackets
ANNOUNCES = re.compile(r"(:|\bas follows\W*|\bthe following\W*)$", re.IGNORECASE)
WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")
NEAR = 2       # a content word again within this many words: "phrases and phrases"
PHRASE = 4     # a run of this many words said twice in one answer: a loop, not emphasis
NEAR_MIN_CHARS = 4  # shorter words ("pun", "and") repeat in good prose


def _words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def announces(text: str) -> bool:
    """The text opens a statement and stops before it: it ends on a colon or "as follows"."""
    return bool(ANNOUNCES.search(text.strip()))


def is_cut(text: str) -> bool:
    """The text stops mid-sentence: no final full stop, question or exclamation mark, or a last word that
    cannot end a sentence ("the", "of", "which", ...) before it."""
    stripped = text.strip()
    if not FINAL.search(stripped):
        return True
    words = _words(stripped)
    return bool(words) and words[-1] in FUNCTION_WORDS


def repeated(text: str) -> str | None:
    """What the text repeats, or None: the same content word within `NEAR` words ("bidirectional
    bidirectional", "phrases and phrases"), or a run of `PHRASE` words said twice."""
    words = _words(text)
    for i, word in enumerate(words):
        if len(word) < NEAR_MIN_CHARS or word in FUNCTION_WORDS:
            continue
        if word in words[i + 1:i + 1 + NEAR]:
            return word
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - PHRASE + 1):
        run = tuple(words[i:i + PHRASE])
        if run in seen and not set(run) <= FUNCTION_WORDS:
            return " ".join(run)
        seen.add(run)
    return None


def text_reason(text: str) -> str | None:
    """"announces", "cut" or "repeats" where the text alone shows it unusable (in that order), else None."""
    if not isinstance(text, str) or not text.strip():
        return "cut"
    if announces(text):
        return "announces"
    if is_cut(text):
        return "cut"
    if repeated(text):
        return "repeats"
    return None
