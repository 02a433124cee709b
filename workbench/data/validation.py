"""Checking a corpus: the problems found in it (`ValidationReport`), and `CorpusError`.

A problem is one issue row (`ISSUE_COLUMNS`: row, doc_id, field, severity, problem, detail),
whoever found it: a reader (what is wrong in the file itself, `readers.py`) or
`Corpus.validate` (what is wrong with a document, `validate_docs`). The small text helpers that
those messages share (`plural`, `short`, `option_hint`; `terminal_text` for printing a file's text)
live here too.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

# Placeholders that exports put where there is no abstract (Scopus: "[No abstract available]").
PLACEHOLDER = re.compile(
    r"^\W*(no abstract( available)?|abstract not available|not available|n/?a|none|null|nan|-+)\W*$",
    re.IGNORECASE,
)


class CorpusError(ValueError):
    """A corpus that cannot be loaded or used; the message names the file, row or field."""


ISSUE_COLUMNS = ["row", "doc_id", "field", "severity", "problem", "detail"]


def empty_issues() -> pd.DataFrame:
    """A frame of no issues with the issue columns (so an empty report still has its columns)."""
    return pd.DataFrame(columns=ISSUE_COLUMNS).astype({"row": "int64"})


def make_issue(row: int, field: str, severity: str, problem: str, detail: str, doc_id: str = "") -> dict:
    """One problem of a corpus, as a row of a ValidationReport."""
    return {"row": row, "doc_id": doc_id, "field": field, "severity": severity,
            "problem": problem, "detail": detail}


@dataclass
class ValidationReport:
    """Problems found in a corpus, one row per (document, problem).

    `issues` has the columns ``row`` (0-based position in the corpus, which for a freshly
    loaded corpus is the order of the source file), ``doc_id``, ``field``, ``severity``
    ("error" | "warning"), ``problem`` (a short code such as "missing_abstract") and
    ``detail`` (a sentence for people).

    Errors make a document unusable (`Corpus.drop_invalid` removes those rows); warnings
    are worth a look but the document is kept. `notes` are sentences about the corpus as a
    whole, such as where its ids came from.
    """

    issues: pd.DataFrame = field(default_factory=empty_issues)
    n_docs: int = 0
    source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when there are no errors (warnings allowed)."""
        return self.errors.empty

    @property
    def errors(self) -> pd.DataFrame:
        """The issues with severity "error"."""
        return self.issues[self.issues["severity"] == "error"]

    @property
    def warnings(self) -> pd.DataFrame:
        """The issues with severity "warning"."""
        return self.issues[self.issues["severity"] == "warning"]

    @property
    def error_rows(self) -> list[int]:
        """Sorted corpus positions that have at least one error."""
        return sorted({int(r) for r in self.errors["row"]})

    def summary(self) -> str:
        """One line per severity with counts per problem, e.g. "2 errors: 1 duplicate_id, ..."."""
        head = f"{self.n_docs} documents" + (f" from {self.source}" if self.source else "")
        lines = [f"{head}: no problems found." if self.issues.empty else f"{head}:"]
        for severity, frame in (("error", self.errors), ("warning", self.warnings)):
            if frame.empty:
                continue
            counts = frame["problem"].value_counts(sort=False)
            parts = ", ".join(f"{n} {problem}" for problem, n in counts.items())
            docs = frame["row"].nunique()
            lines.append(f"  {plural(len(frame), severity)} in {plural(docs, 'document')}: {parts}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def raise_if_errors(self, limit: int = 10) -> None:
        """Raise `CorpusError` listing the first `limit` errors, if there are any."""
        if self.ok:
            return
        errors = self.errors
        lines = [_describe_issue(issue) for issue in errors.head(limit).itertuples()]
        more = f"\n  ... and {len(errors) - limit} more" if len(errors) > limit else ""
        where = f"{self.source}: " if self.source else ""
        raise CorpusError(
            f"{where}{plural(len(errors), 'error')} in {errors['row'].nunique()} of "
            f"{plural(self.n_docs, 'document')} "
            "(use Corpus.drop_invalid() to remove those rows):\n  " + "\n  ".join(lines) + more
        )

    def _repr_html_(self, limit: int = 50) -> str:
        rows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in issue) + "</tr>"
            for issue in self.issues.head(limit).itertuples(index=False)
        )
        more = (f"<p>... {len(self.issues) - limit} more issues</p>"
                if len(self.issues) > limit else "")
        header = "".join(f"<th>{c}</th>" for c in ISSUE_COLUMNS)
        table = f"<table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>" if rows else ""
        return f"<pre>{html.escape(self.summary())}</pre>{table}{more}"


