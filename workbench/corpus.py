"""Corpora of scientific abstracts: loading, validation, subsetting and saving.

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
"""

from __future__ import annotations

import codecs
import csv
import functools
import hashlib
import html
import json
import math
import os
import re
import unicodedata
import warnings
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "SUPPORTED_FORMATS",
    "Corpus",
    "CorpusError",
    "ValidationReport",
    "aclsum_splits",
    "MAX_ABSTRACT_CHARS",
    "load_corpus",
    "text_or",
]

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
_FORMATS = sorted(set(SUPPORTED_FORMATS.values()))

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

# Placeholders that exports put where there is no abstract (Scopus: "[No abstract available]").
_PLACEHOLDER = re.compile(
    r"^\W*(no abstract( available)?|abstract not available|not available|n/?a|none|null|nan|-+)\W*$",
    re.IGNORECASE,
)

_ACLSUM_SPLITS = {"train": "train", "validation": "val", "test": "test"}  # ours -> package's
_ACLSUM_ALIASES = {"val": "validation", "dev": "validation"}
_ACLSUM_ASPECTS = ("challenge", "approach", "outcome")
_ACLSUM_SLICE = re.compile(r"^([\w-]+)(?:\[(\d*):(\d*)\])?$")  # "test", "test[:20]", "train[50:]"


#: The longest abstract the stages read: `load_corpus` cuts a longer one to this many
#: characters (with a warning naming the paper), and `Corpus.validate` reports it (very_long).
#: A 1 MB "abstract" (a whole paper pasted into the cell) would otherwise reach the encoders.
MAX_ABSTRACT_CHARS = 20000


class CorpusError(ValueError):
    """A corpus that cannot be loaded or used; the message names the file, row or field."""


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------
_ISSUE_COLUMNS = ["row", "doc_id", "field", "severity", "problem", "detail"]


def _empty_issues() -> pd.DataFrame:
    return pd.DataFrame(columns=_ISSUE_COLUMNS).astype({"row": "int64"})


def _issue(row: int, field: str, severity: str, problem: str, detail: str, doc_id: str = "") -> dict:
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

    issues: pd.DataFrame = field(default_factory=_empty_issues)
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
            lines.append(f"  {_plural(len(frame), severity)} in {_plural(docs, 'document')}: {parts}")
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
            f"{where}{_plural(len(errors), 'error')} in {errors['row'].nunique()} of "
            f"{_plural(self.n_docs, 'document')} "
            "(use Corpus.drop_invalid() to remove those rows):\n  " + "\n  ".join(lines) + more
        )

    def _repr_html_(self, limit: int = 50) -> str:
        rows = "".join(
            "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in issue) + "</tr>"
            for issue in self.issues.head(limit).itertuples(index=False)
        )
        more = (f"<p>... {len(self.issues) - limit} more issues</p>"
                if len(self.issues) > limit else "")
        header = "".join(f"<th>{c}</th>" for c in _ISSUE_COLUMNS)
        table = f"<table><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>" if rows else ""
        return f"<pre>{html.escape(self.summary())}</pre>{table}{more}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _describe_issue(issue: Any) -> str:
    return f"row {issue.row} (doc_id {issue.doc_id!r}): {issue.field}: {issue.problem} - {issue.detail}"


