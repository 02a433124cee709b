"""Corpora of scientific abstracts: loading, validation, subsetting and saving.

A `Corpus` is a pandas DataFrame with one row per document and three required columns,
``doc_id`` (str), ``title`` (str, may be "") and ``abstract``, plus optional ``year``
(Int64) and ``labels`` (list[str]); every other column of the source is kept as metadata.

    >>> corpus = load_corpus("scopus.csv")          # or .tsv .jsonl .json .parquet .ris .bib
    >>> report = corpus.validate()                   # look before you drop
    >>> corpus, dropped = corpus.drop_invalid(report)
    >>> small = corpus.subset(200, seed=0)

Loaders never drop or repair documents: a missing abstract stays missing so that
`Corpus.validate` can point at it. Dropping is an explicit step (`Corpus.drop_invalid`)
that returns the report of what it removed.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

__all__ = [
    "Corpus",
    "CorpusError",
    "ValidationReport",
    "aclsum_splits",
    "load_corpus",
    "SUPPORTED_FORMATS",
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


class CorpusError(ValueError):
    """A corpus that cannot be loaded or used; the message names the file, row or field."""


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------
_ISSUE_COLUMNS = ["row", "doc_id", "field", "severity", "problem", "detail"]


@dataclass
class ValidationReport:
    """Problems found in a corpus, one row per (document, problem).

    `issues` has the columns ``row`` (0-based position in the corpus, which for a freshly
    loaded corpus is the order of the source file), ``doc_id``, ``field``, ``severity``
    ("error" | "warning"), ``problem`` (a short code such as "missing_abstract") and
    ``detail`` (a sentence for people).

    Errors make a document unusable (`Corpus.drop_invalid` removes those rows); warnings
    are worth a look but the document is kept.
    """

    issues: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=_ISSUE_COLUMNS))
    n_docs: int = 0
    source: str = ""

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
        if self.issues.empty:
            return f"{head}: no problems found."
        lines = [f"{head}:"]
        for severity, frame in (("error", self.errors), ("warning", self.warnings)):
            if frame.empty:
                continue
            counts = frame["problem"].value_counts(sort=False)
            parts = ", ".join(f"{n} {problem}" for problem, n in counts.items())
            docs = frame["row"].nunique()
            lines.append(f"  {_plural(len(frame), severity)} in {_plural(docs, 'document')}: {parts}")
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
        issues.append(dict(row=row, doc_id=doc_id, field=field, severity=severity,
                           problem=problem, detail=detail))

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
    """

    docs: pd.DataFrame
    name: str = "corpus"
    source: str = ""

    def __post_init__(self) -> None:
        missing = [c for c in ("doc_id", "title", "abstract") if c not in self.docs.columns]
        if missing:
            raise CorpusError(
                f"Corpus {self.name!r}: docs lacks the column(s) {missing}; "
                f"columns are {list(self.docs.columns)}"
            )
        # Positions are the row numbers used in reports, so the index must match them.
        self.docs = self.docs.reset_index(drop=True)

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

        The abstracts are what gets embedded, so a hole must not pass silently: call
        `drop_invalid()` first on a corpus that `validate()` does not pass.
        """
        bad = [i for i, v in enumerate(self.docs["abstract"]) if not isinstance(v, str)]
        if bad:
            raise CorpusError(
                f"Corpus {self.name!r}: {len(bad)} abstracts are missing or not text "
                f"(rows {bad[:10]}); call drop_invalid() first"
            )
        return list(self.docs["abstract"])

    def titles(self) -> list[str]:
        """Titles in corpus order ("" where there is none)."""
        return ["" if _is_missing(v) else str(v) for v in self.docs["title"]]

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

    def _with_docs(self, docs: pd.DataFrame) -> "Corpus":
        return Corpus(docs.reset_index(drop=True), name=self.name, source=self.source)

    def subset(
        self,
        n: int | None = None,
        *,
        ids: Iterable[str] | None = None,
        seed: int = 0,
        where: str | pd.Series | Sequence[bool] | None = None,
    ) -> "Corpus":
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

    def validate(self, max_chars: int = 20000) -> ValidationReport:
        """Check every document; see `ValidationReport` for the problems looked for.

        Errors: missing_id, duplicate_id (every occurrence after the first),
        missing_abstract, empty_abstract (whitespace only), non_text (a number, list...),
        placeholder_abstract ("[No abstract available]", "N/A"...), no_letters.
        Warnings: duplicate_text (same abstract, whitespace normalised, as an earlier row),
        very_long (more than `max_chars` characters), missing_title, non_text title.
        """
        issues = pd.DataFrame(_validate(self.docs, max_chars), columns=_ISSUE_COLUMNS)
        issues = issues.astype({"row": "int64"})
        return ValidationReport(issues, n_docs=len(self), source=self.source or self.name)

    def drop_invalid(self, report: ValidationReport | None = None) -> tuple["Corpus", ValidationReport]:
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
            digest.update(f"{doc_id}\x1f{text}\x1e".encode("utf-8"))
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
        ``"aclsum:train,validation"`` (see `load_aclsum`).
    format: one of csv, tsv, wos (Web of Science tab-delimited .txt), jsonl, json,
        parquet, ris, bibtex; taken from the suffix when not given.
    *_column: the source column for each standard column, when the automatic choice
        (case-insensitive, ignoring spaces and punctuation) is not right:
        id (doc_id, id, paper_id, EID, UT, PMID, Key, DOI...), title (title, TI,
        Article Title...), abstract (abstract, AB, Abstract Note, summary, text), year
        (year, PY, Publication Year, date), labels (only "labels"/"label" unless given).
        Without an id column, ids are ``doc-00000``, ``doc-00001``... by row.

    The mapped source columns become ``doc_id``, ``title``, ``abstract``, ``year``,
    ``labels`` (a date column used for the year is kept as well); all other columns are
    kept unchanged. Nothing is dropped: run `Corpus.validate` / `Corpus.drop_invalid`.
    Raises `CorpusError` naming the file and line for unreadable files.
    """
    if isinstance(source, str) and (source == "aclsum" or source.startswith("aclsum:")):
        given = [k for k, v in dict(id_column=id_column, title_column=title_column,
                                     abstract_column=abstract_column, year_column=year_column,
                                     label_column=label_column).items() if v is not None]
        if given or format is not None:
            raise CorpusError(f"{source}: format= and column arguments do not apply to ACLSum ({given})")
        splits = source.partition(":")[2]
        return load_aclsum(splits.split(",") if splits else None, name=name)

    path = Path(source)
    label = path.name
    if not path.exists():
        raise CorpusError(f"{path}: no such file")
    fmt = format.lower() if format else _format_from_suffix(path)
    if fmt not in _FORMATS:
        raise CorpusError(f"{label}: unknown format {fmt!r}; supported formats are {_FORMATS}")
    # utf-8-sig also reads plain UTF-8, and Web of Science / Excel exports start with a BOM.
    enc = "utf-8-sig" if encoding.lower().replace("_", "-") in ("utf-8", "utf8") else encoding

    try:
        raw = _READERS[fmt](path, enc)
    except UnicodeDecodeError as exc:
        raise CorpusError(
            f"{label}: not valid {encoding} (byte {exc.start}: {exc.reason}); pass encoding=, "
            "e.g. encoding='latin-1'"
        ) from exc
    if len(raw) == 0:
        raise CorpusError(f"{label}: no documents")
    docs = _standardise(raw, label, id_column=id_column, title_column=title_column,
                        abstract_column=abstract_column, year_column=year_column,
                        label_column=label_column)
    return Corpus(docs, name=name or path.stem, source=str(path))


