"""Tolerant parsing of LLM answers: JSON in code fences or followed by chatter, and "Not applicable." variants.

Small local models rarely return clean JSON; large ones wrap it in ```json fences or
add a remark after it. We take the first JSON object that parses and has the wanted
field; failing that, a regex for the field; failing that, the answer is kept and
flagged as unparsed (never silently dropped).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

NOT_APPLICABLE = "Not applicable."

# "Not applicable", "not applicable.", "N/A", "NA", "Not Applicable - the abstract ...": all mean the same.
_NA_RE = re.compile(r"^\W*(not\s+applicable|n/?a|none|not\s+mentioned|not\s+stated)\b", re.IGNORECASE)
_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Parsed:
    """The outcome of parsing one answer: status is "ok", "not_applicable" or "unparsed"."""

    status: str
    value: object = None  # the sentence (str) or the judge's dict
    error: str = ""


def is_not_applicable(text: str) -> bool:
    """True for "Not applicable." and its variants (case, punctuation, N/A, trailing remarks)."""
    return bool(_NA_RE.match(text.strip())) if isinstance(text, str) else False


def json_objects(text: str):
    """Yield every JSON object that parses in `text`, fenced ones first."""
    candidates = [m.group(1) for m in _FENCE_RE.finditer(text)] + [text]
    decoder = json.JSONDecoder()
    for chunk in candidates:
        start = chunk.find("{")
        while start != -1:
            try:
                obj, _ = decoder.raw_decode(chunk, start)
            except json.JSONDecodeError:
                pass
            else:
                if isinstance(obj, dict):
                    yield obj
            start = chunk.find("{", start + 1)


def _field_by_regex(text: str, field: str) -> str | None:
    # An object cut off before its closing quote or brace still holds the value we want.
    m = re.search(rf'"{field}"\s*:\s*"((?:[^"\\]|\\.)*)"?', text, re.DOTALL)
    if not m:
        return None
    try:
        return json.loads(f'"{m.group(1)}"')
    except json.JSONDecodeError:
        return m.group(1)


_TEMPLATE_SLOT = re.compile(r"\{(text|abstract|title|aspect|description|domain|examples|include|exclude)\}")


def parse_sentence(text: str, field: str = "sentence") -> Parsed:
    """Parse a summary answer `{"sentence": "..."}` tolerantly.

    Returns status "not_applicable" for the "Not applicable." answer in any of its
    variants, "ok" with the cleaned sentence, or "unparsed" with the reason (also for a
    sentence without a word, such as the format example's "...", for one that repeats a
    template slot such as "{text}", and for a question instead of a statement).
    """
    if not isinstance(text, str) or not text.strip():
        return Parsed("unparsed", None, "empty answer")
    value = None
    for obj in json_objects(text):
        if isinstance(obj.get(field), str):
            value = obj[field]
            break
    if value is None:
        value = _field_by_regex(text, field)
    if value is None:
        # A bare "Not applicable." without JSON is still a clear answer.
        if is_not_applicable(text):
            return Parsed("not_applicable", NOT_APPLICABLE)
        return Parsed("unparsed", None, f'no JSON object with a "{field}" string')
    value = " ".join(value.split())
    if not value:
        return Parsed("unparsed", None, f'"{field}" is empty')
    if is_not_applicable(value):
        return Parsed("not_applicable", NOT_APPLICABLE)
    # Small models copy the prompt instead of answering: the format example's "..." or a
    # template slot such as "{text}". Neither says anything about the paper.
    if not any(c.isalpha() for c in value):
        return Parsed("unparsed", None, f'"{field}" has no words: {value[:40]!r}')
    if _TEMPLATE_SLOT.search(value):
        return Parsed("unparsed", None, f'"{field}" repeats a template slot: {value[:80]!r}')
    # "How does it achieve its goals?": a question about the paper states nothing about it.
    if value.rstrip(' "\'').endswith("?"):
        return Parsed("unparsed", None, f'"{field}" is a question, not a statement: {value[:80]!r}')
    return Parsed("ok", value)


def _trigrams(text: str) -> list[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return list(zip(words, words[1:], words[2:]))


def copies_instructions(sentence: str, instructions: str, source: str = "", share: float = 0.6) -> bool:
    """Whether a summary mostly repeats the prompt's instructions instead of describing the abstract.

    Small models answer with the aspect's description ("The method or solution the paper
    proposes: ..."), one of its example sentences, or a fragment of the rubric ("Mention
    this aspect of the abstract"). True when at least `share` of the sentence's word
    trigrams occur in `instructions` and not in `source` (the abstract: a sentence taken
    from the abstract is an answer, however literal). Sentences under three words: False.
    """
    grams = _trigrams(sentence)
    if not grams:
        return False
    told, read = set(_trigrams(instructions)), set(_trigrams(source))
    return sum(g in told and g not in read for g in grams) >= share * len(grams)


def parse_judgement(text: str, scale: tuple[int, int]) -> Parsed:
    """Parse a judge answer `{"reasoning": "...", "score": <int>}`; the score must lie on `scale`."""
    if not isinstance(text, str) or not text.strip():
        return Parsed("unparsed", None, "empty answer")
    low, high = scale
    for obj in json_objects(text):
        if "score" in obj:
            score = obj["score"]
            break
    else:
        m = re.search(r'"score"\s*:\s*"?(-?\d+(?:\.\d+)?)', text)
        if not m:
            return Parsed("unparsed", None, 'no "score" field')
        score = m.group(1)
        obj = {"reasoning": _field_by_regex(text, "reasoning") or ""}
    try:
        number = float(score)
    except (TypeError, ValueError):
        return Parsed("unparsed", None, f"score {score!r} is not a number")
    if number != int(number) or not low <= number <= high:
        return Parsed("unparsed", None, f"score {score!r} is not an integer in [{low}, {high}]")
    return Parsed("ok", {"score": int(number), "reasoning": str(obj.get("reasoning", ""))})


def _sentence_numbers(value) -> list[int] | None:
    """The integers in one aspect's value: a list of ints or digit strings, a bare int, or a string "1, 3"."""
    if value is None:
        return []
    if isinstance(value, bool):  # True is an int in Python, but not a sentence number
        return None
    if isinstance(value, (int, float)):
        return [int(value)] if value == int(value) else None
    if isinstance(value, str):
        if not value.strip() or is_not_applicable(value):
            return []  # "", "none", "N/A": no sentence
        # "2", "[2]", "1, 3" hold numbers; "sentence numbers" (the format copied back) holds none and is no answer.
        numbers = [int(d) for d in re.findall(r"-?\d+", value)]
        return numbers or None
    if isinstance(value, (list, tuple)):
        out, noise = [], 0
        for item in value:
            numbers = _sentence_numbers(item)
            if numbers is None or isinstance(item, (list, tuple)):
                noise += 1  # a nested list or a word is noise, not a sentence number
                continue
            out.extend(numbers)
        return None if noise and not out else out  # ["sentence numbers"] is the format copied back, not []
    return None


