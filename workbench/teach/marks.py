"""The marks: which aspects a sentence states, by paper id and sentence text, each kept with its source.

A mark answers one question about one sentence of one paper: the aspects it states (one or several), "none"
(it states no aspect) or "skip" (the person would not say; it trains nothing but was asked). Its source says
who answered: a person in the workbench, a `highlights_<aspect>` column of the corpus, or an LLM's sentence
label. They are one kind of evidence; where sources disagree about a sentence, a person's answer wins over a
highlight column's, which wins over an LLM's, and within a source the latest answer wins (a person may change
their mind).

Marks are keyed by paper id and sentence text (whitespace folded), never by row or sentence index, so they
survive a re-export of the corpus with the same ids, a reordering, and papers added or removed. In a run
directory they are an append-only JSON-lines file (`RunDir.marks`, through `core.store.RecordStore`: each
answer is on disk, fsynced, before `add` returns; a torn last line from a crash is cut off; nothing is pickled),
so they survive a kernel restart. A CSV of marks (doc_id, sentence, aspect, source; one row per aspect of a
sentence) exports and imports, cells a spreadsheet would run as formulas guarded as `data/writers.py` does.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.files import write_text
from ..core.rundir import RunDir
from ..core.store import RecordStore
from ..data.sentences import match_highlights, split_sentences
from ..data.writers import guard_formula, unguard_formula

NONE, SKIP = "none", "skip"  # the two answers that are not an aspect
SOURCES = ("person", "highlights", "llm")  # first wins where two sources answer the same sentence
CSV_COLUMNS = ("doc_id", "sentence", "aspect", "source")
KEY_FIELDS = ("doc_id", "sentence", "source", "at")  # every answer is a record; the latest of a source counts


def sentence_key(text: str) -> str:
    """A sentence as marks know it: its words with whitespace folded (a re-flowed export is the same sentence)."""
    return " ".join(str(text).split())


@dataclass(frozen=True)
class Mark:
    """One answer about one sentence: `aspects` it states (empty: none), or `skipped`."""
    doc_id: str
    sentence: str
    aspects: tuple[str, ...] = ()
    skipped: bool = False
    source: str = "person"

    @property
    def answer(self) -> str:
        """The answer in words: the aspects joined by "+", "none" or "skip"."""
        return SKIP if self.skipped else "+".join(self.aspects) if self.aspects else NONE

    def states(self, aspect: str) -> bool:
        return aspect in self.aspects


def parse_answer(answer) -> tuple[tuple[str, ...], bool]:
    """(aspects, skipped) of an answer: an aspect's name, "none", "skip", or several aspects (a list, or names
    joined by "+")."""
    items = [answer] if isinstance(answer, str) else list(answer)
    names = [n.strip() for item in items for n in str(item).split("+") if n.strip()]
    if names == [SKIP]:
        return (), True
    if names == [NONE] or not names:
        return (), False
    if NONE in names or SKIP in names:
        raise ValueError(f"an answer is aspects, {NONE!r} or {SKIP!r}, not a mix of them: {answer!r}")
    return tuple(sorted(set(names))), False


class Marks:
    """Every mark of a run: in memory (`path` None) or in an append-only JSON-lines file (`Marks.of_run`)."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = None if path is None else Path(path)
        self.store = None if path is None else RecordStore(self.path, KEY_FIELDS)
        self.latest: dict[tuple[str, str, str], Mark] = {}
        self.order: list[tuple[str, str]] = []  # sentences in the order first answered
        for record in [] if self.store is None else self.store.records():
            self.take(record)

    @classmethod
    def of_run(cls, run_dir) -> "Marks":
        """The marks kept in a run directory (none yet: an empty store that creates the file on the first mark)."""
        return cls(RunDir(run_dir).marks)

    def take(self, record: dict) -> None:
        aspects = tuple(record.get("aspects") or ())
        mark = Mark(str(record["doc_id"]), record["sentence"], aspects, bool(record.get("skip")), record["source"])
        key = (mark.doc_id, mark.sentence)
        if key not in {k[:2] for k in self.latest}:
            self.order.append(key)
        self.latest[(*key, mark.source)] = mark

    def add(self, doc_id, sentence: str, answer, source: str = "person") -> Mark:
        """Keep one answer (see `parse_answer`); on disk before this returns where the marks have a file."""
        return self.add_many([(doc_id, sentence, answer)], source)[0]

    def add_many(self, answers: Iterable[tuple], source: str = "person") -> list[Mark]:
        """Keep several answers (doc_id, sentence, answer) in one write."""
        if source not in SOURCES:
            raise ValueError(f"unknown source {source!r}; the sources are {list(SOURCES)}")
        records = []
        for doc_id, sentence, answer in answers:
            aspects, skipped = parse_answer(answer)
            # time_ns plus the batch index: two answers in one batch, or in one clock tick, stay two records
            records.append({"doc_id": str(doc_id), "sentence": sentence_key(sentence), "aspects": list(aspects),
                            "skip": skipped, "source": source, "at": time.time_ns() + len(records)})
        if self.store is not None:
            self.store.append(records)
        for record in records:
            self.take(record)
        return [self.latest[(r["doc_id"], r["sentence"], source)] for r in records]

    def current(self) -> list[Mark]:
        """One mark per sentence answered: its most trusted source's latest answer, in the order first answered."""
        out = []
        for doc_id, sentence in self.order:
            out.append(next(self.latest[(doc_id, sentence, s)] for s in SOURCES
                            if (doc_id, sentence, s) in self.latest))
        return out

    def __len__(self) -> int:
        return len(self.order)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return (str(key[0]), sentence_key(key[1])) in set(self.order)

    def counts(self, aspects: Iterable[str]) -> dict[str, dict[str, int]]:
        """Per aspect: how many answered sentences state it ("yes"), how many do not ("no": another aspect or
        none), skips left out."""
        marks = [m for m in self.current() if not m.skipped]
        return {a: {"yes": sum(m.states(a) for m in marks), "no": sum(not m.states(a) for m in marks)}
                for a in aspects}

    # -- sharing -------------------------------------------------------------------
    def to_csv(self, path: str | os.PathLike | None = None) -> str:
        """The marks as CSV (one row per aspect a sentence states; "none" or "skip" in the aspect column), each
        source's latest answer, written to `path` where given; returns the text."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for mark in self.latest.values():  # every source's latest answer: what a colleague's import needs
            for aspect in mark.aspects or (mark.answer,):
                writer.writerow([guard_formula(v) for v in (mark.doc_id, mark.sentence, aspect, mark.source)])
        text = out.getvalue()
        if path is not None:
            write_text(path, text)
        return text

    def read_csv(self, path: str | os.PathLike, source: str | None = None, aspects: Sequence[str] | None = None) -> int:
        """Add the marks of a CSV (`to_csv`'s columns; without a source column, or with `source` given, they are
        that source's, else a person's). Returns how many sentences it answered. With `aspects` (the run's), a
        row naming another aspect (a typo, another run's aspect set) refuses the whole file, by line: read as
        no aspect of this run, its sentence would teach every aspect that it states none of them."""
        grouped: dict[tuple[str, str, str], list[str]] = {}
        try:
            with open(path, newline="", encoding="utf-8-sig") as fh:
                header = fh.readline()
                fh.seek(0)
                # A spreadsheet set to a European locale saves with semicolons; a tab-separated export has tabs.
                delimiter = max(",;\t", key=header.count) if header.strip() else ","
                rows = list(csv.DictReader(fh, delimiter=delimiter))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8 CSV") from None
        missing = {"doc_id", "sentence", "aspect"} - set(rows[0] if rows else CSV_COLUMNS)
        if missing:
            raise ValueError(f"{path}: a CSV of marks needs the columns doc_id, sentence and aspect "
                             f"(missing: {sorted(missing)})")
        known, bad = set(aspects or ()) | {NONE, SKIP}, []
        for line, row in enumerate(rows, start=2):  # line 1: the header
            if any(row.get(c) is None for c in ("doc_id", "sentence", "aspect")):
                bad.append(f"line {line}: fewer fields than the header")
                continue
            answer = unguard_formula(row["aspect"])
            unknown = [n for n in answer.split("+") if n.strip() and n.strip() not in known]
            if aspects is not None and unknown:
                bad.append(f"line {line}: {', '.join(map(repr, unknown))}")
            origin = source or unguard_formula(row.get("source") or "") or "person"
            key = (unguard_formula(row["doc_id"]), sentence_key(unguard_formula(row["sentence"])), origin)
            grouped.setdefault(key, []).append(answer)
        if bad:
            raise ValueError(f"{path}: no mark read; {len(bad)} row(s) name no aspect of this run "
                             f"({', '.join(aspects or ())}, or {NONE}, {SKIP}) or are short: " + "; ".join(bad[:5])
                             + (" ..." if len(bad) > 5 else ""))
        for origin in dict.fromkeys(k[2] for k in grouped):
            self.add_many([(d, s, a) for (d, s, o), a in grouped.items() if o == origin], origin)
        return len(grouped)

    def close(self) -> None:
        """Release the file's writer lock (also released when the process ends)."""
        if self.store is not None:
            self.store.close()


def highlight_answers(doc_ids, abstracts, highlights: dict[str, list]) -> list[tuple[str, str, list[str]]]:
    """(doc_id, sentence, aspects) for each sentence of each abstract, from a corpus's `highlights_<aspect>`
    columns (`highlights`: {aspect: per paper its highlighted sentences}, as `load_corpus` reads them): the
    aspects whose highlights the sentence matches (`data.sentences.match_highlights`), none where it matches
    none. A paper without a list in every aspect's column is left out: a missing highlight is not a "none".
    Keep them with `Marks.add_many(..., source="highlights")`."""
    out = []
    for i, (doc_id, abstract) in enumerate(zip(doc_ids, abstracts)):
        marked = {a: column[i] for a, column in highlights.items()}
        if not all(isinstance(v, (list, tuple)) or hasattr(v, "tolist") for v in marked.values()):
            continue
        sentences = split_sentences(str(abstract))
        stated = {a: match_highlights(sentences, [str(t) for t in v]) for a, v in marked.items()}
        out += [(str(doc_id), text, [a for a in stated if stated[a][k] >= 0.5]) for k, text in enumerate(sentences)]
    return out