def plural(n: int, word: str) -> str:
    """`3 papers`, `1 paper`."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def _describe_issue(issue: Any) -> str:
    return f"row {issue.row} (doc_id {issue.doc_id!r}): {issue.field}: {issue.problem} - {issue.detail}"


def is_missing(value: Any) -> bool:
    """Scalar missing check that, unlike `pd.isna`, is safe on lists and arrays."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def short(value: Any, n: int = 40) -> str:
    """repr(value) cut to at most n characters, for messages."""
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def single_spaced(text: str) -> str:
    """`text` with every run of whitespace one space, none at the ends: ``" ".join(text.split())``.

    Most abstracts are so already, which a few scans of the text tell faster than splitting it into words:
    printable ASCII holds no whitespace but the space (a tab, a line break or \\x1c is a control character).
    """
    if text.isascii() and text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    return " ".join(text.split())


def validate_docs(docs: pd.DataFrame, max_chars: int, where: list[str] | None = None) -> list[dict]:
    """Every problem of the standard columns (ids, titles, abstracts, years), one issue dict each.

    where: each row's place in the file ("line 4"), for the messages that name another row."""
    issues: list[dict] = []

    def at(row: int) -> str:
        return f" ({where[row]})" if where else ""

    def add(row: int, doc_id: str, field: str, severity: str, problem: str, detail: str) -> None:
        issues.append(make_issue(row, field, severity, problem, detail, doc_id=doc_id))

    first_row_of_id: dict[str, int] = {}
    first_row_of_text: dict[str, int] = {}
    for row, (doc_id, title, abstract) in enumerate(
        zip(docs["doc_id"].tolist(), docs["title"].tolist(), docs["abstract"].tolist())
    ):
        doc_id = "" if is_missing(doc_id) else str(doc_id)
        if not doc_id.strip():
            add(row, doc_id, "doc_id", "error", "missing_id", "document has no id")
        elif doc_id in first_row_of_id:
            first = first_row_of_id[doc_id]
            add(row, doc_id, "doc_id", "error", "duplicate_id",
                f"same doc_id as row {first}{at(first)}" + (f"; this one is on {where[row]}" if where else ""))
        else:
            first_row_of_id[doc_id] = row

        if is_missing(title) or (isinstance(title, str) and not title.strip()):
            add(row, doc_id, "title", "warning", "missing_title", "document has no title")
        elif not isinstance(title, str):
            add(row, doc_id, "title", "warning", "non_text",
                f"title is {type(title).__name__}, not text: {short(title)}")

        if is_missing(abstract):
            add(row, doc_id, "abstract", "error", "missing_abstract", "document has no abstract")
            continue
        if not isinstance(abstract, str):
            add(row, doc_id, "abstract", "error", "non_text",
                f"abstract is {type(abstract).__name__}, not text: {short(abstract)}")
            continue
        normalised = single_spaced(abstract)
        if not normalised:
            add(row, doc_id, "abstract", "error", "empty_abstract",
                "abstract is empty or whitespace only")
            continue
        if PLACEHOLDER.match(normalised):
            add(row, doc_id, "abstract", "error", "placeholder_abstract",
                f"abstract is a placeholder, not text: {short(normalised)}")
            continue
        if not any(ch.isalpha() for ch in normalised):
            add(row, doc_id, "abstract", "error", "no_letters",
                f"abstract has no letters: {short(normalised)}")
            continue
        if len(abstract) > max_chars:
            add(row, doc_id, "abstract", "warning", "very_long",
                f"abstract has {len(abstract):,} characters (limit {max_chars:,})")
        if normalised in first_row_of_text:
            first = first_row_of_text[normalised]
            add(row, doc_id, "abstract", "warning", "duplicate_text",
                f"same abstract as row {first} (doc_id {docs['doc_id'].iloc[first]!r})")
        else:
            first_row_of_text[normalised] = row
    return issues


# What a terminal acts on instead of showing: C0 and C1 controls (ESC starts colour, cursor and title
# escape sequences, U+009B is an 8-bit CSI), DEL, the Unicode line and paragraph separators, and the
# bidirectional overrides and isolates that make a line read in another order than it is stored.
_TERMINAL_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def terminal_text(text: str, keep_newlines: bool = False) -> str:
    """`text` safe to print to a terminal: each control character written as an escape (ESC as ``\\x1b``,
    U+2028 as ``\\u2028``), so a title from a file can neither colour, move nor retitle the terminal.

    keep_newlines: leave "\\n" as a line break (for multi-line messages of ours).
    """
    def escape(match: re.Match) -> str:
        char = match.group()
        if keep_newlines and char == "\n":
            return char
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _TERMINAL_CONTROLS.sub(escape, str(text))


def option_hint(name: str, example: str) -> str:
    """How to give a `load_corpus` argument, in Python and to `workbench validate`.

    The id, title, year and label columns go in `load_corpus`'s ``columns=ColumnNames(...)``.
    """
    python = f"{name}={example!r}"
    if name in ("id_column", "title_column", "year_column", "label_column"):
        python = f"columns=ColumnNames({python})"
    return f"{python} (workbench validate --{name.replace('_', '-')} {example})"
