"""Papers back out to a file a reference manager reads: CSV or RIS, which `load_corpus` reads back alike.

The map's selections go back where the user's papers live (Zotero, EndNote, Mendeley read
RIS; every spreadsheet reads CSV). The same two formats are written by the exported page's
JavaScript (`maps/page.py`, which takes its character classes from here); a test reads both back
through `load_corpus`.

What comes back, and what cannot:

* CSV (`records_csv`) round-trips ids, titles and abstracts exactly, line breaks of every kind
  included (each field is quoted). A text cell that a spreadsheet would run as a formula (it starts
  with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) is written with a leading ``'``,
  which spreadsheets show as "this is text" and `load_corpus` removes again (`guard_formula`,
  `unguard_formula`). A CSV that did not come from here and holds a cell that really starts with
  ``'`` and then one of those characters loses that ``'`` on reading. Leading and trailing
  whitespace of an id is dropped on reading, as for every format.
* RIS (`records_ris`) holds one line per tag, so no value can keep a line break: every character
  that `str.splitlines` breaks on is folded, with the whitespace around it, into one space, and a
  value's leading and trailing whitespace is dropped (`ris_value`). Paragraphs of an abstract (a
  blank line between them) stay paragraphs: one ``AB`` tag each, joined by a blank line on reading.
  An id with a line break therefore comes back changed, and so does a title with a line break or
  whitespace at either end; a warning counts them. Export CSV to keep them.
"""

from __future__ import annotations

import csv
import io
import re
import warnings
from pathlib import Path

import pandas as pd

from ..core.files import write_text

FIRST_COLUMNS = ["doc_id", "title", "abstract", "year"]
# Columns that hold lists, arrays or per-sentence data: not for a reference manager.
SKIPPED = {"sentences", "labels"}

#: Every character `str.splitlines` ends a line at. A RIS reader may end a line at any of them, so none
#: may be left inside a RIS value (a bare CR or U+2028 before "ER  - " would forge a record).
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
#: Every character `str.isspace` calls whitespace (what `str.strip` and the regex class \\s remove);
#: listed so the page's JavaScript, whose \\s differs, folds exactly the same characters.
WHITESPACE = "".join(c for c in map(chr, range(0x3001)) if c.isspace())
#: The characters a spreadsheet starts a formula with (OWASP's CSV injection list).
FORMULA_STARTS = "=+-@\t\r"

# A cell written with a guard: a formula start after any number of apostrophes. The apostrophes are
# included so that a cell that really starts with "'=" gets a second one, and reading strips one back.
_GUARDED = re.compile(r"'*[=+\-@\t\r]")
# A plain number (-3, -0.25, -1e-05) is left as it is: a spreadsheet reads it as that number, nothing runs.
_NUMBER = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_WS = "[" + re.escape(WHITESPACE) + "]"
_BREAK = "[" + re.escape(LINE_BREAKS) + "]"
_RIS_FOLD = re.compile(f"{_WS}*{_BREAK}{_WS}*")
_PARAGRAPH_BREAK = re.compile(f"{_BREAK}{_WS}*{_BREAK}")