def _is_missing(value: Any) -> bool:
    """Scalar missing check that, unlike `pd.isna`, is safe on lists and arrays."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, float) and math.isnan(value)


def _short(value: Any, n: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def _validate(docs: pd.DataFrame, max_chars: int) -> list[dict]:
    issues: list[dict] = []

    def add(row: int, doc_id: str, field: str, severity: str, problem: str, detail: str) -> None:
        issues.append(_issue(row, field, severity, problem, detail, doc_id=doc_id))

    first_row_of_id: dict[str, int] = {}
    first_row_of_text: dict[str, int] = {}
    for row, (doc_id, title, abstract) in enumerate(
        zip(docs["doc_id"], docs["title"], docs["abstract"])
    ):
        doc_id = "" if _is_missing(doc_id) else str(doc_id)
        if not doc_id.strip():
            add(row, doc_id, "doc_id", "error", "missing_id", "document has no id")
        elif doc_id in first_row_of_id:
            add(row, doc_id, "doc_id", "error", "duplicate_id",
                f"same doc_id as row {first_row_of_id[doc_id]}")
        else:
            first_row_of_id[doc_id] = row

        if _is_missing(title) or (isinstance(title, str) and not title.strip()):
            add(row, doc_id, "title", "warning", "missing_title", "document has no title")
        elif not isinstance(title, str):
            add(row, doc_id, "title", "warning", "non_text",
                f"title is {type(title).__name__}, not text: {_short(title)}")

        if _is_missing(abstract):
            add(row, doc_id, "abstract", "error", "missing_abstract", "document has no abstract")
            continue
        if not isinstance(abstract, str):
            add(row, doc_id, "abstract", "error", "non_text",
                f"abstract is {type(abstract).__name__}, not text: {_short(abstract)}")
            continue
        normalised = " ".join(abstract.split())
        if not normalised:
            add(row, doc_id, "abstract", "error", "empty_abstract",
                "abstract is empty or whitespace only")
            continue
        if _PLACEHOLDER.match(normalised):
            add(row, doc_id, "abstract", "error", "placeholder_abstract",
                f"abstract is a placeholder, not text: {_short(normalised)}")
            continue
        if not any(ch.isalpha() for ch in normalised):
            add(row, doc_id, "abstract", "error", "no_letters",
                f"abstract has no letters: {_short(normalised)}")
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
    """

    docs: pd.DataFrame
    name: str = "corpus"
    source: str = ""
    load_issues: pd.DataFrame = field(default_factory=_empty_issues)
    notes: list[str] = field(default_factory=list)

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
        return ["" if _is_missing(v) else str(v) for v in self.docs["title"]]

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
        return Corpus(docs.reset_index(drop=True), name=self.name, source=self.source,
                      load_issues=issues.astype({"row": "int64"}), notes=list(self.notes))

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

        Errors: missing_id, duplicate_id (every occurrence after the first),
        missing_abstract, empty_abstract (whitespace only), non_text (a number, list...),
        placeholder_abstract ("[No abstract available]", "N/A"...), no_letters.
        Warnings: duplicate_text (same abstract, whitespace normalised, as an earlier row),
        very_long (more than `max_chars` characters), missing_title, non_text title.
        `load_corpus` already cut abstracts longer than `MAX_ABSTRACT_CHARS`; its very_long
        warning (with the original length) is among the loader's findings.
        The loader's findings (`load_issues`) come first for each row, e.g. the error
        malformed_row (a CSV row with the wrong number of fields) and the warnings
        missing_er, truncated_record, missing_ty, repeated_tag (RIS) and unparseable_year.
        """
        found = pd.DataFrame(_validate(self.docs, max_chars), columns=_ISSUE_COLUMNS)
        loaded = self.load_issues[self.load_issues["row"] < len(self)]  # docs replaced by hand
        parts = [frame for frame in (loaded, found) if len(frame)]
        issues = pd.concat(parts, ignore_index=True) if parts else _empty_issues()
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
                clean = {k: (None if _is_missing(v) else v) for k, v in record.items()}
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
            text = "\x00missing" if _is_missing(abstract) else str(abstract)
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
    text = "" if _is_missing(value) else str(value)
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
    id_column: str | None = None,
    title_column: str | None = None,
    abstract_column: str | None = None,
    year_column: str | None = None,
    label_column: str | None = None,
    name: str | None = None,
    encoding: str = "utf-8",
) -> Corpus:
    """Load a corpus from a file or from the packaged ACLSum data set.

    source: a path, or ``"aclsum"`` (all splits), ``"aclsum:test"``,
        ``"aclsum:train,validation"``, ``"aclsum:test[:20]"`` (see `load_aclsum`).
    format: one of csv, tsv, wos (Web of Science tab-delimited .txt), jsonl, json,
        parquet, ris, bibtex; taken from the suffix when not given.
    *_column: the source column for each standard column, when the automatic choice
        (case-insensitive, ignoring spaces and punctuation) is not right:
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
    kept unchanged. BibTeX titles and abstracts are converted from LaTeX to plain text.
    Nothing is dropped: what the loader found wrong (rows with the wrong number of fields,
    RIS records without ``ER``, repeated RIS tags, years that are not years) is reported
    by `Corpus.validate` with the file's line; then `Corpus.drop_invalid`.
    Raises `CorpusError` naming the file and line for files that cannot be read at all.
    """
    if isinstance(source, str) and (source == "aclsum" or source.startswith("aclsum:")):
        given = [k for k, v in {"id_column": id_column, "title_column": title_column,
                                "abstract_column": abstract_column, "year_column": year_column,
                                "label_column": label_column}.items() if v is not None]
        if given or format is not None:
            raise CorpusError(f"{source}: format= and column arguments do not apply to ACLSum ({given})")
        splits = source.partition(":")[2]
        return _cut_long_abstracts(load_aclsum(splits.split(",") if splits else None, name=name))

    path = Path(source)
    label = path.name
    if not path.exists():
        raise CorpusError(f"{path}: no such file")
    fmt = format.lower() if format else _format_from_suffix(path)
    if fmt not in _FORMATS:
        raise CorpusError(f"{label}: unknown format {fmt!r}; supported formats are {_FORMATS}")
    raw = _read(path, fmt, encoding)
    if len(raw.frame) == 0:
        raise CorpusError(f"{label}: no documents")
    docs, issues, notes = _standardise(raw, label, id_column=id_column, title_column=title_column,
                                       abstract_column=abstract_column, year_column=year_column,
                                       label_column=label_column)
    for found in issues:
        found["doc_id"] = docs["doc_id"].iloc[found["row"]]
    load_issues = pd.DataFrame(issues, columns=_ISSUE_COLUMNS).astype({"row": "int64"})
    return _cut_long_abstracts(Corpus(docs, name=name or path.stem, source=str(path), load_issues=load_issues,
                                      notes=notes))


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
        found.append(_issue(row, "abstract", "warning", "very_long",
                            f"abstract has {len(text):,} characters (limit {limit:,}); the stages read its "
                            f"first {limit:,}", doc_id=doc_id))
        if n < _NAMED_CUTS:
            warnings.warn(f"{label}: the abstract of doc_id {doc_id!r} (title {_clip(title, 80)!r}) has "
                          f"{len(text):,} characters; cut to its first {limit:,} (the validator's limit), "
                          "which every stage reads", stacklevel=3)
    if len(rows) > _NAMED_CUTS:
        warnings.warn(f"{label}: {len(rows) - _NAMED_CUTS} more abstracts over {limit:,} characters were cut "
                      "to that length; Corpus.validate() lists them (very_long)", stacklevel=3)
    parts = [frame for frame in (corpus.load_issues, pd.DataFrame(found, columns=_ISSUE_COLUMNS)) if len(frame)]
    corpus.load_issues = (pd.concat(parts, ignore_index=True).astype({"row": "int64"})
                          .sort_values("row", kind="stable").reset_index(drop=True))
    return corpus


def text_or(value: Any, fallback: Any) -> str:
    """`value` as text, or `fallback` (as text) where it is missing: None, NaN, NA or blank.

    For optional columns such as ``summary_<aspect>``: ``x or title`` keeps a NaN, which
    is truthy and would become the text "nan".
    """
    if _is_missing(value) or (isinstance(value, np.floating) and np.isnan(value)):
        value = None
    elif not str(value).strip():
        value = None
    if value is None:
        return "" if _is_missing(fallback) else str(fallback)
    return str(value)


def _option(name: str, example: str) -> str:
    """How to give a `load_corpus` argument, in Python and to `workbench validate`."""
    return f"{name}={example!r} (workbench validate --{name.replace('_', '-')} {example})"


def _read(path: Path, fmt: str, encoding: str) -> _Raw:
    """Run the reader for `fmt`, turning a wrong or unknown encoding into a `CorpusError`."""
    try:
        codecs.lookup(encoding)
    except LookupError as exc:
        raise CorpusError(f"{path.name}: unknown encoding {encoding!r}; pass "
                          f"{_option('encoding', 'latin-1')} or another Python codec name") from exc
    # utf-8-sig also reads plain UTF-8, and Web of Science / Excel exports start with a BOM.
    enc = "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding
    try:
        return _READERS[fmt](path, enc)
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{path.name}: not valid {encoding} (byte {exc.start}: {exc.reason}); pass the file's "
            f"encoding, e.g. {_option('encoding', 'latin-1')}"
        ) from exc


def _format_from_suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_FORMATS:
        raise CorpusError(
            f"{path.name}: unknown file type {suffix or '(no suffix)'!r}; supported suffixes are "
            f"{sorted(SUPPORTED_FORMATS)} (or pass {_option('format', 'csv')}, one of {_FORMATS})"
        )
    return SUPPORTED_FORMATS[suffix]


@dataclass
class _Raw:
    """What a reader found in a file: its records, and what was wrong with them.

    frame: one row per record, columns as in the file.
    where: per row, where it starts in the file ("line 3", "record starting on line 9"),
        for messages; empty for formats without lines (JSON list, Parquet).
    issues: `_issue` dicts, ``row`` being the position in `frame`.
    notes: sentences about the file as a whole.
    """

    frame: pd.DataFrame
    where: list[str] = field(default_factory=list)
    issues: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- delimited text -------------------------------------------------------------------
def _read_table(path: Path, encoding: str, sep: str, quoting: int = csv.QUOTE_MINIMAL) -> _Raw:
    """Read a delimited file; a row whose field count differs from the header's is kept
    (cut or padded to the header) and reported as a malformed_row error with its lines."""
    records = _csv_records(path, encoding, sep, quoting)
    if not records:
        return _Raw(pd.DataFrame())
    names = _column_names(records[0][2])
    rows, where, issues = [], [], []
    for row, (first, last, fields) in enumerate(records[1:]):
        lines = f"line {first}" if first == last else f"lines {first}-{last}"
        fields, problem = _fit_fields(fields, len(names), sep)
        if problem:
            issues.append(_issue(row, "row", "error", "malformed_row", f"{lines} {problem}"))
        rows.append(fields)
        where.append(lines)
    columns = list(zip(*rows)) if rows else [()] * len(names)
    # Everything as text so that ids keep leading zeros and "NA"/"None" stay words; only a
    # truly empty cell is missing, which is how an empty abstract shows up.
    frame = pd.DataFrame({name: pd.Series([v if v != "" else None for v in values], dtype=str)
                          for name, values in zip(names, columns)})
    return _Raw(frame, where, issues)


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


def _read_csv(path: Path, encoding: str) -> _Raw:
    return _read_table(path, encoding, ",")


def _read_tsv(path: Path, encoding: str) -> _Raw:
    return _read_table(path, encoding, "\t")


def _read_wos(path: Path, encoding: str) -> _Raw:
    with path.open(encoding=encoding) as f:
        first = f.readline()
    if first.startswith("FN "):
        raise CorpusError(f"{path.name}: this is a Web of Science plain-text export; export as "
                          "'Tab delimited file' or RIS instead")
    if not first.startswith("PT\t"):
        raise CorpusError(f"{path.name}: a .txt file is read only as a Web of Science tab-delimited "
                          f"export (header starting 'PT<tab>'); pass {_option('format', 'tsv')}, "
                          f"one of {_FORMATS}")
    # WoS does not quote fields, and abstracts contain quote characters.
    return _read_table(path, encoding, "\t", quoting=csv.QUOTE_NONE)


# -- JSON, Parquet --------------------------------------------------------------------
def _read_jsonl(path: Path, encoding: str) -> _Raw:
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
    return _Raw(pd.DataFrame.from_records(records), where)


def _read_json(path: Path, encoding: str) -> _Raw:
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
    return _Raw(pd.DataFrame.from_records(data))


def _read_parquet(path: Path, encoding: str) -> _Raw:
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow's errors have no common base worth naming
        raise CorpusError(f"{path.name}: cannot read Parquet ({exc})") from exc
    # Parquet gives list cells back as numpy arrays; lists compare and serialise plainly.
    for column in df.columns:
        if df[column].dtype == object:
            df[column] = [v.tolist() if isinstance(v, np.ndarray) else v for v in df[column]]
    return _Raw(df)


# -- RIS ------------------------------------------------------------------------------
_RIS_ABSTRACT_TAGS = ("AB", "N2")  # repeated, they are paragraphs of one abstract


@dataclass
class _RisChunk:
    """The lines of one RIS record, ``ER`` excluded, and how the record ended."""

    start: int                                   # line number of its first line
    lines: list[tuple[int, str]] = field(default_factory=list)
    end: str = "ER"                              # "ER", "TY" (a new record began) or "EOF"
    end_line: int = 0


def _read_ris(path: Path, encoding: str) -> _Raw:
    """Read RIS records with rispy's tag names, one record per ``TY``...``ER``.

    Repairs, each reported: a ``TY`` before the ``ER`` starts a new record (missing_er);
    a last record cut off by the end of the file is kept (truncated_record); tagged lines
    outside a record start one (missing_ty); repeated AB/N2 tags are joined as paragraphs
    and other repeated single tags keep their first value (repeated_tag). Records without
    a DO or ID tag get an id derived from their title and abstract.
    """
    import rispy

    parser = rispy.RisParser()
    lines = path.read_text(encoding=encoding).splitlines()
    chunks, stray = _ris_chunks(lines, parser)
    if not chunks and stray:
        raise CorpusError(f"{path.name}: no documents: no RIS record found (no line starts with "
                          "a tag such as 'TY  - ')")
    records, where, issues = [], [], []
    for row, chunk in enumerate(chunks):
        record, found = _ris_record(chunk, parser, path.name)
        records.append(record)
        where.append(f"record starting on line {chunk.start}")
        issues += [_issue(row, *args) for args in found]
    notes = [_stray_note(stray)] if stray else []
    if records:
        notes += _ris_ids(records, path.name)
    return _Raw(pd.DataFrame.from_records(records), where, issues, notes)


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
    return (f"{_plural(len(stray), 'line')} outside any RIS record (no tag, not between TY and ER) "
            f"{'was' if len(stray) == 1 else 'were'} not read: line {shown}")


def _ris_record(chunk: _RisChunk, parser: Any, label: str) -> tuple[dict, list[tuple]]:
    """The record of one chunk (rispy's names), and its issues as `_issue` arguments."""
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
            dropped = ", ".join(_short(f[2]) for f in repeats[1:])
            found.append((name, "warning", "repeated_tag",
                          f"{at}: the first value is kept, not {dropped}"))
    return found


def _ris_ids(records: list[dict], label: str) -> list[str]:
    """Set every record's doc_id (its DOI, else its ID tag, else derived from its text);
    return the note to make when some were derived."""
    derived = _content_ids([r.get("title") for r in records], [r.get("abstract") for r in records])
    n_derived = 0
    for record, content_id in zip(records, derived):
        given = record.get("doi") or record.get("id")
        n_derived += not given
        record["doc_id"] = given or content_id
    if not n_derived:
        return []
    note = f"{label}: {n_derived} of {_plural(len(records), 'record')} have no DO or ID tag, so their "
    return [note + _DERIVED_IDS]


# -- BibTeX ---------------------------------------------------------------------------
def _read_bibtex(path: Path, encoding: str) -> _Raw:
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
    return _Raw(pd.DataFrame.from_records(records), where)


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


_READERS = {
    "csv": _read_csv,
    "tsv": _read_tsv,
    "wos": _read_wos,
    "jsonl": _read_jsonl,
    "json": _read_json,
    "parquet": _read_parquet,
    "ris": _read_ris,
    "bibtex": _read_bibtex,
}


# -- standard columns -----------------------------------------------------------------
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


def _standardise(raw: _Raw, label: str, *, id_column, title_column, abstract_column,
                 year_column, label_column) -> tuple[pd.DataFrame, list[dict], list[str]]:
    """The corpus frame (standard columns first, then the rest), with the reader's issues
    and notes plus those found here (unparseable years, derived ids)."""
    frame = raw.frame
    columns = list(frame.columns)
    abstract_src = _pick(columns, abstract_column, _ABSTRACT_NAMES, "abstract", label)
    if abstract_src is None:
        raise CorpusError(f"{label}: no abstract column found; columns are {columns}; pass the "
                          f"column's name, e.g. {_option('abstract_column', 'NAME')}")
    id_src = _pick(columns, id_column, _ID_NAMES, "id", label)
    title_src = _pick(columns, title_column, _TITLE_NAMES, "title", label)
    year_src = _pick(columns, year_column, _YEAR_NAMES, "year", label)
    label_src = _pick(columns, label_column, _LABEL_NAMES, "label", label)

    n = len(frame)
    issues, notes = list(raw.issues), list(raw.notes)
    titles = ["" if _is_missing(v) else v for v in frame[title_src]] if title_src is not None else [""] * n
    # Raw values on purpose: validate() must be able to see numbers, lists and holes.
    abstracts = [None if _is_missing(v) else v for v in frame[abstract_src]]
    if id_src is not None:
        ids = [_id_str(v) for v in frame[id_src]]
    else:
        ids = _content_ids(titles, abstracts)
        notes.append(f"{label} has no id column, so each document's {_DERIVED_IDS}")
    standard: dict[str, pd.Series] = {
        "doc_id": pd.Series(ids, dtype=str),
        "title": pd.Series(titles, dtype=object),
        "abstract": pd.Series(abstracts, dtype=object),
    }
    if year_src is not None:
        years, year_issues = _years(frame[year_src], raw.where, year_src)
        standard["year"] = pd.Series(years, dtype="Int64")
        # The values of a row that was not read right are not worth a second complaint.
        misread = {found["row"] for found in raw.issues if found["severity"] == "error"}
        issues += [found for found in year_issues if found["row"] not in misread]
    if label_src is not None:
        standard["labels"] = pd.Series([_to_labels(v) for v in frame[label_src]], dtype=object)

    used = {id_src, title_src, abstract_src, label_src}
    if year_src is not None and "date" not in _norm(year_src):
        used.add(year_src)  # a date says more than its year, so it stays
    rest = frame[[c for c in columns if c not in used]].reset_index(drop=True)
    # A leftover column that happens to carry a standard name must not be overwritten.
    rest = rest.rename(columns={c: f"{c}_original" for c in rest.columns if c in _STANDARD})
    return pd.concat([pd.DataFrame(standard), rest], axis=1), issues, notes


def _id_str(value: Any) -> str:
    if _is_missing(value):
        return ""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))  # ids read as floats (a column with holes) lose the ".0"
    return str(value).strip()


