"""Stages 02-05: which LLM answers train as views of their paper, and which may be shown as what it states.

A small local LLM often answers in generalities ("This is a summary of the method of the
study.") or copies a sentence of the abstract. A generic answer points at no paper in
particular, so as a training pair it teaches a head nothing about the aspect, only noise;
a copy teaches it to match words. Before stages 02 and 03 use the answers, each one is
embedded by a fixed reference encoder (MiniLM, never trained here) and kept as a training
view when (the *grounding check*, `training_verdict`)

* it finds its own abstract: among the corpus's abstracts, its own is in the top
  `TOP_SHARE` by cosine (at least the top `TOP_MIN`); else it is *generic*;
* it is not a copy: its cosine with every sentence of its abstract stays below
  `COPY_COSINE`; else it is a *copy*.

What the pane shows as a paper's statement must also read as one: the *shown filter*
(`shown_verdict`), applied where texts are shown (stage 04's retrieval memory,
`decode.statements`, hence the readout, the legend and the hover), never to the training
views. An answer is shown only where the grounding check keeps it and

* its text is usable (`generate.unusable`): it does not stop mid-sentence (*cut*, the token
  limit), loop on a word or phrase (*repeats*), or open a statement it never makes
  (*announces*: "Our main findings are:");
* no sentence of it copies one of its own abstract (*copy*) or of another paper's
  (*copies another abstract*): cosine `COPY_COSINE` or more;
* it stands out (else *generic*): its own abstract's cosine lies at least `GENERIC_Z` standard
  deviations above the mean of the other abstracts', and is at least `OWN_MIN`. A text that would
  fit any paper ("This is a very interesting paper.") scores about alike against all of them; one
  that shares a word or two of its paper's topic and states nothing of it ("The world is a safe
  place in the dark." of a paper on the Dark Web) is nearer its own abstract than the others, yet
  far from it.

An answer that fails several counts under the first of `REASONS`. Human summaries and
highlights are kept as they are. The counts per aspect, of both (the shown filter's under
"shown"), are written to `<run_dir>/grounding.json` and shown by notebooks 02 and 03.
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir
from ..core.vectors import unit_rows
from ..data.sentences import split_sentences
from ..generate.unusable import text_reason
from ..generate.views import AspectViews, collect_views
from .features import FeatureCache, FrozenBackbone

REFERENCE = "minilm"  # the encoder that judges grounding: fixed, so the rule does not move with the run's model
TOP_SHARE = 0.1
TOP_MIN = 3
COPY_COSINE = 0.95
# Chosen on ACLSum validation and CSAbstruct dev (the 135M model's answers, read): grounded answers stand 3.4 to 8.8
# standard deviations above the other abstracts' mean cosine, answers that fit any paper 2.9 and below.
GENERIC_Z = 3.0
OWN_MIN = 0.5  # the same answers: grounded ones from 0.52 with their own abstract, topic-only ones from 0.49 down
# Why the grounding check leaves an LLM answer out of the training views.
TRAINING_REASONS = ("generic", "copy")
# Why the shown filter leaves one out of what the pane shows, in the order it is counted: broken text first, then
# copies, then generic.
REASONS = ("announces", "cut", "repeats", "copy", "copies another abstract", "generic")


class Verdict(NamedTuple):
    """One LLM answer's two verdicts: "kept" or why not."""

    training: str  # the grounding check: "kept" or one of `TRAINING_REASONS`; stage 02's and 03's views
    shown: str     # the shown filter: "kept" or one of `REASONS`; what stage 04's memory and the pane may show


