"""Reading corpus files: one reader per file format, each giving the records it found (`columns.Raw`).

CSV, TSV, Web of Science tab-delimited, JSON Lines, JSON, Parquet, RIS and BibTeX. A reader
keeps what it could not read right (a row with the wrong number of fields, an RIS record
without its ``ER`` line) as an issue with the file's line, never dropping it silently, and
raises `CorpusError` naming the file and line where it cannot read the file at all. To add a
format: a function ``(path, encoding) -> Raw`` and its suffixes, given to `register_reader`
(the shipped ones are listed in `READERS` and `SUPPORTED_FORMATS`).
"""

from __future__ import annotations

import codecs
import csv
import functools
import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .columns import DERIVED_IDS, Raw, content_bases, content_ids, drop_exact_repeats
from .validation import CorpusError, make_issue, option_hint, plural, short
from .writers import unguard_formula

#: Suffix -> format name understood by `load_corpus(format=...)`.
SUPPORTED_FORMATS: dict[str, str] = {
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".ris": "ris",
    ".bib": "bibtex",
    ".bibtex": "bibtex",
    ".txt": "wos",  # only Web of Science tab-delimited exports (header starts with "PT\t")
}
FORMATS = sorted(set(SUPPORTED_FORMATS.values()))

# The line ends of text files: CRLF, LF and a bare CR (old Mac exports). Not every character that
# `str.splitlines` breaks at: in a RIS file U+2028, NEL or a form feed is text inside a value, and byte
# 0x85 read as latin-1 is a Windows "..." (NEL), not a new line. Our writers fold all of those
# (`writers.LINE_BREAKS`), so what they write splits here exactly where they ended a line.
_LINE_END = re.compile(r"\r\n|\r|\n")


def read_file(path: Path, fmt: str, encoding: str) -> Raw:
    """Run the reader for `fmt`, turning a wrong or unknown encoding into a `CorpusError`."""
    try:
        codecs.lookup(encoding)
    except LookupError as exc:
        raise CorpusError(f"{path.name}: unknown encoding {encoding!r}; pass "
                          f"{option_hint('encoding', 'latin-1')} or another Python codec name") from exc
    # utf-8-sig also reads plain UTF-8, and Web of Science / Excel exports start with a BOM.
    enc = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
    try:
        return READERS[fmt](path, enc)
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path.name}: {_decode_error(path, enc, exc)}; pass the file's encoding, e.g. "
                          f"{option_hint('encoding', 'latin-1')}, or, where only some lines are in another "
                          "encoding (rows pasted from two exports), re-save those lines in the file's "
                          "encoding") from exc
    except OSError as exc:  # no permission to read it, a disk or network share that fails
        hint = "; give yourself read permission (ls -l shows it)" if isinstance(exc, PermissionError) else ""
        raise CorpusError(f"{path}: cannot be read: {exc.strerror or exc}{hint}") from exc


def _decode_error(path: Path, encoding: str, exc: UnicodeDecodeError) -> str:
    """Where the file stops being valid `encoding`: line and column, and the byte found there.

    A reader decodes in chunks, so the error's own offset is not the file's; the file is decoded
    whole once more to find the line.
    """
    name = encoding.replace("-sig", "")
    data = path.read_bytes()
    try:
        data.decode(encoding)
    except UnicodeDecodeError as whole:
        before = data[:whole.start].decode(encoding, errors="replace")
        line_starts = [m.end() for m in _LINE_END.finditer(before)]
        line, start = len(line_starts) + 1, (line_starts[-1] if line_starts else 0)
        bad = " ".join(f"0x{b:02x}" for b in whole.object[whole.start:whole.end])
        text_before = before[start:]
        shown = ("ends " if len(text_before) > 40 else "reads ") + repr(text_before[-40:])
        return (f"not valid {name} at line {line}, column {len(text_before) + 1} (byte {bad}: {whole.reason}; "
                f"the line up to it {shown})")
    return f"not valid {name} (byte {exc.start} of a chunk: {exc.reason})"


