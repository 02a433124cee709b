"""Views: the texts that describe one aspect of one document, the training pairs of stage 02.

A view is any short text that states an aspect of a paper: each usable LLM summary of
the store, and, where a corpus carries them (ACLSum does), the human-written aspect
summary (`summary_<aspect>` column) and the highlighted sentences (`highlights_<aspect>`).
Two different views of the same (document, aspect) are a positive pair.

Papers of held-out splits (by default ACLSum's "test" split) are stage 06's evaluation
papers: no view of them is returned here, neither their human summaries (the ground truth)
nor LLM summaries of them, so no model is trained on them. `collect_views` drops them, not
the caller; `trainable(corpus)` is the part of a corpus stage 01 summarises.
"""

from __future__ import annotations

import hashlib
import json
import random
import warnings
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import pandas as pd

from .summaries import summaries_frame
from ..core.rundir import RunDir

HELD_OUT_SPLITS = ("test",)
UNSEEN_LABELLED = 300  # labelled papers kept for stage 06 alone (`labelled_held_out`)
MIN_UNSEEN_LABELLED = 30  # fewer: none are kept aside (Table 2 on so few papers says little, and training needs them)
HUMAN_EXCLUDED_SPLITS = HELD_OUT_SPLITS  # the former name


def held_out_ids(corpus, splits=HELD_OUT_SPLITS) -> set[str]:
    """The ids of the papers no stage but 06 reads: those of held-out splits (`held_out_split_ids`) and
    `labelled_held_out`."""
    held = held_out_split_ids(corpus, splits)
    return held | labelled_held_out(corpus)


def held_out_split_ids(corpus, splits=HELD_OUT_SPLITS) -> set[str]:
    """The ids of the corpus's papers in held-out splits, where stage 06 evaluates instead of the validation papers.

    None without a `split` column, and none when every paper is in a held-out split
    (``aclsum:test`` alone): then the user chose those papers to work with, and stage 06
    evaluates on the run's validation papers as for any corpus without a split.
    """
    docs = corpus.docs
    if "split" not in docs or not splits:
        return set()
    held = docs["split"].isin(splits)
    return set() if held.all() else set(docs.loc[held, "doc_id"].astype(str))