def _format_from_suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_FORMATS:
        raise CorpusError(
            f"{path.name}: unknown file type {suffix or '(no suffix)'!r}; supported suffixes are "
            f"{sorted(SUPPORTED_FORMATS)} (or pass format= one of {_FORMATS})"
        )
    return SUPPORTED_FORMATS[suffix]


def _read_table(path: Path, encoding: str, sep: str, quoting: int = csv.QUOTE_MINIMAL) -> pd.DataFrame:
    try:
        # Everything as text so that ids keep leading zeros and "NA"/"None" stay words;
        # only a truly empty cell is missing, which is how an empty abstract shows up.
        return pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, na_values=[""],
                           encoding=encoding, quoting=quoting,
                           # Rows ending in a trailing delimiter (WoS does this) must not
                           # turn the first column into the index.
                           index_col=False)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except pd.errors.ParserError as exc:
        raise CorpusError(f"{path.name}: malformed {'CSV' if sep == ',' else 'tab-separated'} "
                          f"file: {str(exc).strip()}") from exc


def _read_csv(path: Path, encoding: str) -> pd.DataFrame:
    return _read_table(path, encoding, ",")


def _read_tsv(path: Path, encoding: str) -> pd.DataFrame:
    return _read_table(path, encoding, "\t")


def _read_wos(path: Path, encoding: str) -> pd.DataFrame:
    with path.open(encoding=encoding) as f:
        first = f.readline()
    if first.startswith("FN "):
        raise CorpusError(f"{path.name}: this is a Web of Science plain-text export; export as "
                          "'Tab delimited file' or RIS instead")
    if not first.startswith("PT\t"):
        raise CorpusError(f"{path.name}: a .txt file is read only as a Web of Science tab-delimited "
                          f"export (header starting 'PT<tab>'); pass format= one of {_FORMATS}")
    # WoS does not quote fields, and abstracts contain quote characters.
    return _read_table(path, encoding, "\t", quoting=csv.QUOTE_NONE)