def judge_views(views: dict[str, AspectViews], corpus, cache: FeatureCache) -> dict[str, dict]:
    """{aspect: {(doc_id, view index): `Verdict`}} for every LLM view of a corpus paper."""
    ids = [str(d) for d in corpus.ids]
    row = {d: i for i, d in enumerate(ids)}
    llm = {aspect: [(d, k, text) for d, texts in v.views.items() if d in row
                    for k, (text, source) in enumerate(zip(texts, v.sources[d])) if source == "llm"]
           for aspect, v in views.items()}
    verdicts = {aspect: {} for aspect in views}
    if not any(llm.values()):  # human views only: nothing to judge, and no corpus to encode for it
        return verdicts
    # Every abstract and sentence of the corpus: minutes on 5,000 abstracts, cached for stage 03 after it.
    docs = cache.documents(corpus.texts(), progress=True)
    abstracts = unit_rows(docs.whole)
    sentences, owners = corpus_sentences(docs.sentences, abstracts.shape[1])
    top = max(TOP_MIN, math.ceil(TOP_SHARE * len(ids)))
    for aspect, items in llm.items():
        if not items:
            continue
        vectors = unit_rows(cache.vectors([t for _, _, t in items]))
        sims = vectors @ abstracts.T                                         # [views, papers]
        # An answer of several sentences is also read sentence by sentence: a copy of three shows only so.
        parts = [split_sentences(t) for _, _, t in items]
        flat = [p for ps in parts for p in ps if len(ps) > 1]
        part_vectors = unit_rows(cache.vectors(flat)) if flat else np.zeros((0, abstracts.shape[1]))
        start = 0
        for (d, k, text), vec, sim, ps in zip(items, vectors, sims, parts):
            n = len(ps) if len(ps) > 1 else 0
            mine, theirs = copy_cosines(np.vstack([vec[None], part_vectors[start:start + n]]), row[d], sentences,
                                        owners)
            start += n
            trained = training_verdict(sim, row[d], top, docs.sentences[row[d]], vec)
            shown = verdict(text, sim, row[d], top, mine, theirs)
            # Shown only where it also trains (the two rules' cosines agree but for rounding).
            verdicts[aspect][(d, k)] = Verdict(trained, trained if shown == "kept" else shown)
    return verdicts


def training_verdict(sim, own: int, top: int, own_sentences, vec) -> str:
    """The grounding check of a training view: "copy" where the answer (`vec`, a unit row) has cosine `COPY_COSINE`
    or more with a sentence of its own abstract (`own_sentences`, rows), else "kept" where its own abstract is among
    the `top` nearest by `sim` (its cosines with every abstract, its own at `own`), else "generic"."""
    copied = len(own_sentences) and float((unit_rows(own_sentences) @ vec).max()) >= COPY_COSINE
    return "copy" if copied else ("kept" if int((sim > sim[own]).sum()) < top else "generic")


def verdict(text: str, sim, own: int, top: int, mine: float, theirs: float) -> str:
    """The shown filter: "kept" or the first of `REASONS` that an answer fails: `text` itself, `sim` its cosines with
    every abstract of the corpus (its own at `own`), `mine`/`theirs` its cosines with the nearest sentence of its own
    abstract and of another (`copy_cosines`)."""
    reason = text_reason(text)
    if reason:
        return reason
    if mine >= COPY_COSINE:
        return "copy"
    if theirs >= COPY_COSINE:
        return "copies another abstract"
    return "kept" if stands_out(sim, own, top) else "generic"


def corpus_sentences(per_doc, dim: int):
    """(every sentence of the corpus as unit rows [S, H], the row of the paper each comes from [S])."""
    rows = [s for s in per_doc if len(s)]
    if not rows:
        return np.zeros((0, dim), dtype=np.float32), np.zeros(0, dtype=int)
    owners = np.concatenate([np.full(len(s), i) for i, s in enumerate(per_doc) if len(s)])
    return unit_rows(np.concatenate(rows)), owners


def copy_cosines(vectors, own: int, sentences, owners) -> tuple[float, float]:
    """(the highest cosine with a sentence of its own abstract, with one of another's) of an answer's `vectors`
    (unit rows: the whole answer, then each of its sentences where it has several)."""
    if not len(sentences):
        return 0.0, 0.0
    best = (vectors @ sentences.T).max(axis=0)                               # [S]
    mine = owners == own
    return (float(best[mine].max()) if mine.any() else 0.0), (float(best[~mine].max()) if (~mine).any() else 0.0)