def labelled_held_out(corpus, n: int = UNSEEN_LABELLED) -> set[str]:
    """Papers with a `label_<aspect>` value kept from stages 01-05, for stage 06's Table 2 against the labels.

    Without them, a run that summarises the whole corpus (`subset: null`) trains on or checks every
    labelled paper, and Table 2 rests on the few dozen validation papers. Up to `n`, at most a third
    of the labelled papers, and none where that third is under MIN_UNSEEN_LABELLED (a small corpus
    needs its papers to train). Chosen by a hash of each id, not by position: a re-export in another
    order, or with papers added, keeps a paper on the side it was on (unless the count changes).
    """
    docs = corpus.docs
    labels = [c for c in docs.columns if str(c).startswith("label_")]
    if not labels:
        return set()
    exclude = held_out_split_ids(corpus)  # papers of a held-out split are stage 06's already
    labelled = [d for d, ok in zip(docs["doc_id"].astype(str), docs[labels].notna().any(axis=1)) if ok
                and d not in exclude]
    take = min(int(n), len(labelled) // 3)
    if take < MIN_UNSEEN_LABELLED:
        return set()
    return set(sorted(labelled, key=lambda d: hashlib.sha1(d.encode("utf-8")).hexdigest())[:take])


def sample_in_order(ids: list[str], n: int, seed: int = 0) -> list[str]:
    """A seeded sample of up to `n` of `ids`, in their order (a list of papers reads as the corpus file does)."""
    if n <= 0 or not ids:
        return []
    picked = set(np.random.default_rng(seed).choice(len(ids), min(int(n), len(ids)), replace=False).tolist())
    return [d for k, d in enumerate(ids) if k in picked]


def trainable(corpus, splits=HELD_OUT_SPLITS):
    """The corpus without its held-out papers: what stage 01 summarises for training."""
    held = held_out_ids(corpus, splits)
    return corpus.subset(ids=[d for d in corpus.ids if d not in held]) if held else corpus


@dataclass
class AspectViews:
    """All views of one aspect: {doc_id: [text, ...]}, with where each came from."""

    aspect: str
    views: dict[str, list[str]] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)  # parallel to views: "llm", "human", "highlight"

    def add(self, doc_id: str, text: str, source: str) -> None:
        """Add a view, skipping empty and exactly repeated texts (a repeat is no new information)."""
        text = " ".join(str(text).split())
        if not text or text in self.views.get(doc_id, ()):
            return
        self.views.setdefault(doc_id, []).append(text)
        self.sources.setdefault(doc_id, []).append(source)

    def docs(self, min_views: int = 2) -> list[str]:
        """Documents with at least `min_views` views (only those can form a positive pair)."""
        return [d for d, v in self.views.items() if len(v) >= min_views]

    def subset(self, doc_ids) -> AspectViews:
        """The views of the given documents only."""
        keep = set(doc_ids)
        return AspectViews(self.aspect, {d: v for d, v in self.views.items() if d in keep},
                           {d: s for d, s in self.sources.items() if d in keep})

    def pairs(self, rng: random.Random) -> list[tuple[str, str, str]]:
        """One (doc_id, view_a, view_b) per document with two or more views, drawn at random."""
        out = []
        for doc_id in self.docs(2):
            a, b = rng.sample(self.views[doc_id], 2)
            out.append((doc_id, a, b))
        return out

    def stats(self) -> dict:
        """Counts for tables: documents, usable documents, views, views per source."""
        per_source: dict[str, int] = {}
        for sources in self.sources.values():
            for s in sources:
                per_source[s] = per_source.get(s, 0) + 1
        return {"aspect": self.aspect, "documents": len(self.views), "usable (>=2 views)": len(self.docs(2)),
                "views": sum(len(v) for v in self.views.values()), **per_source}


def collect_views(aspects: list[str], run_dir=None, corpus=None, include_human: bool = True,
                  exclude_splits=HUMAN_EXCLUDED_SPLITS, warn_unknown: bool = True) -> dict[str, AspectViews]:
    """Gather every view per aspect from the run's summary store and the corpus's human columns.

    - LLM summaries: records with status "ok" from `<run_dir>/summaries.jsonl`
      (the "Not applicable." and unparsed answers are not views).
    - With a corpus, no view of a paper whose `split` is in `exclude_splits` (held out for
      evaluation); `exclude_splits=()` keeps them (stage 06's pairs of held-out papers).
    - With a corpus, LLM summaries of documents it does not have are left out, with a
      warning (the corpus file changed since stage 01); `warn_unknown=False` for a corpus
      that is knowingly a part of the run's (stage 06's held-out papers).
    - Human views (`include_human`): the corpus columns `summary_<aspect>` and
      `highlights_<aspect>`.
    """
    out = {a: AspectViews(a) for a in aspects}
    if run_dir is not None:
        frame = summaries_frame(run_dir, status="ok")
        if len(frame):
            frame = frame[frame["aspect"].isin(aspects)]
            for doc_id, aspect, text in zip(frame["doc_id"], frame["aspect"], frame["text"]):
                out[aspect].add(str(doc_id), text, "llm")
    if corpus is not None:
        out = _only_corpus_documents(out, corpus, run_dir, warn_unknown)
        held = held_out_ids(corpus, exclude_splits)
        if held:
            out = {aspect: v.subset([d for d in v.views if d not in held]) for aspect, v in out.items()}
    if include_human and corpus is not None:
        docs = corpus.docs
        allowed = ~docs["split"].isin(exclude_splits) if "split" in docs else pd.Series(True, index=docs.index)
        allowed &= ~docs["doc_id"].astype(str).isin(labelled_held_out(corpus))  # stage 06's labelled papers
        for aspect in aspects:
            summary, highlights = f"summary_{aspect}", f"highlights_{aspect}"
            for i in docs.index[allowed]:
                doc_id = str(docs.at[i, "doc_id"])
                if summary in docs and isinstance(docs.at[i, summary], str):
                    out[aspect].add(doc_id, docs.at[i, summary], "human")
                if highlights in docs and isinstance(docs.at[i, highlights], (list, tuple)):
                    for sentence in docs.at[i, highlights]:
                        out[aspect].add(doc_id, sentence, "highlight")
    return out


