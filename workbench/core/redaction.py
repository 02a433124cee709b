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
    cut; every one of these is matched, character by character, case-insensitively. Base64 of
    any text holding 8 or more consecutive characters of it (a Basic credential "user:key", a
    JSON body), standard or URL-safe, padded or not, is matched case-sensitively and goes as a
    whole run (`_scrub_base64`). A secret shorter than 8 characters is replaced where it stands
    whole, as a token of its own.
    """
    if not text:
        return text
    for secret in secrets:
        if secret:
            text = _scrub_base64(_scrub(text, _secret_pattern(secret)), secret)
    return text


# A base64 run is read from its characters, as is or escaped (JSON's \/, URL's %2B %2F %3D), with its padding.
_BASE64_RUN = re.compile(r"(?:[A-Za-z0-9+/_-]|\\/|%2[BbFf])+(?:=|%3[Dd])*")
_BASE64_UNESCAPED = str.maketrans({"-": "+", "_": "/"})  # URL-safe to standard; mixed runs compare alike
# The base64 characters that 8 bytes of a key fix by themselves, whatever the bytes before them (the three
# alignments of a byte in base64's groups of 3): 10 at each alignment. 10 such characters hold 60 bits of
# the key, so a match is a run of at least 7 of its bytes: the shortest a decoder could reveal as 8.
_BASE64_GRAM = 10


def _scrub_base64(text: str, secret: str) -> str:
    """`text` with every base64 run (standard or URL-safe, padded or not) that decodes, at any alignment, to 8 or
    more consecutive characters of `secret` (or of its JSON-escaped form) replaced whole by ***.

    A proxy echoing a Basic credential sends base64("user:key"); a server may base64 a JSON body that holds
    the key. The run goes whole, not only the characters that carry the key: no decodable part of it is left.
    Matched case-sensitively, as base64 is: an upper-cased run decodes to other bytes, and ignoring case would
    match 2 to the power 10 times as many runs that are not the key.
    """
    grams = _base64_grams(secret)
    if not grams:
        return text

    def scrub(match: re.Match) -> str:
        run = re.sub(r"%2[Bb]", "+", re.sub(r"%2[Ff]", "/", match.group(0))).replace("\\/", "/")
        run = run.rstrip("=").translate(_BASE64_UNESCAPED)
        found = any(run[i:i + _BASE64_GRAM] in grams for i in range(len(run) - _BASE64_GRAM + 1))
        return REDACTED if found else match.group(0)

    return _BASE64_RUN.sub(scrub, text)


@functools.lru_cache(maxsize=32)
def _base64_grams(secret: str) -> frozenset[str]:
    """Every run of _BASE64_GRAM standard-base64 characters fixed by the bytes of `secret` alone (as UTF-8, and
    JSON-escaped) at each of the three alignments; none for a secret under REDACT_RUN characters."""
    if len(secret) < REDACT_RUN:
        return frozenset()
    grams = set()
    for form in {secret, json.dumps(secret)[1:-1]}:
        data = form.encode("utf-8")
        for shift in range(3):  # the key's first byte at each place in a group of three
            encoded = base64.b64encode(bytes(shift) + data + bytes(2)).decode("ascii")
            # character k holds bits 6k..6k+5: those within the key's bits 8 shift .. 8 (shift + len) are fixed by it
            fixed = encoded[-(-8 * shift // 6):8 * (shift + len(data)) // 6]
            grams.update(fixed[i:i + _BASE64_GRAM] for i in range(len(fixed) - _BASE64_GRAM + 1))
    return frozenset(grams)


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