def format_from_suffix(path: Path) -> str:
    """The corpus format of a file by its suffix (.csv, .ris, .bib, ...); a CorpusError lists the supported ones."""
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_FORMATS:
        raise CorpusError(
            f"{path.name}: unknown file type {suffix or '(no suffix)'!r}; supported suffixes are "
            f"{sorted(SUPPORTED_FORMATS)} (or pass {option_hint('format', 'csv')}, one of {FORMATS})"
        )
    return SUPPORTED_FORMATS[suffix]


# -- delimited text -------------------------------------------------------------------
def _read_table(path: Path, encoding: str, sep: str, quoting: int = csv.QUOTE_MINIMAL,
                unguard: bool = False) -> Raw:
    """Read a delimited file; a row whose field count differs from the header's is kept
    (cut or padded to the header) and reported as a malformed_row error with its lines.

    unguard: remove the ``'`` a CSV writer puts before a cell a spreadsheet would run as a formula.
    """
    records = _csv_records(path, encoding, sep, quoting)
    if unguard:
        records = [(first, last, [unguard_formula(v) for v in fields]) for first, last, fields in records]
    if not records:
        return Raw(pd.DataFrame())
    names = _column_names(records[0][2])
    rows, where, issues = [], [], []
    for row, (first, last, fields) in enumerate(records[1:]):
        lines = f"line {first}" if first == last else f"lines {first}-{last}"
        fields, problem = _fit_fields(fields, len(names), sep)
        if problem:
            issues.append(make_issue(row, "row", "error", "malformed_row", f"{lines} {problem}"))
        rows.append(fields)
        where.append(lines)
    columns = list(zip(*rows)) if rows else [()] * len(names)
    # Everything as text so that ids keep leading zeros and "NA"/"None" stay words; only a
    # truly empty cell is missing, which is how an empty abstract shows up. Python strings (object):
    # the loader reads the titles and abstracts back as such, and turning 300 MB of abstracts into
    # pandas' Arrow strings first costs seconds; `standardise` makes the other columns str.
    frame = pd.DataFrame({name: pd.Series([v if v != "" else None for v in values], dtype=object)
                          for name, values in zip(names, columns)})
    return Raw(frame, where, issues)


def _csv_records(path: Path, encoding: str, sep: str, quoting: int) -> list[tuple[int, int, list[str]]]:
    """(first line, last line, fields) of every non-blank record, the header first."""
    kind = "CSV" if sep == "," else "tab-separated"
    records: list[tuple[int, int, list[str]]] = []
    end = 0
    with path.open(encoding=encoding, newline="") as f, _large_csv_fields():
        # strict: an unclosed quote is an error instead of swallowing the rest of the file.
        reader = csv.reader(f, delimiter=sep, quoting=quoting, strict=True)
        try:
            for fields in reader:
                first, end = end + 1, reader.line_num
                if len(fields) > 1 or (fields and fields[0].strip()):
                    records.append((first, end, fields))
        except csv.Error as exc:
            raise CorpusError(f"{path.name}: malformed {kind} file: the row starting on line "
                              f"{end + 1}: {_csv_hint(str(exc))}") from exc
    return records


def _csv_hint(message: str) -> str:
    if "unexpected end of data" in message:
        return ("a field opened with a double quote is never closed, so the rest of the file "
                "would be read into it; close the quote, and double any quote inside the field (\"\")")
    if "expected after" in message:
        return (f"{message}: a quoted field must end right after its closing quote; "
                "double any quote inside the field (\"\")")
    return message


@contextmanager
def _large_csv_fields():
    """Lift the csv module's 128 KiB field limit (full texts) while reading one file."""
    old = csv.field_size_limit()
    csv.field_size_limit(max(old, 2**31 - 1))
    try:
        yield
    finally:
        csv.field_size_limit(old)