_DERIVED_IDS = ("doc_id is derived from title and abstract ('h' + 12 hex digits of a SHA-1, "
                "case, spacing and punctuation ignored), which stays the same when records are "
                "added, removed or reordered in a new export; Corpus.id_table() lists doc_id and "
                f"title. To use a column of the file instead, pass {_option('id_column', 'NAME')}")


# Punctuation and spaces become one space: ASCII by a table (a regex with a match per
# space is slow on long abstracts), other characters by a regex that rarely matches.
_ASCII_NON_WORD = {c: " " for c in range(128) if not chr(c).isalnum()}
_OTHER_NON_WORD = re.compile(r"[^\w\x00-\x7f]+")


def _content_text(value: Any) -> str:
    """Text for a content id: NFKC, case-folded, letters and digits separated by single spaces."""
    if _is_missing(value):
        return ""
    text = unicodedata.normalize("NFKC", str(value)).casefold().translate(_ASCII_NON_WORD)
    if not text.isascii():
        text = _OTHER_NON_WORD.sub(" ", text)
    return " ".join(text.split())


def _content_ids(titles: Sequence[Any], abstracts: Sequence[Any]) -> list[str]:
    """``h`` + 12 hex digits of SHA-1(title, abstract) per document; repeats get -2, -3..."""
    seen: dict[str, int] = {}
    ids = []
    for title, abstract in zip(titles, abstracts):
        key = f"{_content_text(title)}\x1f{_content_text(abstract)}"
        base = "h" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]
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
    if _is_missing(value) or (isinstance(value, str) and not value.strip()):
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
            issues.append(_issue(row, "year", "warning", "unparseable_year",
                                 f"{at}{column} {_short(value)} is not a clean year (such as 2019, "
                                 "2019-05-01 or 2019/05), so the year is left empty; correct it "
                                 f"in the file, or pass {_option('year_column', 'NAME')}"))
            year = None
        years.append(pd.NA if year is None else year)
    return years, issues