def _text(value) -> str:
    if value is None or (not isinstance(value, (list, tuple, dict)) and pd.isna(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def guard_formula(text: str) -> str:
    """`text` as a spreadsheet must read it: with a leading ``'`` where it would start a formula.

    Plain numbers stay as they are. `unguard_formula` is the inverse, for every text.
    """
    if _GUARDED.match(text) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def unguard_formula(text: str) -> str:
    """`text` with the ``'`` that `guard_formula` added removed (only before a formula start)."""
    if text[:1] == "'" and _GUARDED.match(text, 1):
        return text[1:]
    return text


def ris_value(text: str) -> str:
    """`text` as a RIS tag holds it, and as `load_corpus` reads it back: each run of line breaks (any
    character in `LINE_BREAKS`), with the whitespace around it, becomes one space; ends are stripped."""
    return _RIS_FOLD.sub(" ", text).strip(WHITESPACE)


def ris_paragraphs(text: str) -> list[str]:
    """The non-empty paragraphs of an abstract (a blank line between them), each as `ris_value`."""
    parts = _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n"))
    return [value for value in map(ris_value, parts) if value]


def records_csv(docs: pd.DataFrame) -> str:
    """The papers as CSV: doc_id, title, abstract, year first, then their plain metadata columns.

    Every field is quoted, so line breaks and commas come back exactly; text cells that a spreadsheet
    would run as a formula get a leading ``'`` (`guard_formula`), which `load_corpus` removes.
    """
    rest = [c for c in docs.columns if c not in FIRST_COLUMNS and c not in SKIPPED
            and not str(c).startswith(("summary_", "highlights_"))]
    columns = [c for c in FIRST_COLUMNS if c in docs.columns] + rest
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    writer.writerow([guard_formula(str(c)) for c in columns])
    for row in docs[columns].itertuples(index=False):
        writer.writerow([guard_formula(_text(v)) for v in row])
    return out.getvalue()


def records_ris(docs: pd.DataFrame) -> str:
    """The papers as RIS: TY, ID (the doc_id), TI, one AB per paragraph of the abstract, PY, ER.

    A RIS value is one line: line breaks are folded into spaces (`ris_value`), so a title, a paragraph
    or an id with a line break does not come back exactly; a warning names the ids that change.
    """
    def line(tag: str, value) -> str:
        return f"{tag}  - " + ris_value(_text(value))

    records = []
    for _, doc in docs.iterrows():
        lines = ["TY  - JOUR", line("ID", doc.get("doc_id")), line("TI", doc.get("title"))]
        lines += [f"AB  - {p}" for p in ris_paragraphs(_text(doc.get("abstract")))]
        if _text(doc.get("year")):
            lines.append(line("PY", doc.get("year")))
        lines.append("ER  - ")
        records.append("\r\n".join(lines))
    _warn_changed_ids(docs)
    _warn_changed_titles(docs)
    return "\r\n\r\n".join(records) + ("\r\n" if records else "")


def _warn_changed_ids(docs: pd.DataFrame) -> None:
    """Say which ids RIS cannot hold as they are (a line break inside): they come back changed."""
    if "doc_id" not in docs.columns:
        return
    changed = [doc_id for doc_id in map(_text, docs["doc_id"]) if ris_value(doc_id) != doc_id.strip()]
    if changed:
        shown = ", ".join(repr(doc_id) for doc_id in changed[:5]) + (" ..." if len(changed) > 5 else "")
        warnings.warn(f"{len(changed)} doc_id(s) hold a line break, which a RIS line cannot: they are written "
                      f"with a space instead and will read back changed ({shown}); export as .csv to keep them",
                      stacklevel=3)


def _warn_changed_titles(docs: pd.DataFrame) -> None:
    """Say how many titles RIS cannot hold as they are: a leading tab or space, a trailing one, a line break.

    No RIS representation keeps them: the format has no escape, rispy, Zotero and EndNote strip each
    value, and every stand-in (a no-break space, a visible mark) is either stripped as well or puts in
    the title a character its author never wrote. So the value is written trimmed, and this says so.
    """
    if "title" not in docs.columns:
        return
    titles = [title for title in map(_text, docs["title"]) if ris_value(title) != title]
    if titles:
        ends = sum(title != title.strip(WHITESPACE) for title in titles)
        how = [f"{ends} lose the whitespace at their start or end (a tab or a space)"] * bool(ends) + \
            [f"{len(titles) - ends} have line breaks made spaces"] * bool(len(titles) - ends)
        shown = ", ".join(repr(title[:40]) for title in titles[:3]) + (" ..." if len(titles) > 3 else "")
        warnings.warn(f"{len(titles)} title(s) will read back changed, as a RIS line holds no line break and readers "
                      f"trim each value: {' and '.join(how)} ({shown}); export as .csv to keep them", stacklevel=3)


def write_records(docs: pd.DataFrame, path) -> Path:
    """Write papers to `path` as CSV (.csv) or RIS (.ris), whole or not at all; returns the path.

    See the module doc for what each format brings back exactly and what it cannot.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return write_text(path, records_csv(docs))
    if suffix == ".ris":
        return write_text(path, records_ris(docs))
    raise ValueError(f"{path}: write a selection as .csv or .ris (got {suffix or 'no suffix'!r})")