def _only_corpus_documents(views: dict[str, AspectViews], corpus, run_dir,
                           warn: bool = True) -> dict[str, AspectViews]:
    """Leave out the views of documents the corpus does not have, with a warning naming a few.

    Such summaries usually mean the corpus file changed since stage 01 ran (records
    removed, or ids that changed); training on them would mix in papers the run no
    longer describes, and their ids would not match any embedding later.
    """
    known = set(corpus.ids)
    unknown: dict[str, int] = {}
    for v in views.values():
        for doc_id, texts in v.views.items():
            if doc_id not in known:
                unknown[doc_id] = unknown.get(doc_id, 0) + len(texts)
    if not unknown:
        return views
    if not warn:
        return {aspect: v.subset(known) for aspect, v in views.items()}
    ids = list(unknown)
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    n = sum(unknown.values())
    store = RunDir(run_dir).summaries if run_dir is not None else "the summary store"
    warnings.warn(
        f"{store}: left out {n} {'summary' if n == 1 else 'summaries'} of {len(ids)} "
        f"{'document' if len(ids) == 1 else 'documents'} that are not in the corpus {corpus.name!r}: {shown}. "
        "The corpus file has probably changed since stage 01 (generation) ran; run stage 01 again with this "
        "corpus, or train with the corpus it ran on.", stacklevel=4)
    return {aspect: v.subset(known) for aspect, v in views.items()}


def split_documents(doc_ids: list[str], corpus=None, val_split: str | None = None, val_docs: float = 0.2,
                    seed: int = 0) -> tuple[list[str], list[str]]:
    """Split documents into train and validation sets.

    With `val_split` (e.g. "validation") and a corpus with a `split` column, the
    validation documents are those of that split; otherwise a reproducible random share
    (`val_docs` < 1) or number of documents is held out: at least two once there are four
    documents, since validation ranks one held-out document among the others (a 20% share
    of a 7-paper corpus would round to one, and stage 03 would stop for want of validation).
    """
    ids = list(dict.fromkeys(doc_ids))
    if val_split and corpus is not None and "split" in corpus.docs:
        in_split = set(corpus.docs.loc[corpus.docs["split"] == val_split, "doc_id"].astype(str))
        return [d for d in ids if d not in in_split], [d for d in ids if d in in_split]
    n_val = int(round(len(ids) * val_docs)) if val_docs < 1 else int(val_docs)
    n_val = min(max(n_val, 2 if len(ids) >= 4 else 1 if len(ids) > 1 else 0), max(len(ids) - 1, 0))
    held = set(random.Random(seed).sample(ids, n_val))
    return [d for d in ids if d not in held], [d for d in ids if d in held]


def eligible_docs(views: AspectViews, doc_ids: Iterable[str]) -> list[str]:
    """The given documents that have at least two views of the aspect, in the given order."""
    return [d for d in doc_ids if len(views.views.get(d, ())) >= 2]


def validation_pairs(views: AspectViews, val_ids: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
    """(doc_ids, queries, candidates): the first view of each held-out document and its second view.

    "First" and "second" are collection order (LLM summaries, then the human summary,
    then highlights), so the pairs are the same at every evaluation and across runs.
    """
    docs = eligible_docs(views, val_ids)
    return docs, [views.views[d][0] for d in docs], [views.views[d][1] for d in docs]


def views_fingerprint(views: AspectViews, train_ids: Iterable[str], val_ids: Iterable[str]) -> str:
    """A short hash of exactly the texts training and validation see (new summaries -> new hash)."""
    data = {"train": {d: views.views[d] for d in eligible_docs(views, train_ids)},
            "val": {d: views.views[d] for d in eligible_docs(views, val_ids)}}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