def _to_labels(value: Any) -> list[str]:
    if isinstance(value, (list, tuple, np.ndarray)):
        return [str(v) for v in value if not _is_missing(v)]
    if _is_missing(value):
        return []
    # Exports join several keywords into one cell with ";".
    return [part.strip() for part in str(value).split(";") if part.strip()]


# --------------------------------------------------------------------------------------
# ACLSum
# --------------------------------------------------------------------------------------
def aclsum_splits() -> list[str]:
    """The ACLSum splits `load_corpus("aclsum:<splits>")` accepts: train, validation, test."""
    return list(_ACLSUM_SPLITS)


_SPACE_BEFORE = re.compile(r"\s+([,.;:!?%)\]}]|'s\b|n't\b|'re\b|'ve\b|'ll\b|'d\b)")
_SPACE_AFTER = re.compile(r"([(\[{])\s+")


def detokenize(text: str) -> str:
    """Undo PTB-style tokenisation ("models ( QE ) , not" -> "models (QE), not").

    ACLSum ships its sentences tokenised; LLMs and encoders read natural text better.
    """
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text)).replace(" - ", "-").replace("`` ", '"').replace(" ''", '"')


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
    from aclsum import ACLSum

    parsed = []
    for given in (splits or _ACLSUM_SPLITS):
        found = _ACLSUM_SLICE.match(given.strip().lower())
        if not found:
            raise CorpusError(f"aclsum: {given!r} is not a split or a split with a slice such as 'test[:20]'")
        split, start, stop = found.groups()  # start, stop: None without a slice or a bound
        split = _ACLSUM_ALIASES.get(split, split)
        if split not in _ACLSUM_SPLITS:
            raise CorpusError(f"aclsum: unknown split {split!r}; splits are {aclsum_splits()}")
        parsed.append((split, (int(start) if start else None, int(stop) if stop else None)))
    parsed = list(dict.fromkeys(parsed))  # "train,train" must not load twice
    if len({s for s, _ in parsed}) < len(parsed):
        raise CorpusError(f"aclsum: a split named twice with different slices: {splits}")
    wanted = [s + (f"[{a or ''}:{b or ''}]" if (a, b) != (None, None) else "") for s, (a, b) in parsed]

    rows = []
    for split, (start, stop) in parsed:
        for doc in ACLSum(_ACLSUM_SPLITS[split]).documents[start:stop]:
            row = {"doc_id": doc.id, "title": doc.title,
                   "abstract": detokenize(" ".join(doc.sentences["abstract"])), "split": split}
            for aspect in _ACLSUM_ASPECTS:
                row[f"summary_{aspect}"] = doc.summaries[aspect]
            for aspect in _ACLSUM_ASPECTS:
                row[f"highlights_{aspect}"] = [detokenize(t) for t in doc.get_all_highlighted_sentences(aspect)]
            rows.append(row)
    docs = pd.DataFrame(rows)
    docs["doc_id"] = docs["doc_id"].astype(str)
    docs["title"] = docs["title"].astype(object)
    docs["abstract"] = docs["abstract"].astype(object)
    source = "aclsum:" + ",".join(wanted)
    default_name = "aclsum" if wanted == list(_ACLSUM_SPLITS) else "aclsum-" + "-".join(wanted)
    return Corpus(docs, name=name or default_name, source=source)
