"""Corpora of scientific abstracts: the `Corpus` class, `load_corpus`, subsetting and saving.

A `Corpus` is a pandas DataFrame with one row per document and three required columns,
``doc_id`` (str), ``title`` (str, may be "") and ``abstract``, plus optional ``year``
(Int64) and ``labels`` (list[str]); every other column of the source is kept as metadata.

    >>> corpus = load_corpus("scopus.csv")          # or .tsv .jsonl .json .parquet .ris .bib
    >>> report = corpus.validate()                   # look before you drop
    >>> corpus, dropped = corpus.drop_invalid(report)
    >>> small = corpus.subset(200, seed=0)

Loaders never drop documents silently: a missing abstract stays missing so that
`Corpus.validate` can point at it, and what a loader found wrong in the file itself (a
CSV row with too many fields, an RIS record without its ``ER`` line, a year that is not a
year) is kept with the corpus (`Corpus.load_issues`) and reported by `Corpus.validate`
with the file's line. Dropping is an explicit step (`Corpus.drop_invalid`) that returns
the report of what it removed.

A file without an id column gets ids derived from each document's title and abstract
(``h`` + 12 hex digits of a SHA-1), so that they survive a re-export in another order;
the report says so in its `ValidationReport.notes`, and `Corpus.id_table` lists them.

Where the rest lives: one reader per file format in `readers.py`, the mapping of a file's
columns to the standard ones in `columns.py`, the checks and `ValidationReport` in
`validation.py`, the ACLSum data set in `aclsum_corpus.py`.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .aclsum_corpus import aclsum_docs
from .readers import FORMATS, SUPPORTED_FORMATS, format_from_suffix, read_file
from .columns import ColumnNames, standardise
from .validation import (ISSUE_COLUMNS, CorpusError, ValidationReport, empty_issues, is_missing, make_issue,
                         validate_docs)

__all__ = [
    "Corpus",
    "ColumnNames",
    "CorpusError",
    "ValidationReport",
    "MAX_ABSTRACT_CHARS",
    "load_corpus",
    "text_or",
]


#: The longest abstract the stages read: `load_corpus` cuts a longer one to this many
#: characters (with a warning naming the paper), and `Corpus.validate` reports it (very_long).
#: A 1 MB "abstract" (a whole paper pasted into the cell) would otherwise reach the encoders.
MAX_ABSTRACT_CHARS = 20000


# --------------------------------------------------------------------------------------
# Corpus
# --------------------------------------------------------------------------------------
@dataclass
class Corpus:
    """Documents (abstracts of papers) with their metadata.

    `docs` has one row per document and the columns ``doc_id`` (str), ``title`` (str, may
    be "") and ``abstract`` (normally str; a corpus straight from a loader may hold missing
    or non-text values until `drop_invalid`), optionally ``year`` (Int64) and ``labels``
    (list[str]), and any other metadata columns as they came from the source.

    `load_issues` holds what the loader found wrong in the file (issue rows as in
    `ValidationReport`, ``row`` being the position in `docs`); `validate` reports them
    with its own findings, and `subset` / `drop_invalid` carry them along. `notes` are
    sentences about the corpus as a whole (e.g. that its ids were derived from the text).
    `where` is each row's place in the file ("line 3", "record starting on line 9"), carried along
    by `subset` / `drop_invalid` too, so that a message can name the lines (`place`); empty where
    the format has no lines (JSON list, Parquet, ACLSum).
    """

    docs: pd.DataFrame
    name: str = "corpus"
    source: str = ""
    load_issues: pd.DataFrame = field(default_factory=empty_issues)
    notes: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        missing = [c for c in ("doc_id", "title", "abstract") if c not in self.docs.columns]
        if missing:
            raise CorpusError(
                f"Corpus {self.name!r}: docs lacks the column(s) {missing}; "
                f"columns are {list(self.docs.columns)}"
            )
        # Positions are the row numbers used in reports, so the index must match them.
        self.docs = self.docs.reset_index(drop=True)
        self.load_issues = self.load_issues.reset_index(drop=True)

    def __len__(self) -> int:
        return len(self.docs)

    def _where(self) -> list[str]:
        """`where` while it still fits `docs` (not after the docs were replaced by hand), else []."""
        return self.where if len(self.where) == len(self.docs) else []

    def place(self, row: int) -> str:
        """Where the document at position `row` is in its file ("line 4"), or "row 4" where that is unknown."""
        where = self._where()
        return where[row] if where else f"row {row}"

    def __repr__(self) -> str:
        return f"Corpus(name={self.name!r}, {len(self)} documents, source={self.source!r})"

    @property
    def ids(self) -> list[str]:
        """Document ids in corpus order."""
        return [str(v) for v in self.docs["doc_id"]]

    def texts(self) -> list[str]:
        """Abstracts in corpus order; raises `CorpusError` if any is missing or not text.

        The abstracts are what gets embedded, so a hole must not pass silently, nor a row
        that the loader could not read right (a CSV row cut at an unquoted comma): call
        `drop_invalid()` first on a corpus that `validate()` does not pass.
        """
        bad = [i for i, v in enumerate(self.docs["abstract"]) if not isinstance(v, str)]
        if bad:
            raise CorpusError(
                f"Corpus {self.name!r}: {len(bad)} abstracts are missing or not text "
                f"(rows {bad[:10]}); call drop_invalid() first"
            )
        misread = self.load_issues[self.load_issues["severity"] == "error"]
        if len(misread):
            rows = sorted({int(r) for r in misread["row"]})
            raise CorpusError(
                f"Corpus {self.name!r}: {len(rows)} rows were not read right from "
                f"{self.source or 'the file'} (rows {rows[:10]}: {misread['problem'].iloc[0]}); "
                "see validate() and call drop_invalid() first"
            )
        return list(self.docs["abstract"])

    def titles(self) -> list[str]:
        """Titles in corpus order ("" where there is none)."""
        return ["" if is_missing(v) else str(v) for v in self.docs["title"]]

    def id_table(self) -> pd.DataFrame:
        """A frame of ``doc_id`` and ``title`` in corpus order: which id stands for which paper.

        Worth keeping beside a run when the ids were derived from the text (see `notes`).
        """
        return pd.DataFrame({"doc_id": self.ids, "title": self.titles()})

    def get(self, doc_id: str) -> dict:
        """The document with this id as a dict of its columns (the first one if duplicated)."""
        positions = np.flatnonzero((self.docs["doc_id"] == doc_id).to_numpy())
        if len(positions) == 0:
            raise KeyError(f"no document with doc_id {doc_id!r} in corpus {self.name!r}")
        return self.docs.iloc[int(positions[0])].to_dict()

    def __getitem__(self, doc_id: str) -> dict:
        """`corpus["P06-1112"]` is `corpus.get("P06-1112")`."""
        if not isinstance(doc_id, str):
            raise TypeError(
                f"index a Corpus with a doc_id string, not {type(doc_id).__name__}; "
                "use corpus.docs.iloc[...] for positions"
            )
        return self.get(doc_id)

    def _with_docs(self, docs: pd.DataFrame) -> Corpus:
        """A corpus of some rows of `self.docs` (their index: positions in this corpus),
        keeping the load issues of those rows, renumbered."""
        new_row = {int(old): new for new, old in enumerate(docs.index)}
        issues = self.load_issues[self.load_issues["row"].isin(list(new_row))].copy()
        issues["row"] = [new_row[int(r)] for r in issues["row"]]
        where = self._where()
        return Corpus(docs.reset_index(drop=True), name=self.name, source=self.source,
                      load_issues=issues.astype({"row": "int64"}), notes=list(self.notes),
                      where=[where[int(old)] for old in docs.index] if where else [])

    def subset(
        self,
        n: int | None = None,
        *,
        ids: Iterable[str] | None = None,
        seed: int = 0,
        where: str | pd.Series | Sequence[bool] | None = None,
    ) -> Corpus:
        """A smaller corpus, rows kept in their original order.

        where: a pandas query string (``'split == "test"'``, ``"year >= 2020"``) or a boolean
            mask aligned with `docs`; applied first.
        n: a random sample of n documents, reproducible for a given `seed` (all documents
            when n >= the number left after `where`).
        ids: exactly these documents; unknown ids raise `CorpusError` naming them.
        """
        if n is not None and ids is not None:
            raise ValueError("pass either n or ids, not both")
        docs = self.docs
        if where is not None:
            docs = self._filter(where)
        if ids is not None:
            wanted = [str(i) for i in ids]
            unknown = sorted(set(wanted) - set(docs["doc_id"]))
            if unknown:
                raise CorpusError(
                    f"Corpus {self.name!r}: unknown doc_id(s) {unknown[:10]}"
                    + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
                )
            docs = docs[docs["doc_id"].isin(set(wanted))]
        elif n is not None:
            if n < 0:
                raise ValueError(f"n must be >= 0, got {n}")
            if n < len(docs):
                rng = np.random.default_rng(seed)
                picked = np.sort(rng.choice(len(docs), size=n, replace=False))
                docs = docs.iloc[picked]
        return self._with_docs(docs)

    def _filter(self, where: str | pd.Series | Sequence[bool]) -> pd.DataFrame:
        if isinstance(where, str):
            try:
                return self.docs.query(where)
            except Exception as exc:  # pandas raises many types for a bad expression
                raise CorpusError(
                    f"Corpus {self.name!r}: where={where!r} failed ({exc}); "
                    f"columns are {list(self.docs.columns)}"
                ) from exc
        mask = where if isinstance(where, pd.Series) else pd.Series(list(where))
        if not pd.api.types.is_bool_dtype(mask) or len(mask) != len(self.docs):
            raise ValueError("where must be a query string or a boolean mask, one value per document")
        # A comparison on a nullable column (year >= 2020) gives NA for unknown years: not kept.
        return self.docs[mask.fillna(False).to_numpy(dtype=bool)]

    def validate(self, max_chars: int = MAX_ABSTRACT_CHARS) -> ValidationReport:
        """Check every document; see `ValidationReport` for the problems looked for.

        Errors: missing_id, duplicate_id (every occurrence after the first; a record that repeats
        an earlier one exactly, the same id, title and abstract, was dropped by `load_corpus`),
        missing_abstract, empty_abstract (whitespace only), non_text (a number, list...),
        placeholder_abstract ("[No abstract available]", "N/A"...), no_letters.
        Warnings: duplicate_text (same abstract, whitespace normalised, as an earlier row),
        very_long (more than `max_chars` characters), missing_title, non_text title.
        `load_corpus` already cut abstracts longer than `MAX_ABSTRACT_CHARS`; its very_long
        warning (with the original length) is among the loader's findings.
        The loader's findings (`load_issues`) come first for each row, e.g. the error
        malformed_row (a CSV row with the wrong number of fields) and the warnings
        missing_er, truncated_record, missing_ty, repeated_tag (RIS), unparseable_year and unmatched_highlights
        (a `highlights_<aspect>` cell of text that is no sentence of its abstract).
        """
        found = pd.DataFrame(validate_docs(self.docs, max_chars, self._where()), columns=ISSUE_COLUMNS)
        loaded = self.load_issues[self.load_issues["row"] < len(self)]  # docs replaced by hand
        parts = [frame for frame in (loaded, found) if len(frame)]
        issues = pd.concat(parts, ignore_index=True) if parts else empty_issues()
        issues = issues.astype({"row": "int64"}).sort_values("row", kind="stable")
        return ValidationReport(issues.reset_index(drop=True), n_docs=len(self),
                                source=self.source or self.name, notes=list(self.notes))

    def drop_invalid(self, report: ValidationReport | None = None) -> tuple[Corpus, ValidationReport]:
        """Remove the documents with errors; return the cleaned corpus and a report of them.

        Only errors are dropped (warnings stay). For duplicate ids the first occurrence is
        kept. The returned report lists exactly the dropped rows (positions in this corpus),
        so the caller can show what went.
        """
        report = report if report is not None else self.validate()
        if report.n_docs != len(self):
            raise ValueError(
                f"the report covers {report.n_docs} documents but the corpus has {len(self)}; "
                "validate this corpus again"
            )
        dropped = report.errors.reset_index(drop=True)
        keep = np.ones(len(self), dtype=bool)
        keep[report.error_rows] = False
        return (self._with_docs(self.docs[keep]),
                ValidationReport(dropped, n_docs=len(self), source=report.source))

    # -- saving ------------------------------------------------------------------------
    def to_jsonl(self, path: str | os.PathLike) -> Path:
        """Write one JSON object per document; `load_corpus` reads it back."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for record in self.docs.to_dict("records"):
                clean = {k: (None if is_missing(v) else v) for k, v in record.items()}
                f.write(json.dumps(clean, ensure_ascii=False, default=_json_default) + "\n")
        return path

    def to_parquet(self, path: str | os.PathLike) -> Path:
        """Write a Parquet file; `load_corpus` reads it back."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.docs.to_parquet(path, index=False)
        except Exception as exc:  # pyarrow refuses mixed-type columns, e.g. a numeric abstract
            raise CorpusError(
                f"{path.name}: cannot write Parquet ({exc}); mixed-type columns usually mean "
                "invalid rows: call drop_invalid() first"
            ) from exc
        return path

    def fingerprint(self) -> str:
        """Short sha256 of the ids and abstracts, in order: a key for caches of this corpus."""
        digest = hashlib.sha256()
        for doc_id, abstract in zip(self.docs["doc_id"], self.docs["abstract"]):
            # Unit/record separators keep ("a", "bc") and ("ab", "c") apart.
            text = "\x00missing" if is_missing(abstract) else str(abstract)
            digest.update(f"{doc_id}\x1f{text}\x1e".encode())
        return digest.hexdigest()[:16]

    def _repr_html_(self, rows: int = 5) -> str:
        shown = [c for c in ("doc_id", "title", "abstract", "year", "labels", "split")
                 if c in self.docs.columns]
        others = [c for c in self.docs.columns if c not in shown]
        header = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown)
        body = ""
        for _, doc in self.docs.head(rows).iterrows():
            cells = "".join(
                f"<td>{html.escape(_clip(doc[c], 300 if c == 'abstract' else 80))}</td>" for c in shown
            )
            body += f"<tr>{cells}</tr>"
        extra = (f"<br>other columns: {html.escape(', '.join(map(str, others)))}" if others else "")
        return (
            f"<div><b>{html.escape(self.name)}</b>: {len(self)} documents"
            f"{' from ' + html.escape(self.source) if self.source else ''}{extra}"
            f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table></div>"
        )


def _clip(value: Any, n: int) -> str:
    text = "" if is_missing(value) else str(value)
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------
def load_corpus(
    source: str | os.PathLike,
    *,
    format: str | None = None,
    abstract_column: str | None = None,
    encoding: str = "utf-8",
    name: str | None = None,
    columns: ColumnNames = ColumnNames(),
) -> Corpus:
    """Load a corpus from a file or from the packaged ACLSum data set.

    source: a path, or ``"aclsum"`` (all splits), ``"aclsum:test"``,
        ``"aclsum:train,validation"``, ``"aclsum:test[:20]"`` (see `load_aclsum`).
    format: one of csv, tsv, wos (Web of Science tab-delimited .txt), jsonl, json,
        parquet, ris, bibtex; taken from the suffix when not given.
    abstract_column, columns: the source column for each standard column, when the automatic
        choice (case-insensitive, ignoring spaces and punctuation) is not right; the abstract's
        is ``abstract_column``, the others are ``columns=ColumnNames(id_column=..., title_column=...,
        year_column=..., label_column=...)``:
        id (doc_id, id, paper_id, EID, UT, PMID, Key, DOI...), title (title, TI,
        Article Title...), abstract (abstract, AB, Abstract Note, summary, text), year
        (year, PY, Publication Year, date), labels (only "labels"/"label" unless given).
        Without an id column (and for RIS records without a DO or ID tag), the id is
        derived from the title and abstract: ``h`` + 12 hex digits of their SHA-1, with
        case, spacing and punctuation ignored, and ``-2``, ``-3``... on repeats. Such
        ids stay the same when records are added, removed or reordered in a re-export;
        the report's notes say so and `Corpus.id_table` lists them.
    encoding: the file's text encoding, e.g. "latin-1" (not used for Parquet).

    The mapped source columns become ``doc_id``, ``title``, ``abstract``, ``year``,
    ``labels`` (a date column used for the year is kept as well); all other columns are
    kept unchanged. BibTeX titles and abstracts are converted from LaTeX to plain text. In a
    CSV, the ``'`` that a CSV export of ours (and a spreadsheet) puts before a cell starting
    with ``=``, ``+``, ``-``, ``@``, a tab or a CR, so that it is not run as a formula, is
    removed (`writers.unguard_formula`; `writers` says what round-trips and what cannot).
    Nothing is dropped: what the loader found wrong (rows with the wrong number of fields,
    RIS records without ``ER``, repeated RIS tags, years that are not years) is reported
    by `Corpus.validate` with the file's line; then `Corpus.drop_invalid`.
    Raises `CorpusError` naming the file and line for files that cannot be read at all.
    """
    if isinstance(source, str) and (source == "aclsum" or source.startswith("aclsum:")):
        given = columns.given() + (["abstract_column"] if abstract_column is not None else [])
        if given or format is not None:
            raise CorpusError(f"{source}: format= and column arguments do not apply to ACLSum ({given})")
        splits = source.partition(":")[2]
        return _cut_long_abstracts(load_aclsum(splits.split(",") if splits else None, name=name))

    path = Path(source)
    label = path.name
    _check_is_file(path)
    fmt = format.lower() if format else format_from_suffix(path)
    if fmt not in FORMATS:
        raise CorpusError(f"{label}: unknown format {fmt!r}; supported formats are {FORMATS}")
    raw = read_file(path, fmt, encoding)
    if len(raw.frame) == 0:
        header = ", ".join(map(str, raw.frame.columns[:8])) + (", ..." if len(raw.frame.columns) > 8 else "")
        raise CorpusError(f"{label}: no documents: " + (f"the file has a header ({header}) and no rows"
                                                        if header else "the file holds no records"))
    std = standardise(raw, label, id_column=columns.id_column, title_column=columns.title_column,
                      abstract_column=abstract_column, year_column=columns.year_column,
                      label_column=columns.label_column)
    for found in std.issues:
        found["doc_id"] = std.frame["doc_id"].iloc[found["row"]]
    load_issues = pd.DataFrame(std.issues, columns=ISSUE_COLUMNS).astype({"row": "int64"})
    return _cut_long_abstracts(Corpus(std.frame, name=name or path.stem, source=str(path), load_issues=load_issues,
                                      notes=std.notes, where=std.where))


def _check_is_file(path: Path) -> None:
    """A `CorpusError` for a path that is not a file a corpus can be read from: none there, a folder (its
    corpus files named), or a pipe or device, whose reading would wait for a writer that may never come."""
    if path.is_dir():
        try:
            found = sorted(p.name for p in path.iterdir() if p.suffix.lower() in SUPPORTED_FORMATS)
        except OSError:  # a folder we may not list
            found = []
        inside = (f"; it holds {', '.join(found[:5])}" + (f" and {len(found) - 5} more" if len(found) > 5 else "")
                  if found else f"; it holds no corpus file (suffixes {', '.join(sorted(SUPPORTED_FORMATS))})")
        raise CorpusError(f"{path}: is a folder, not a corpus file; give the path of the export itself, e.g. "
                          f"{path / (found[0] if found else 'papers.csv')}{inside}")
    if not path.exists():
        raise CorpusError(f"{path}: no such file")
    if not path.is_file():
        raise CorpusError(f"{path}: is not a regular file (a pipe, socket or device), which a corpus cannot be "
                          "read from; save the export as a file and give its path")


_NAMED_CUTS = 10  # long abstracts named in a warning each; the rest in one (all are in the report)


def _cut_long_abstracts(corpus: Corpus, limit: int = MAX_ABSTRACT_CHARS) -> Corpus:
    """Cut every abstract longer than `limit` characters to its first `limit`, in place.

    Each cut is a very_long warning in `corpus.load_issues` (so `validate` keeps reporting
    it, with the original length) and a Python warning naming the paper's id and title.
    """
    docs = corpus.docs
    rows = [row for row, text in enumerate(docs["abstract"]) if isinstance(text, str) and len(text) > limit]
    if not rows:
        return corpus
    label = Path(corpus.source).name if corpus.source else corpus.name
    column = docs.columns.get_loc("abstract")
    found = []
    for n, row in enumerate(rows):
        text, doc_id, title = docs.iat[row, column], str(docs["doc_id"].iloc[row]), docs["title"].iloc[row]
        docs.iat[row, column] = text[:limit]
        found.append(make_issue(row, "abstract", "warning", "very_long",
                            f"abstract has {len(text):,} characters (limit {limit:,}); the stages read its "
                            f"first {limit:,}", doc_id=doc_id))
        if n < _NAMED_CUTS:
            warnings.warn(f"{label}: the abstract of doc_id {doc_id!r} (title {_clip(title, 80)!r}) has "
                          f"{len(text):,} characters; cut to its first {limit:,} (the validator's limit), "
                          "which every stage reads", stacklevel=3)
    if len(rows) > _NAMED_CUTS:
        warnings.warn(f"{label}: {len(rows) - _NAMED_CUTS} more abstracts over {limit:,} characters were cut "
                      "to that length; Corpus.validate() lists them (very_long)", stacklevel=3)
    parts = [frame for frame in (corpus.load_issues, pd.DataFrame(found, columns=ISSUE_COLUMNS)) if len(frame)]
    corpus.load_issues = (pd.concat(parts, ignore_index=True).astype({"row": "int64"})
                          .sort_values("row", kind="stable").reset_index(drop=True))
    return corpus


def text_or(value: Any, fallback: Any) -> str:
    """`value` as text, or `fallback` (as text) where it is missing: None, NaN, NA or blank.

    For optional columns such as ``summary_<aspect>``: ``x or title`` keeps a NaN, which
    is truthy and would become the text "nan".
    """
    if is_missing(value) or (isinstance(value, np.floating) and np.isnan(value)):
        value = None
    elif not str(value).strip():
        value = None
    if value is None:
        return "" if is_missing(fallback) else str(fallback)
    return str(value)


def load_aclsum(splits: Sequence[str] | None = None, *, name: str | None = None) -> Corpus:
    """ACLSum (Takeshita et al., 2024): 250 ACL papers with human aspect summaries.

    splits: any of "train" (100 papers), "validation" (50; "val" also accepted) and
    "test" (100); all three when None. A split may take a slice of its papers, in the
    data set's order: "test[:20]" (the first 20), "train[50:]" (Python slice rules).

    Columns: ``doc_id`` (ACL Anthology id), ``title``, ``abstract`` (the abstract's
    sentences joined by spaces, detokenised), ``split``, ``summary_challenge``, ``summary_approach``,
    ``summary_outcome`` (one human-written sentence per aspect) and
    ``highlights_challenge``, ``highlights_approach``, ``highlights_outcome`` (list[str]:
    the sentences annotators marked for that aspect, across abstract, introduction and
    conclusion, in order).

    The human summaries and highlights are evaluation ground truth: later stages must
    not train on them, and never on anything from the test split.
    """
    docs, source, default_name = aclsum_docs(splits)
    return Corpus(docs, name=name or default_name, source=source)
