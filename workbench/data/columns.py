"""From a file's columns to a corpus's standard ones: doc_id, title, abstract, year, labels.

A reader hands over what it found in the file (`Raw`); `standardise` picks the source column
of each standard column (by the names exports use, or the one the user named), derives ids
from the text where the file has none (`content_ids`), reads years and labels, and keeps
every other column as metadata, a `highlights_<aspect>` column as lists of sentences (`to_sentences`: a
spreadsheet holds the marked sentences as text in one cell). What it finds wrong (a year that is not a
year, marked sentences that are not in the abstract) becomes an issue row, as the readers' findings do.
A record that repeats an earlier one exactly (the same id, title and abstract: a paper exported twice,
two exports merged) is dropped here, with a note that counts them (`drop_exact_repeats`), so that every
stage sees the same papers; a repeated id with another text is left for `Corpus.validate` to report.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .sentences import match_highlights, split_sentences
from .validation import CorpusError, is_missing, make_issue, option_hint, short, single_spaced

# Candidate column names, compared after `_norm` (lower case, letters and digits only), in
# order of preference. Ids that every row of an export has (EID, UT) come before DOI,
# which is often blank.
_ID_NAMES = ["doc_id", "docid", "id", "paper_id", "corpusid", "eid", "ut", "pmid", "pubmed id",
             "accession number", "key", "citation key", "doi", "di"]
_TITLE_NAMES = ["title", "ti", "article title", "document title", "primary_title", "paper title"]
_ABSTRACT_NAMES = ["abstract", "ab", "abstract note", "paper abstract", "summary", "text"]
_YEAR_NAMES = ["year", "py", "publication year", "pub year", "date", "publication date"]
_LABEL_NAMES = ["labels", "label"]  # keywords are metadata unless label_column= says otherwise

_STANDARD = ["doc_id", "title", "abstract", "year", "labels"]


@dataclass
class Raw:
    """What a reader found in a file: its records, and what was wrong with them.

    frame: one row per record, columns as in the file.
    where: per row, where it starts in the file ("line 3", "record starting on line 9"),
        for messages; empty for formats without lines (JSON list, Parquet).
    issues: `make_issue` dicts, ``row`` being the position in `frame`.
    notes: sentences about the file as a whole.
    """

    frame: pd.DataFrame
    where: list[str] = field(default_factory=list)
    issues: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _norm(name: Any) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def _pick(columns: list, given: str | None, candidates: list[str], role: str, label: str) -> Any:
    """The source column for `role`: the given name (exact, then case-insensitive) or the
    first candidate present."""
    by_norm: dict[str, Any] = {}
    for column in columns:
        by_norm.setdefault(_norm(column), column)
    if given is not None:
        if given in columns:
            return given
        if _norm(given) in by_norm:
            return by_norm[_norm(given)]
        raise CorpusError(f"{label}: {role}_column={given!r} not found; columns are {list(columns)}")
    for candidate in candidates:
        if _norm(candidate) in by_norm:
            return by_norm[_norm(candidate)]
    return None


@dataclass(frozen=True)
class ColumnNames:
    """The source columns `load_corpus` maps to ``doc_id``, ``title``, ``year`` and ``labels``,
    when the automatic choice is not right (None: detected; see `load_corpus`). The abstract's
    column is `load_corpus`'s own ``abstract_column``, the one most often given."""

    id_column: str | None = None
    title_column: str | None = None
    year_column: str | None = None
    label_column: str | None = None

    def given(self) -> list[str]:
        """The names of the fields that are set."""
        return [name for name, value in vars(self).items() if value is not None]


