"""Stages 02-03: an LLM answer is a view of its paper only if it is grounded in that paper's abstract.

A small local LLM often answers in generalities ("This is a summary of the method of the
study.") or copies a sentence of the abstract. A generic answer points at no paper in
particular, so as a training pair it teaches a head nothing about the aspect, only noise;
a copy teaches it to match words. Before stages 02 and 03 use the answers, each one is
embedded by a fixed reference encoder (MiniLM, never trained here) and kept when

* it finds its own abstract: among the corpus's abstracts, its own is in the top
  `TOP_SHARE` by cosine (at least the top `TOP_MIN`); else it is *generic*;
* it is not a copy: its cosine with every sentence of its abstract stays below
  `COPY_COSINE`; else it is a *copy*.

Human summaries and highlights are kept as they are. The counts per aspect, and why the
others went, are written to `<run_dir>/grounding.json` and shown by notebooks 02 and 03.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir
from ..core.vectors import unit_rows
from ..generate.views import AspectViews, collect_views
from .features import FeatureCache, FrozenBackbone

REFERENCE = "minilm"  # the encoder that judges grounding: fixed, so the rule does not move with the run's model
TOP_SHARE = 0.1
TOP_MIN = 3
COPY_COSINE = 0.95


def judge_views(views: dict[str, AspectViews], corpus, cache: FeatureCache) -> dict[str, dict]:
    """{aspect: {(doc_id, view index): "kept" | "generic" | "copy"}} for every LLM view of a corpus paper."""
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
    top = max(TOP_MIN, math.ceil(TOP_SHARE * len(ids)))
    for aspect, items in llm.items():
        if not items:
            continue
        vectors = unit_rows(cache.vectors([t for _, _, t in items]))
        sims = vectors @ abstracts.T                                         # [views, papers]
        for (d, k, _), vec, sim in zip(items, vectors, sims):
            own = sim[row[d]]
            rank = int((sim > own).sum())                                    # 0: its own abstract is the nearest
            sentences = docs.sentences[row[d]]
            copied = len(sentences) and float((unit_rows(sentences) @ vec).max()) >= COPY_COSINE
            verdicts[aspect][(d, k)] = "copy" if copied else ("kept" if rank < top else "generic")
    return verdicts


def grounded_views(aspects, run_dir, corpus, include_human: bool = True, **options) -> dict[str, AspectViews]:
    """`collect_views`, with the LLM views that are not grounded in their abstract left out (see the module doc).

    Without a corpus (LLM summaries only) nothing can be checked and every view is kept.
    Writes the counts to `<run_dir>/grounding.json`.
    """
    views = collect_views(list(aspects), run_dir, corpus, include_human=include_human, **options)
    if corpus is None or run_dir is None or not len(corpus):
        return views
    cache = FeatureCache.for_run(run_dir, FrozenBackbone(REFERENCE))
    verdicts = judge_views(views, corpus, cache)
    out, report = {}, {}
    for aspect, v in views.items():
        kept = AspectViews(aspect)
        for d, texts in v.views.items():
            for k, (text, source) in enumerate(zip(texts, v.sources[d])):
                if source != "llm" or verdicts[aspect].get((d, k), "kept") == "kept":
                    kept.add(d, text, source)
        counts = pd.Series(list(verdicts[aspect].values()), dtype=object).value_counts().to_dict()
        report[aspect] = {"llm views": len(verdicts[aspect]), "kept": int(counts.get("kept", 0)),
                          "generic": int(counts.get("generic", 0)), "copy": int(counts.get("copy", 0))}
        out[aspect] = kept
    write_json(RunDir(run_dir).grounding,
               {"rule": f"kept when its own abstract is in the top {TOP_SHARE:.0%} (at least {TOP_MIN}) of the "
                        f"corpus by {REFERENCE} cosine and no sentence of it has cosine {COPY_COSINE} or more",
                "aspects": report})
    return out


def grounding_table(run_dir) -> pd.DataFrame:
    """Per aspect: the LLM views, how many were kept, and why the others went (from grounding.json)."""
    path = RunDir(run_dir).grounding
    if not path.is_file():  # a missing report changes what the notebook shows: say so, never an empty table alone
        notice(f"{path} is missing: the grounding check's counts are written when stage 02 or 03 gathers the "
               "views; re-run stage 02 to see them")
        return pd.DataFrame(columns=["llm views", "kept", "generic", "copy"])
    return pd.DataFrame(json.loads(path.read_text())["aspects"]).T.rename_axis("aspect")