def _read_jsonl(path: Path, encoding: str) -> pd.DataFrame:
    records = []
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
    return pd.DataFrame.from_records(records)


def _read_json(path: Path, encoding: str) -> pd.DataFrame:
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
    return pd.DataFrame.from_records(data)


def _read_parquet(path: Path, encoding: str) -> pd.DataFrame:
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow's errors have no common base worth naming
        raise CorpusError(f"{path.name}: cannot read Parquet ({exc})") from exc
    # Parquet gives list cells back as numpy arrays; lists compare and serialise plainly.
    for column in df.columns:
        if df[column].dtype == object:
            df[column] = [v.tolist() if isinstance(v, np.ndarray) else v for v in df[column]]
    return df


def _read_ris(path: Path, encoding: str) -> pd.DataFrame:
    import rispy

    try:
        entries = rispy.load(path, encoding=encoding)
    except (IOError, ValueError) as exc:
        raise CorpusError(f"{path.name}: malformed RIS file ({exc})") from exc
    records = []
    for i, entry in enumerate(entries):
        record = dict(entry)
        # Exporters differ in tags: EndNote writes T1/N2/Y1 where Zotero writes TI/AB/PY.
        record.setdefault("title", record.get("primary_title"))
        record.setdefault("abstract", record.get("notes_abstract"))
        record.setdefault("year", record.get("publication_year"))
        record["doc_id"] = record.get("doi") or record.get("id") or f"doc-{i:05d}"
        records.append(record)
    return pd.DataFrame.from_records(records)


def _read_bibtex(path: Path, encoding: str) -> pd.DataFrame:
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
    records = []
    for entry in entries:
        record: dict[str, Any] = {"doc_id": entry.key, "entry_type": entry.entry_type}
        for key, fld in entry.fields_dict.items():
            value = fld.value
            if key.lower() in ("title", "abstract") and isinstance(value, str):
                value = _strip_latex(value)
            record[key.lower()] = value
        records.append(record)
    return pd.DataFrame.from_records(records)


