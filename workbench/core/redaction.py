"""Redaction: a key's value scrubbed from text that a server sent back, before anything shows or stores it.

A server (a test server, a misconfigured proxy, an error page) may echo the request's
`Authorization` header in its reply; `redact` removes every run of 8 or more characters of
the key in whatever way it was written. `OpenAIBackend` (`workbench.generate.http_backend`) passes
everything it receives through it, so no answer, record, error message or notebook holds it.
`without_credentials` shows a URL without its user:password part.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import re
from typing import Sequence
from urllib.parse import quote, unquote, urlsplit, urlunsplit

# A run of this many characters of a key counts as a leak and is scrubbed; shorter runs are left
# alone, since a few characters of a random key also turn up in ordinary text.
REDACT_RUN = 8
REDACTED = "***"


def redact(text: str, secrets: Sequence[str]) -> str:
    """`text` with every run of 8 or more consecutive characters of any secret replaced by ***.

    A server may send the key back as it is ("Bearer sk-..."), JSON-escaped (``\\/``,
    ``\\u0026``, ``\\"``), HTML-escaped (``&amp;``, ``&#x27;``), URL-encoded (``%2F``), as a
    Python bytes repr (an httpx error quoting a malformed header), escaped twice over, or
    cut; every one of these is matched, character by character, case-insensitively. A
    secret shorter than 8 characters is replaced where it stands whole, as a token of its own.
    """
    if not text:
        return text
    for secret in secrets:
        if secret:
            text = _scrub(text, _secret_pattern(secret))
    return text


def _scrub(text: str, pattern: re.Pattern) -> str:
    """`text` with the union of every match of `pattern` (overlapping ones too) replaced by ***."""
    spans = []
    for match in pattern.finditer(text):  # a lookahead: one match at every position where a run starts
        start, end = match.span(1)
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    if not spans:
        return text
    parts, at = [], 0
    for start, end in spans:
        parts += [text[at:start], REDACTED]
        at = end
    return "".join(parts + [text[at:]])


@functools.lru_cache(maxsize=32)
def _secret_pattern(secret: str) -> re.Pattern:
    """A pattern matching, at any position, REDACT_RUN consecutive characters of `secret` in any written form."""
    forms = [_char_pattern(c) for c in secret]
    if len(secret) < REDACT_RUN:  # too short to tell from text in part: whole, and not inside a longer word
        windows = [r"(?<![0-9A-Za-z])" + "".join(forms) + r"(?![0-9A-Za-z])"]
    else:
        windows = sorted({"".join(forms[i:i + REDACT_RUN]) for i in range(len(secret) - REDACT_RUN + 1)})
    return re.compile("(?=(" + "|".join(windows) + "))", re.IGNORECASE)


def _char_pattern(char: str) -> str:
    """A regex alternative for one character as it may be written: itself, escaped once, or escaped twice."""
    code = ord(char)
    once = {char, json.dumps(char)[1:-1], json.dumps(char, ensure_ascii=False)[1:-1], html.escape(char),
            quote(char, safe=""), f"\\u{code:04x}", f"&#{code};", f"&#x{code:x};", f"&#x{code:04x};"}
    if char == "/":
        once.add("\\/")  # JSON's optional escape (PHP, some Java encoders)
    if char in "'\"\\":
        once.add("\\" + char)  # a Python repr
    if char == "'":
        once.add("&apos;")
    twice = {json.dumps(form)[1:-1] for form in once} | {html.escape(form) for form in once}
    alternatives = sorted(once | twice, key=len, reverse=True)  # the longest first: the whole escape is covered
    return "(?:" + "|".join(map(re.escape, alternatives)) + ")"


def url_secrets(url: str) -> list[str]:
    """The secrets a server URL holds: its password and the Basic credentials httpx sends for user:password@."""
    parts = urlsplit(url)
    if parts.password is None:
        return []
    user, password = unquote(parts.username or ""), unquote(parts.password)
    basic = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return [password, basic]


def without_credentials(url: str) -> str:
    """The URL with any user:password@ part replaced by ***@ (for messages and logs)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