def standardise(raw: Raw, label: str, *, id_column, title_column, abstract_column,
                 year_column, label_column) -> Raw:
    """The corpus frame (standard columns first, then the rest) with each row's place in the file, the
    reader's issues and notes plus those found here (unparseable years, derived ids, exact repeats dropped)."""
    frame = raw.frame
    columns = list(frame.columns)
    abstract_src = _pick(columns, abstract_column, _ABSTRACT_NAMES, "abstract", label)
    if abstract_src is None:
        raise CorpusError(f"{label}: no abstract column found; columns are {columns}; pass the "
                          f"column's name, e.g. {option_hint('abstract_column', 'NAME')}")
    id_src = _pick(columns, id_column, _ID_NAMES, "id", label)
    title_src = _pick(columns, title_column, _TITLE_NAMES, "title", label)
    year_src = _pick(columns, year_column, _YEAR_NAMES, "year", label)
    label_src = _pick(columns, label_column, _LABEL_NAMES, "label", label)

    # Lists of the values (tolist: iterating a column of pandas' Arrow strings costs a call per value).
    titles = (["" if is_missing(v) else v for v in frame[title_src].tolist()] if title_src is not None
              else [""] * len(frame))
    # Raw values on purpose: validate() must be able to see numbers, lists and holes.
    abstracts = [None if is_missing(v) else v for v in frame[abstract_src].tolist()]
    # Without an id column a paper's id is its text's hash: two records of one text share it until numbered.
    keys = ([_id_str(v) for v in frame[id_src].tolist()] if id_src is not None
            else content_bases(titles, abstracts))
    raw, kept = drop_exact_repeats(raw, keys, titles, abstracts, label, by_id=id_src is not None)
    frame, titles, abstracts = raw.frame, [titles[i] for i in kept], [abstracts[i] for i in kept]
    issues, notes = list(raw.issues), list(raw.notes)
    if id_src is not None:
        ids = [keys[i] for i in kept]
    else:
        ids = number_repeats([keys[i] for i in kept])
        notes.append(f"{label} has no id column, so each document's {DERIVED_IDS}")
    standard: dict[str, pd.Series] = {
        "doc_id": pd.Series(ids, dtype=str),
        "title": pd.Series(titles, dtype=object),
        "abstract": pd.Series(abstracts, dtype=object),
    }
    if year_src is not None:
        years, year_issues = _years(frame[year_src].tolist(), raw.where, year_src)
        standard["year"] = pd.Series(years, dtype="Int64")
        # The values of a row that was not read right are not worth a second complaint.
        misread = {found["row"] for found in raw.issues if found["severity"] == "error"}
        issues += [found for found in year_issues if found["row"] not in misread]
    if label_src is not None:
        standard["labels"] = pd.Series([_to_labels(v) for v in frame[label_src]], dtype=object)

    used = {id_src, title_src, abstract_src, label_src}
    if year_src is not None and "date" not in _norm(year_src):
        used.add(year_src)  # a date says more than its year, so it stays
    rest = _as_text(frame[[c for c in columns if c not in used]].reset_index(drop=True))
    for column in [c for c in rest.columns if str(c).startswith("highlights_")]:
        rest[column], found = _highlights(rest[column], abstracts, ids, raw.where, column)
        issues += found
    # A leftover column that happens to carry a standard name must not be overwritten.
    rest = rest.rename(columns={c: f"{c}_original" for c in rest.columns if c in _STANDARD})
    return Raw(pd.concat([pd.DataFrame(standard), rest], axis=1), raw.where, issues, notes)


def _as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with each column of Python strings (and holes) as pandas text (str), as pandas itself reads a
    column of text; numbers, lists and mixed columns stay as they are."""
    for column in frame.columns:
        values = frame[column]
        if values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) in ("string", "empty"):
            frame[column] = values.astype(str)
    return frame


def _spaced(value: Any) -> str:
    """A title or abstract with its whitespace normalised, for comparing two records' texts."""
    return "" if is_missing(value) else single_spaced(str(value))


def exact_repeats(keys: Sequence[str], titles: Sequence[Any], abstracts: Sequence[Any],
                  skip: Iterable[int] = ()) -> dict[int, int]:
    """{row: the earlier row it repeats} for every record that repeats an earlier one exactly: the same key (its
    id), the same title and the same abstract once whitespace is normalised. A blank key repeats nothing (a
    missing id is no id), nor do the rows in `skip` (misread rows, whose values cannot be trusted).

    Only records whose key came before are compared, so a file whose ids are all different costs one pass.
    """
    skip = set(skip)
    earlier: dict[str, list[int]] = {}
    repeats: dict[int, int] = {}
    for row, key in enumerate(keys):
        if row in skip or not key:
            continue
        same_key = earlier.get(key)
        if same_key is None:
            earlier[key] = [row]
            continue
        text = (_spaced(titles[row]), _spaced(abstracts[row]))
        first = next((r for r in same_key if (_spaced(titles[r]), _spaced(abstracts[r])) == text), None)
        if first is None:
            same_key.append(row)
        else:
            repeats[row] = first
    return repeats


