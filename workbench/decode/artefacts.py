"""Texts not worth showing: what a small LLM writes when it copies its prompt instead of answering.

The packaged SmolLM2-135M, asked for one sentence about an aspect of an abstract, often answers
with pieces of its prompt or of a training format it has seen: a heading ("### Abstract (1) We
propose ..."), an instruction-tuning marker ("BEGININPUT"), a row of the rubric's placeholders
("### [task and problem setting] | [mention the limitation ...]"), one of the aspect file's example
sentences (written "for other abstracts") with a continuation of its own, or a press release's
opening ("We are pleased to announce ..."). Seen in its answers on ACLSum and CSAbstruct abstracts
(tests/test_shown_texts.py keeps them). Stage 01's parser rejects an answer that is mostly the
prompt (`parsing.copies_instructions`); these slip through it, and none of them states anything
about the paper it is credited to.

`artefact_reason(text)` says why a text is not shown (None: it may be); with `prompt` (the aspect
file's own words, `prompt_text`) and `source` (the paper's abstract) it also catches a text that
carries a run of the prompt's words the abstract does not have: an example sentence spliced in.
"""

from __future__ import annotations

import re
# (pattern, why the text is not shown), tried in order; case-insensitive.
MARKERS: tuple[tuple[str, str], ...] = (
    (r"\b(BEGIN|END)(INPUT|CONTEXT|INSTRUCTION)\b", "an instruction-format marker (BEGININPUT, ENDINPUT, ...)"),
    (r"#{2,}", "a Markdown heading mark (###)"),
    (r"<\|[a-z_]+\|>|</?s>|\[/?INST\]|<</?SYS>>", "a chat role tag (<|im_start|>, [INST], ...)"),
    (r"^\W*(system|user|assistant)\s*[:\n]", "a chat role name opening the text"),
    (r"\bwe are (pleased|happy|excited|delighted|proud) to (announce|present|share|introduce)\b",
     "an announcement, not a statement of the paper"),
    (r"^\W*abstracts?\b\s*(\(\s*\d+\s*\)|\d+(\.\d+)*|:|-)", "a copied 'Abstract' heading"),
    (r"^\W*(summary|answer|sentence|output|response|title|aspect|challenge|approach|outcome|task|method|finding)s?"
     r"\s*(\(\s*\d+\s*\))?\s*:", "a preamble ('Summary:') instead of the statement"),
    (r"\b(here is|here's|below is) (a|an|the|my|one)\b[^.]{0,40}\b(summary|sentence|answer|description)\b",
     "a preamble ('Here is a summary')"),
    (r"\bthis is a summary of\b", "says that it is a summary, not what the paper does"),
    (r"\[[^\]]{2,80}\]\s*\|", "a row of template placeholders ([...] | [...])"),
    (r"\{\s*\"?sentence\"?\s*:|\"sentence\"\s*:", "a remnant of the JSON answer format"),
    (r"\{(text|abstract|title|aspect|description|domain|examples|include|exclude)\}", "a template slot"),
    (r"^\s*(\.\.\.|…)", "starts mid-text ('...')"),
    (r"^\W*mention(ing|s|ed)?\b", "repeats the rubric's instruction ('Mention ...')"),
    (r"\bas an ai\b|\bi'?m sorry\b|\bi cannot (help|answer|provide)\b", "an assistant's aside"),
)
_COMPILED = tuple((re.compile(p, re.IGNORECASE | re.MULTILINE), why) for p, why in MARKERS)

BORROWED_WORDS = 6  # a run of this many words of the prompt, absent from the abstract, is a splice of the prompt


def marker_reason(text: str) -> str | None:
    """Why `text` carries a prompt or format artefact (`MARKERS`), or None."""
    for pattern, why in _COMPILED:
        if pattern.search(text):
            return why
    return None


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _runs(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def borrowed_run(text: str, prompt: str, source: str = "", n: int = BORROWED_WORDS) -> str | None:
    """The first run of n words of `text` that the prompt has and the paper's `source` lacks, or None.

    Such a run is the prompt's own wording (an example sentence, a line of the rubric) spliced
    into the answer: another paper's statement, or none, credited to this one.
    """
    words = _words(text)
    told, read = _runs(_words(prompt), n), _runs(_words(source), n)
    for i in range(len(words) - n + 1):
        run = tuple(words[i:i + n])
        if run in told and run not in read:
            return " ".join(run)
    return None


def artefact_reason(text: str, prompt: str = "", source: str = "") -> str | None:
    """Why `text` should not be shown as a statement about a paper, or None where it may be.

    A marker of a prompt or format (`MARKERS`), or, given the aspect file's words (`prompt`,
    see `prompt_text`) and the paper's abstract (`source`), a run of the prompt's words the
    abstract does not have (`borrowed_run`). An empty text is not worth showing either.
    """
    if not isinstance(text, str) or not text.strip():
        return "empty"
    found = marker_reason(text)
    if found:
        return found
    if prompt:
        run = borrowed_run(text, prompt, source)
        if run:
            return f"carries the prompt's words ({run!r}), not the paper's"
    return None


def prompt_text(aspect_set) -> str:
    """Every word the aspect file puts into a stage-01 prompt (`data.aspects.AspectSet`): descriptions, what to
    include and exclude, the example sentences and the templates, for `artefact_reason`'s `prompt`."""
    parts: list[str] = [aspect_set.description, aspect_set.system_prompt]
    for aspect in aspect_set:
        parts += [aspect.description, *aspect.include, *aspect.exclude, *aspect.examples,
                  *(prompt.template for prompt in aspect.prompts)]
    return "\n".join(p for p in parts if p)

