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


def _json_objects(text: str):
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


def parse_sentence(text: str, field: str = "sentence") -> Parsed:
    """Parse a summary answer `{"sentence": "..."}` tolerantly.

    Returns status "not_applicable" for the "Not applicable." answer in any of its
    variants, "ok" with the cleaned sentence, or "unparsed" with the reason.
    """
    if not isinstance(text, str) or not text.strip():
        return Parsed("unparsed", None, "empty answer")
    value = None
    for obj in _json_objects(text):
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
    return Parsed("ok", value)


def parse_judgement(text: str, scale: tuple[int, int]) -> Parsed:
    """Parse a judge answer `{"reasoning": "...", "score": <int>}`; the score must lie on `scale`."""
    if not isinstance(text, str) or not text.strip():
        return Parsed("unparsed", None, "empty answer")
    low, high = scale
    for obj in _json_objects(text):
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