def stands_out(sim, own: int, top: int) -> bool:
    """Whether an answer's own abstract is among its `top` nearest, at cosine `OWN_MIN` or more and `GENERIC_Z`
    standard deviations above the mean of the other abstracts' (with fewer than 3 others there is no spread to
    measure: rank and cosine alone)."""
    if int((sim > sim[own]).sum()) >= top or float(sim[own]) < OWN_MIN:
        return False
    others = np.delete(sim, own)
    if len(others) < 3:
        return True
    spread = float(others.std())
    return spread > 0 and (float(sim[own]) - float(others.mean())) / spread >= GENERIC_Z


def grounded_views(aspects, run_dir, corpus, include_human: bool = True, **options) -> dict[str, AspectViews]:
    """`collect_views`, with the LLM views the grounding check leaves out (see the module doc) left out.

    The shown filter does not act here: it decides what is shown, not what trains. Without a
    corpus (LLM summaries only) nothing can be checked and every view is kept. Writes the counts
    of both to `<run_dir>/grounding.json`.
    """
    views = collect_views(list(aspects), run_dir, corpus, include_human=include_human, **options)
    if corpus is None or run_dir is None or not len(corpus):
        return views
    cache = FeatureCache.for_run(run_dir, FrozenBackbone(REFERENCE))
    verdicts = judge_views(views, corpus, cache)
    out, report = {}, {}
    for aspect, v in views.items():
        kept = AspectViews(aspect)
        judged = verdicts[aspect]
        for d, texts in v.views.items():
            for k, (text, source) in enumerate(zip(texts, v.sources[d])):
                if source != "llm" or (d, k) not in judged or judged[(d, k)].training == "kept":
                    kept.add(d, text, source)
        report[aspect] = verdict_counts(judged.values())
        out[aspect] = kept
    write_json(RunDir(run_dir).grounding,
               {"rule": f"a training view where its own abstract is in the top {TOP_SHARE:.0%} (at least {TOP_MIN}) "
                        f"of the corpus by {REFERENCE} cosine and no sentence of it has cosine {COPY_COSINE} or more",
                "shown rule": f"shown where kept as a training view, at {OWN_MIN} or more with its own abstract and "
                              f"{GENERIC_Z} standard deviations above the other abstracts' mean, no sentence of any "
                              f"abstract at cosine {COPY_COSINE} or more with one of its sentences, and it neither "
                              "stops mid-sentence, repeats words nor only announces",
                "aspects": report})
    return out


def verdict_counts(verdicts) -> dict:
    """grounding.json's counts of one aspect's `Verdict`s: the LLM views, how many train and why the others do not,
    and under "shown" how many the shown filter lets through and why the others not."""
    training = pd.Series([v.training for v in verdicts], dtype=object).value_counts().to_dict()
    shown = pd.Series([v.shown for v in verdicts], dtype=object).value_counts().to_dict()
    return {"llm views": int(sum(training.values())), "kept": int(training.get("kept", 0)),
            **{why: int(training.get(why, 0)) for why in TRAINING_REASONS},
            "shown": {"kept": int(shown.get("kept", 0)), **{why: int(shown.get(why, 0)) for why in REASONS}}}


TABLE = ["llm views", "kept", *TRAINING_REASONS, "shown", *(f"not shown: {why}" for why in REASONS)]


def grounding_table(run_dir) -> pd.DataFrame:
    """Per aspect: the LLM views, how many train and why the others do not, how many may be shown and why the
    others not (from grounding.json). A report written before the shown filter has no shown counts: left empty."""
    path = RunDir(run_dir).grounding
    if not path.is_file():  # a missing report changes what the notebook shows: say so, never an empty table alone
        notice(f"{path} is missing: the grounding check's counts are written when stage 02 or 03 gathers the "
               "views; re-run stage 02 to see them")
        return pd.DataFrame(columns=TABLE)
    rows = {}
    for aspect, counts in json.loads(path.read_text())["aspects"].items():
        shown = counts.get("shown", {})
        rows[aspect] = {**{k: v for k, v in counts.items() if k != "shown"},
                        **({"shown": shown.get("kept")} if shown else {}),
                        **{f"not shown: {why}": shown.get(why) for why in REASONS if why in shown}}
    return pd.DataFrame.from_dict(rows, orient="index").reindex(columns=TABLE).astype("Int64").rename_axis("aspect")