def drop_exact_repeats(raw: Raw, keys: Sequence[str], titles: Sequence[Any], abstracts: Sequence[Any],
                       label: str, by_id: bool = True) -> tuple[Raw, list[int]]:
    """`raw` without the records that repeat an earlier one exactly (`exact_repeats`), with a note that counts
    them and names their places; and the positions of the records kept. The issues of a dropped record go
    with it, the others are renumbered. by_id: the keys are the file's ids (else hashes of the text)."""
    misread = {found["row"] for found in raw.issues if found["severity"] == "error"}
    repeats = exact_repeats(keys, titles, abstracts, skip=misread)
    kept = [row for row in range(len(keys)) if row not in repeats]
    if not repeats:
        return raw, kept
    new_row = {old: new for new, old in enumerate(kept)}
    issues = [{**found, "row": new_row[found["row"]]} for found in raw.issues if found["row"] in new_row]
    where = [raw.where[row] for row in kept] if raw.where else []
    note = _repeats_note(repeats, raw.where, label, "the same id, title and abstract" if by_id
                         else "the same title and abstract")
    return Raw(raw.frame.iloc[kept].reset_index(drop=True), where, issues, [*raw.notes, note]), kept


_NAMED_REPEATS = 5  # repeats named in the note; the rest counted


def _repeats_note(repeats: dict[int, int], where: list[str], label: str, same: str) -> str:
    def place(row: int) -> str:
        return where[row] if where else f"record {row + 1}"

    pairs = [f"{place(row)} repeats {place(first)}" for row, first in list(repeats.items())[:_NAMED_REPEATS]]
    more = f" and {len(repeats) - _NAMED_REPEATS} more" if len(repeats) > _NAMED_REPEATS else ""
    n = len(repeats)
    return (f"{label}: {n} exact duplicate{'s' if n > 1 else ''} ({same} as an earlier record) "
            f"{'were' if n > 1 else 'was'} dropped, so every stage reads each paper once: "
            f"{', '.join(pairs)}{more}")


def _id_str(value: Any) -> str:
    if is_missing(value):
        return ""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))  # ids read as floats (a column with holes) lose the ".0"
    return str(value).strip()


DERIVED_IDS = ("doc_id is derived from title and abstract ('h' + 12 hex digits of a SHA-1, "
                "case, spacing and punctuation ignored), which stays the same when records are "
                "added, removed or reordered in a new export; Corpus.id_table() lists doc_id and "
                f"title. To use a column of the file instead, pass {option_hint('id_column', 'NAME')}")


# Punctuation and spaces become one space: ASCII by a table (a regex with a match per
# space is slow on long abstracts), other characters by a regex that rarely matches.
_ASCII_NON_WORD = {c: " " for c in range(128) if not chr(c).isalnum()}
_OTHER_NON_WORD = re.compile(r"[^\w\x00-\x7f]+")


def _content_text(value: Any) -> str:
    """Text for a content id: NFKC, case-folded, letters and digits separated by single spaces."""
    if is_missing(value):
        return ""
    text = unicodedata.normalize("NFKC", str(value)).casefold().translate(_ASCII_NON_WORD)
    if not text.isascii():
        text = _OTHER_NON_WORD.sub(" ", text)
    return " ".join(text.split())


def content_ids(titles: Sequence[Any], abstracts: Sequence[Any]) -> list[str]:
    """``h`` + 12 hex digits of SHA-1(title, abstract) per document; repeats get -2, -3..."""
    return number_repeats(content_bases(titles, abstracts))


def content_bases(titles: Sequence[Any], abstracts: Sequence[Any]) -> list[str]:
    """``h`` + 12 hex digits of SHA-1(title, abstract) per document, before repeats are numbered."""
    bases = []
    for title, abstract in zip(titles, abstracts):
        key = f"{_content_text(title)}\x1f{_content_text(abstract)}"
        bases.append("h" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:12])
    return bases


def number_repeats(bases: Sequence[str]) -> list[str]:
    """The ids `bases` with the second of a base numbered -2, the third -3...: distinct ids in file order."""
    seen: dict[str, int] = {}
    ids = []
    for base in bases:
        seen[base] = seen.get(base, 0) + 1
        ids.append(base if seen[base] == 1 else f"{base}-{seen[base]}")
    return ids