def _column_names(header: list[str]) -> list[str]:
    """Header names as pandas makes them: trailing empty names (a trailing delimiter)
    dropped, other empty ones "Unnamed: i", repeats "name.1", "name.2"..."""
    while header and not header[-1].strip():
        header = header[:-1]
    names: list[str] = []
    for i, name in enumerate(header):
        name = name or f"Unnamed: {i}"
        base, k = name, 0
        while name in names:
            k += 1
            name = f"{base}.{k}"
        names.append(name)
    return names


def _fit_fields(fields: list[str], n: int, sep: str) -> tuple[list[str], str]:
    """The row's fields cut or padded to `n`, and what was wrong ("" when nothing was).

    Empty fields past the header (a trailing delimiter, as Web of Science writes) are fine.
    """
    while len(fields) > n and not fields[-1].strip():
        fields = fields[:-1]
    if len(fields) == n:
        return fields, ""
    delimiter = "comma" if sep == "," else "tab"
    found = f"has {len(fields)} fields but the header has {n}"
    if len(fields) > n:
        return fields[:n], (f"{found}: an unquoted {delimiter} inside a field? The row's values "
                            "cannot be trusted (an abstract may be cut short); put fields that "
                            f"contain a {delimiter} in double quotes, or drop the row with drop_invalid()")
    return fields + [""] * (n - len(fields)), (
        f"{found}: a line break inside an unquoted field, or a field missing? The row's values "
        "cannot be trusted; put fields that contain line breaks in double quotes, or drop the "
        "row with drop_invalid()")


def _read_csv(path: Path, encoding: str) -> Raw:
    """A CSV file; the ``'`` that our writers put before a formula-like cell is removed (`unguard_formula`)."""
    return _read_table(path, encoding, ",", unguard=True)


def _read_tsv(path: Path, encoding: str) -> Raw:
    return _read_table(path, encoding, "\t")


def _read_wos(path: Path, encoding: str) -> Raw:
    with path.open(encoding=encoding) as f:
        first = f.readline()
    if first.startswith("FN "):
        raise CorpusError(f"{path.name}: this is a Web of Science plain-text export; export as "
                          "'Tab delimited file' or RIS instead")
    if not first.startswith("PT\t"):
        raise CorpusError(f"{path.name}: a .txt file is read only as a Web of Science tab-delimited "
                          f"export (header starting 'PT<tab>'); pass {option_hint('format', 'tsv')}, "
                          f"one of {FORMATS}")
    # WoS does not quote fields, and abstracts contain quote characters.
    return _read_table(path, encoding, "\t", quoting=csv.QUOTE_NONE)


# -- JSON, Parquet --------------------------------------------------------------------
def _read_jsonl(path: Path, encoding: str) -> Raw:
    records, where = [], []
    with path.open(encoding=encoding) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path.name}: line {lineno} is not valid JSON ({exc.msg}, "
                                  f"column {exc.colno})") from exc
            if not isinstance(record, dict):
                raise CorpusError(f"{path.name}: line {lineno} is a {type(record).__name__}, "
                                  "expected a JSON object")
            records.append(record)
            where.append(f"line {lineno}")
    return Raw(pd.DataFrame.from_records(records), where)


def _read_json(path: Path, encoding: str) -> Raw:
    try:
        data = json.loads(path.read_text(encoding=encoding) or "[]")
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{path.name}: not valid JSON ({exc.msg} at line {exc.lineno}, "
                          f"column {exc.colno})") from exc
    if not isinstance(data, list):
        raise CorpusError(f"{path.name}: expected a JSON list of objects, got a {type(data).__name__}")
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise CorpusError(f"{path.name}: item {i} is a {type(record).__name__}, "
                              "expected a JSON object")
    return Raw(pd.DataFrame.from_records(data))