def _label_key(key) -> str:
    # "Challenge", "research question" and "research-question" all name the aspect research_question.
    return re.sub(r"[\s\-]+", "_", str(key).strip().lower())


def parse_sentence_labels(text: str, aspects, n_sentences: int, prefill: str = '{"') -> Parsed:
    """Parse a sentence-label answer `{"challenge": [1], "approach": [2, 3], "outcome": []}` tolerantly.

    `aspects` are the aspect names (or an AspectSet). Sentence numbers in the answer are
    1-based, as the prompt shows them; the value is `{aspect: sorted 0-based indices}`.
    Numbers may be ints or strings; out-of-range ones are dropped and named in `error`;
    keys match aspect names case-insensitively; unknown keys are ignored; a missing
    aspect means no sentence. No JSON object with any aspect (nor a cut-off one the
    regex can read) is "unparsed". An answer that continues `prefill` without repeating
    it (a backend that does not echo the prefill) is read with the prefill put back.
    """
    if not isinstance(text, str) or not text.strip():
        return Parsed("unparsed", None, "empty answer")
    names = list(getattr(aspects, "names", aspects))
    wanted = {_label_key(n): n for n in names}
    found: dict | None = None
    texts = [text] + ([prefill + text] if prefill and not text.lstrip().startswith(prefill) else [])
    for candidate in texts:
        for obj in json_objects(candidate):
            hits = {wanted[_label_key(k)]: v for k, v in obj.items() if _label_key(k) in wanted}
            if hits:
                found = hits
                break
        if found:
            break
    if not found:
        # Cut off by max_new_tokens before the closing brace: read each `"aspect": [..` that is there.
        found = {}
        for key, name in wanted.items():
            pattern = r"(?<![\w])\"?" + r"[\s_\-]+".join(map(re.escape, key.split("_"))) + r"\"?\s*:\s*\[([^\[\]{}]*)"
            m = re.search(pattern, text, re.IGNORECASE)
            if m:
                found[name] = m.group(1)  # a string of the list's insides: "1, 3" or '"2"
    if not found:
        return Parsed("unparsed", None, f"no JSON object with any of the aspects {names}")
    labels, dropped, errors = {}, set(), []
    for name in names:
        numbers = _sentence_numbers(found.get(name))
        if numbers is None:
            errors.append(f"{name}: {found[name]!r} is not a list of sentence numbers")
            numbers = []
            del found[name]
        dropped.update(n for n in numbers if not 1 <= n <= n_sentences)
        labels[name] = sorted({n - 1 for n in numbers if 1 <= n <= n_sentences})
    if not found:  # every aspect's value was noise: no answer at all, not "no sentence states anything"
        return Parsed("unparsed", None, "; ".join(errors))
    if dropped:
        errors.append(f"dropped sentence numbers outside 1..{n_sentences}: {sorted(dropped)}")
    return Parsed("ok", labels, "; ".join(errors))