def _strip_latex(text: str) -> str:
    """Remove case-protecting braces ({BERT} -> BERT), common escapes and line breaks."""
    text = re.sub(r"(?<!\\)[{}]", "", text)
    text = re.sub(r"\\([&%_$#{}])", r"\1", text)
    return " ".join(text.split())


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


def _standardise(raw: pd.DataFrame, label: str, *, id_column, title_column, abstract_column,
                 year_column, label_column) -> pd.DataFrame:
    columns = list(raw.columns)
    abstract_src = _pick(columns, abstract_column, _ABSTRACT_NAMES, "abstract", label)
    if abstract_src is None:
        raise CorpusError(f"{label}: no abstract column found; columns are {columns}; "
                          "pass abstract_column=")
    id_src = _pick(columns, id_column, _ID_NAMES, "id", label)
    title_src = _pick(columns, title_column, _TITLE_NAMES, "title", label)
    year_src = _pick(columns, year_column, _YEAR_NAMES, "year", label)
    label_src = _pick(columns, label_column, _LABEL_NAMES, "label", label)

    n = len(raw)
    standard: dict[str, pd.Series] = {
        "doc_id": pd.Series([_id_str(v) for v in raw[id_src]] if id_src is not None
                            else [f"doc-{i:05d}" for i in range(n)], dtype=str),
        "title": pd.Series(["" if _is_missing(v) else v for v in raw[title_src]] if title_src is not None
                           else [""] * n, dtype=object),
        # Raw values on purpose: validate() must be able to see numbers, lists and holes.
        "abstract": pd.Series([None if _is_missing(v) else v for v in raw[abstract_src]], dtype=object),
    }
    if year_src is not None:
        standard["year"] = pd.Series([_to_year(v) for v in raw[year_src]], dtype="Int64")
    if label_src is not None:
        standard["labels"] = pd.Series([_to_labels(v) for v in raw[label_src]], dtype=object)

    used = {id_src, title_src, abstract_src, label_src}
    if year_src is not None and "date" not in _norm(year_src):
        used.add(year_src)  # a date says more than its year, so it stays
    rest = raw[[c for c in columns if c not in used]].reset_index(drop=True)
    # A leftover column that happens to carry a standard name must not be overwritten.
    rest = rest.rename(columns={c: f"{c}_original" for c in rest.columns if c in _STANDARD})
    return pd.concat([pd.DataFrame(standard), rest], axis=1)


def _id_str(value: Any) -> str:
    if _is_missing(value):
        return ""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))  # ids read as floats (a column with holes) lose the ".0"
    return str(value).strip()


def _to_year(value: Any) -> Any:
    if _is_missing(value) or isinstance(value, bool):
        return pd.NA
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return int(value) if math.isfinite(value) else pd.NA
    match = re.search(r"(?<!\d)(\d{4})(?!\d)", str(value))  # "2019", "2019///", "2019-05-01"
    return int(match.group(1)) if match else pd.NA


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
    "test" (100); all three when None.

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

    wanted = [s.strip().lower() for s in (splits or _ACLSUM_SPLITS)]
    wanted = [_ACLSUM_ALIASES.get(s, s) for s in wanted]
    unknown = [s for s in wanted if s not in _ACLSUM_SPLITS]
    if unknown:
        raise CorpusError(f"aclsum: unknown split(s) {unknown}; splits are {aclsum_splits()}")
    wanted = list(dict.fromkeys(wanted))  # "train,train" must not load twice

    rows = []
    for split in wanted:
        for doc in ACLSum(_ACLSUM_SPLITS[split]).documents:
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
    default_name = "aclsum" if len(wanted) == len(_ACLSUM_SPLITS) else "aclsum-" + "-".join(wanted)
    return Corpus(docs, name=name or default_name, source=source)
