"""Papers back out to a file a reference manager reads: CSV or RIS, which `load_corpus` reads back alike.

The map's selections go back where the user's papers live (Zotero, EndNote, Mendeley read
RIS; every spreadsheet reads CSV). The same two formats are written by the exported page's
JavaScript (`maps/page.py`); a test reads both back through `load_corpus`.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pandas as pd

from ..core.files import write_text

FIRST_COLUMNS = ["doc_id", "title", "abstract", "year"]
# Columns that hold lists, arrays or per-sentence data: not for a reference manager.
SKIPPED = {"sentences", "labels"}


def _text(value) -> str:
    if value is None or (not isinstance(value, (list, tuple, dict)) and pd.isna(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def records_csv(docs: pd.DataFrame) -> str:
    """The papers as CSV: doc_id, title, abstract, year first, then their plain metadata columns."""
    rest = [c for c in docs.columns if c not in FIRST_COLUMNS and c not in SKIPPED
            and not str(c).startswith(("summary_", "highlights_"))]
    columns = [c for c in FIRST_COLUMNS if c in docs.columns] + rest
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\r\n")
    writer.writerow(columns)
    for row in docs[columns].itertuples(index=False):
        writer.writerow([_text(v) for v in row])
    return out.getvalue()


def records_ris(docs: pd.DataFrame) -> str:
    """The papers as RIS: TY, ID (the doc_id), TI, one AB per paragraph of the abstract, PY, ER."""
    def line(tag: str, value) -> str:
        return f"{tag}  - " + " ".join(_text(value).split())

    records = []
    for _, doc in docs.iterrows():
        lines = ["TY  - JOUR", line("ID", doc.get("doc_id")), line("TI", doc.get("title"))]
        lines += [line("AB", p) for p in re.split(r"\n\s*\n", _text(doc.get("abstract"))) if p.strip()]
        if _text(doc.get("year")):
            lines.append(line("PY", doc.get("year")))
        lines.append("ER  - ")
        records.append("\r\n".join(lines))
    return "\r\n\r\n".join(records) + ("\r\n" if records else "")


def write_records(docs: pd.DataFrame, path) -> Path:
    """Write papers to `path` as CSV (.csv) or RIS (.ris), whole or not at all; returns the path."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return write_text(path, records_csv(docs))
    if suffix == ".ris":
        return write_text(path, records_ris(docs))
    raise ValueError(f"{path}: write a selection as .csv or .ris (got {suffix or 'no suffix'!r})")