def _read_parquet(path: Path, encoding: str) -> Raw:
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow's errors have no common base worth naming
        raise CorpusError(f"{path.name}: cannot read Parquet ({exc})") from exc
    # Parquet gives list cells back as numpy arrays; lists compare and serialise plainly.
    for column in df.columns:
        if df[column].dtype == object:
            df[column] = [v.tolist() if isinstance(v, np.ndarray) else v for v in df[column]]
    return Raw(df)


# -- RIS ------------------------------------------------------------------------------
_RIS_ABSTRACT_TAGS = ("AB", "N2")  # repeated, they are paragraphs of one abstract


@dataclass
class _RisChunk:
    """The lines of one RIS record, ``ER`` excluded, and how the record ended."""

    start: int                                   # line number of its first line
    lines: list[tuple[int, str]] = field(default_factory=list)
    end: str = "ER"                              # "ER", "TY" (a new record began) or "EOF"
    end_line: int = 0


def _read_ris(path: Path, encoding: str) -> Raw:
    """Read RIS records with rispy's tag names, one record per ``TY``...``ER``.

    Repairs, each reported: a ``TY`` before the ``ER`` starts a new record (missing_er);
    a last record cut off by the end of the file is kept (truncated_record); tagged lines
    outside a record start one (missing_ty); repeated AB/N2 tags are joined as paragraphs
    and other repeated single tags keep their first value (repeated_tag). Records without
    a DO or ID tag get an id derived from their title and abstract. Lines end at CRLF, LF or
    CR only (`_LINE_END`): other line separators inside a value cannot start a record.
    """
    import rispy

    parser = rispy.RisParser()
    lines = _LINE_END.split(path.read_text(encoding=encoding))
    if lines[-1] == "":
        lines.pop()  # the file's last line end ends a line; it does not start one
    chunks, stray = _ris_chunks(lines, parser)
    if not chunks and stray:
        raise CorpusError(f"{path.name}: no documents: no RIS record found (no line starts with "
                          "a tag such as 'TY  - ')")
    records, where, issues = [], [], []
    for row, chunk in enumerate(chunks):
        record, found = _ris_record(chunk, parser, path.name)
        records.append(record)
        where.append(f"record starting on line {chunk.start}")
        issues += [make_issue(row, *args) for args in found]
    notes = [_stray_note(stray)] if stray else []
    # A record exported twice goes before the ids are derived: it must not take a "-2" id of its own.
    titles, abstracts = [r.get("title") for r in records], [r.get("abstract") for r in records]
    keys = [str(r.get("doi") or r.get("id") or base) for r, base in zip(records, content_bases(titles, abstracts))]
    raw, kept = drop_exact_repeats(Raw(pd.DataFrame(index=range(len(records))), where, issues, notes),
                                   keys, titles, abstracts, path.name)
    records = [records[row] for row in kept]
    if records:
        raw.notes += _ris_ids(records, path.name)
    raw.frame = pd.DataFrame.from_records(records)
    return raw


def _ris_chunks(lines: list[str], parser: Any) -> tuple[list[_RisChunk], list[int]]:
    """Split RIS lines into records, and list the non-blank lines outside any record."""
    chunks: list[_RisChunk] = []
    stray: list[int] = []
    current: _RisChunk | None = None
    for number, line in enumerate(lines, start=1):
        tag = parser.parse_line(line)[0]
        if current is not None and tag in ("ER", "TY"):
            current.end, current.end_line = tag, number
            chunks.append(current)
            current = None
        if current is None:
            if tag is None or tag == "ER":
                if line.strip() and tag is None:
                    stray.append(number)
                continue
            current = _RisChunk(start=number)
        current.lines.append((number, line))
    if current is not None:
        current.end, current.end_line = "EOF", len(lines)
        chunks.append(current)
    return chunks, stray