# A clean year: 2019; an ISO date 2019-05, 2019-05-01, 2019-05-01T10:00:00Z; an RIS date
# 2019/05, 2019/05/01/Spring, 2020///; or a year written from a float column, 2019.0.
_YEAR_TEXT = re.compile(r"""(\d{4})(?:
      -\d{1,2}(?:-\d{1,2}(?:[T\ ][0-9:.]+(?:Z|[+-][0-9:]+)?)?)?
    | /\d{0,2}(?:/\d{0,2}(?:/.*)?)?
    | \.0
)?""", re.VERBOSE)


def _to_year(value: Any) -> int | None:
    """The year of a clean value (see `_YEAR_TEXT`; ints, whole floats and dates too),
    None for a missing one; ValueError for anything else ("circa 1990s", 95, 2019.5)."""
    if isinstance(value, str) and len(value) == 4 and value.isdecimal() and value[0] != "0":
        return int(value)  # the common case, without the pattern
    if is_missing(value) or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        year = int(value)
    elif isinstance(value, (float, np.floating)):
        if not float(value).is_integer():
            raise ValueError(value)
        year = int(value)
    elif isinstance(getattr(value, "year", None), int):  # date, datetime, Timestamp
        year = value.year
    else:
        match = _YEAR_TEXT.fullmatch(str(value).strip())
        if not match:
            raise ValueError(value)
        year = int(match.group(1))
    if not 1000 <= year <= 9999:
        raise ValueError(value)
    return year


def _years(values: Iterable[Any], where: list[str], column: Any) -> tuple[list[Any], list[dict]]:
    """Years (pd.NA where missing or not clean) and an unparseable_year warning per value
    that is there but is not a clean year."""
    years, issues = [], []
    for row, value in enumerate(values):
        try:
            year = _to_year(value)
        except ValueError:
            at = f"{where[row]}: " if where else ""
            issues.append(make_issue(row, "year", "warning", "unparseable_year",
                                 f"{at}{column} {short(value)} is not a clean year (such as 2019, "
                                 "2019-05-01 or 2019/05), so the year is left empty; correct it "
                                 f"in the file, or pass {option_hint('year_column', 'NAME')}"))
            year = None
        years.append(pd.NA if year is None else year)
    return years, issues


def _highlights(values: pd.Series, abstracts: list, ids: list[str], where: list[str],
                column: str) -> tuple[pd.Series, list[dict]]:
    """A `highlights_<aspect>` column as lists of sentences, and an unmatched_highlights warning per cell of text
    that marks no sentence of its abstract: that cell is read as not marked, not as "marked none", since a
    paraphrase in a spreadsheet would otherwise tell stage 03 that the paper states nothing of the aspect."""
    cells, issues = [], []
    for row, value in enumerate(values):
        marked = to_sentences(value)
        text = abstracts[row]
        if marked and isinstance(value, str) and isinstance(text, str) and \
                not any(match_highlights(split_sentences(text), marked)):
            at = f"{where[row]}: " if where else ""
            issues.append(make_issue(row, column, "warning", "unmatched_highlights",
                                     f"{at}{column} {short(value)} is no sentence of the abstract, so the paper counts "
                                     "as not marked; copy the sentences that state the aspect as the abstract has "
                                     "them", doc_id=ids[row]))
            marked = None
        cells.append(marked)
    return pd.Series(cells, dtype=object, index=values.index), issues


def to_sentences(value: Any) -> list[str] | None:
    """A `highlights_<aspect>` cell as the list of sentences it marks; None where nothing was marked.

    A list stays a list (JSON lines, Parquet, ACLSum). A spreadsheet cell holds the sentences that state the aspect,
    copied from the abstract one after the other, or a JSON list of them; both become a list. An empty cell is
    "not marked", not "marked none": a blank cell cannot say that someone read the abstract and found nothing.
    """
    if isinstance(value, (list, tuple, np.ndarray)):
        return [str(v) for v in value if not is_missing(v)]
    if is_missing(value) or not str(value).strip():
        return None
    text = str(value).strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            return [str(v) for v in parsed if not is_missing(v)]
    return split_sentences(text)


def _to_labels(value: Any) -> list[str]:
    if isinstance(value, (list, tuple, np.ndarray)):
        return [str(v) for v in value if not is_missing(v)]
    if is_missing(value):
        return []
    # Exports join several keywords into one cell with ";".
    return [part.strip() for part in str(value).split(";") if part.strip()]