def _stray_note(stray: list[int]) -> str:
    shown = ", ".join(map(str, stray[:5])) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
    return (f"{plural(len(stray), 'line')} outside any RIS record (no tag, not between TY and ER) "
            f"{'was' if len(stray) == 1 else 'were'} not read: line {shown}")


def _ris_record(chunk: _RisChunk, parser: Any, label: str) -> tuple[dict, list[tuple]]:
    """The record of one chunk (rispy's names), and its issues as `make_issue` arguments."""
    import rispy

    body = [line for _, line in chunk.lines]
    has_type = parser.parse_line(body[0])[0] == "TY"
    text = "\n".join(([] if has_type else ["TY  - "]) + body + ["ER  - "])
    try:
        record = dict(rispy.loads(text)[0])
    except Exception as exc:  # rispy raises plain exceptions of several kinds
        raise CorpusError(f"{label}: cannot read the RIS record starting on line {chunk.start} "
                          f"({exc})") from exc
    if not has_type:
        record.pop("type_of_reference", None)
    found = _ris_end_issues(chunk, has_type)
    found += _join_repeated_tags(record, _ris_fields(chunk, parser), parser, chunk.start)
    # Exporters differ in tags: EndNote writes T1/N2/Y1 where Zotero writes TI/AB/PY.
    record.setdefault("title", record.get("primary_title"))
    record.setdefault("abstract", record.get("notes_abstract"))
    record.setdefault("year", record.get("publication_year"))
    return record, found


def _ris_end_issues(chunk: _RisChunk, has_type: bool) -> list[tuple]:
    here = f"the record starting on line {chunk.start}"
    found = []
    if not has_type:
        found.append(("record", "warning", "missing_ty",
                      f"{here} has no TY line; its tags were read as a record"))
    if chunk.end == "TY":
        found.append(("record", "warning", "missing_er",
                      (f"{here} has no ER line: a new record (TY) begins on line "
                       f"{chunk.end_line}, so they were read as two records; check both")))
    elif chunk.end == "EOF":
        found.append(("record", "warning", "truncated_record",
                      (f"{here} has no ER line: the file ends inside it (a cut-off export?); "
                       "it was kept, but check that it is complete")))
    return found


def _ris_fields(chunk: _RisChunk, parser: Any) -> list[list]:
    """[tag, line number, value] per tag line, continuation lines joined on as rispy does."""
    fields: list[list] = []
    for number, line in chunk.lines:
        tag, content = parser.parse_line(line)
        if tag is not None:
            fields.append([tag, number, content])
        elif fields and content:
            fields[-1][2] = f"{fields[-1][2]} {content}".strip()
    return fields


def _join_repeated_tags(record: dict, fields: list[list], parser: Any, start: int) -> list[tuple]:
    """Join repeated abstract tags into paragraphs in `record`; report every repeated
    single-value tag (rispy keeps only the first value of those)."""
    found = []
    for tag in dict.fromkeys(f[0] for f in fields):
        if tag in ("TY", "ER") or tag in parser.list_tags or tag not in parser.mapping:
            continue
        repeats = [f for f in fields if f[0] == tag]
        if len(repeats) < 2:
            continue
        name = parser.mapping[tag]
        at = f"{tag} appears {len(repeats)} times in the record starting on line {start} " \
             f"(lines {', '.join(str(f[1]) for f in repeats)})"
        if tag in _RIS_ABSTRACT_TAGS:
            record[name] = "\n\n".join(f[2] for f in repeats if f[2])
            found.append(("abstract", "warning", "repeated_tag", f"{at}: joined as paragraphs"))
        else:
            dropped = ", ".join(short(f[2]) for f in repeats[1:])
            found.append((name, "warning", "repeated_tag",
                          f"{at}: the first value is kept, not {dropped}"))
    return found


def _ris_ids(records: list[dict], label: str) -> list[str]:
    """Set every record's doc_id (its DOI, else its ID tag, else derived from its text);
    return the note to make when some were derived."""
    derived = content_ids([r.get("title") for r in records], [r.get("abstract") for r in records])
    n_derived = 0
    for record, content_id in zip(records, derived):
        given = record.get("doi") or record.get("id")
        n_derived += not given
        record["doc_id"] = given or content_id
    if not n_derived:
        return []
    note = f"{label}: {n_derived} of {plural(len(records), 'record')} have no DO or ID tag, so their "
    return [note + DERIVED_IDS]


# -- BibTeX ---------------------------------------------------------------------------
def _read_bibtex(path: Path, encoding: str) -> Raw:
    import bibtexparser
    from bibtexparser.model import DuplicateBlockKeyBlock

    library = bibtexparser.parse_string(path.read_text(encoding=encoding))
    entries = list(library.entries)
    for block in library.failed_blocks:
        if isinstance(block, DuplicateBlockKeyBlock):
            # A repeated key is a duplicate id, which validate() reports; keep the entry.
            entries.append(block.ignore_error_block)
            continue
        error = getattr(block, "error", None) or "syntax error"
        raise CorpusError(f"{path.name}: malformed BibTeX entry starting on line "
                          f"{block.start_line + 1}: {str(error).strip()}")
    entries.sort(key=lambda e: e.start_line)  # duplicates were appended out of order
    records, where = [], []
    for entry in entries:
        record: dict[str, Any] = {"doc_id": entry.key, "entry_type": entry.entry_type}
        for key, fld in entry.fields_dict.items():
            value = fld.value
            if key.lower() in ("title", "abstract") and isinstance(value, str):
                value = _latex_to_text(value)
            record[key.lower()] = value
        records.append(record)
        where.append(f"entry starting on line {entry.start_line + 1}")
    return Raw(pd.DataFrame.from_records(records), where)


def _latex_to_text(text: str) -> str:
    """LaTeX to plain Unicode text on one line: ``\\emph{x}`` -> x, ``{\\"U}`` -> Ü, ``--``
    -> en dash, ``\\&`` -> &, ``$\\alpha$`` -> α, case-protecting braces dropped.

    A bare ``%`` stays as it is (exports do not always escape it), not a comment; the
    logos \\TeX, \\LaTeX, \\BibTeX stay words. Spacing inside math follows LaTeX
    (``$\\alpha \\leq 1$`` -> "α≤ 1").
    """
    return " ".join(_latex_converter().latex_to_text(text).split())


@functools.lru_cache(maxsize=1)
def _latex_converter() -> Any:
    from pylatexenc.latex2text import (
        LatexNodes2Text,
        MacroTextSpec,
        get_default_latex_context_db,
    )

    context = get_default_latex_context_db()
    logos = {"TeX": "TeX", "LaTeX": "LaTeX", "LaTeXe": "LaTeX2e", "BibTeX": "BibTeX"}
    context.add_context_category("workbench-logos", prepend=True,
                                 macros=[MacroTextSpec(m, simplify_repl=t) for m, t in logos.items()])
    return LatexNodes2Text(latex_context=context, keep_comments=True)


READERS = {
    "csv": _read_csv,
    "tsv": _read_tsv,
    "wos": _read_wos,
    "jsonl": _read_jsonl,
    "json": _read_json,
    "parquet": _read_parquet,
    "ris": _read_ris,
    "bibtex": _read_bibtex,
}


def register_reader(name: str, reader, suffixes=()) -> None:
    """Teach `load_corpus` a file format: `reader(path, encoding) -> Raw`, chosen by `format=name` or a suffix.

    >>> register_reader("endnote", read_endnote_xml, [".xml"])
    """
    READERS[name] = reader
    for suffix in suffixes:
        SUPPORTED_FORMATS[suffix.lower() if suffix.startswith(".") else f".{suffix.lower()}"] = name
    if name not in FORMATS:
        FORMATS.append(name)
        FORMATS.sort()

