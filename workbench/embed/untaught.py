"""Aspects with nothing to learn from: no usable LLM answer (a server answering junk, a model ignoring the format),
no human summary, no sentence label. They get no aspect model, and the run goes on without one.

Stage 02 names them and says why (`without_supervision`; the reason quotes stage 01's `summaries.nothing_kept`)
in a notice and in `<run_dir>/aspect_models/untrained.json` (`untrained_aspects` reads it back). Stage 03 gives
them no target: where no aspect has any supervision, the unified model's heads are saved as they start
(`untrained_heads`), and stage 03's check (`guard.check_heads`) puts the aspect-file floor in the place of every
untrained head.

Aspects with too little to learn from: usable answers for a few papers only (a weak model, a half-broken server,
answers cut off by max_new_tokens). Stage 03 chooses each head's training steps on held-out papers; a head with too
few of them, or nothing to train on, would stay as it starts. `too_few_to_train` names such aspects with their
counts, `say_too_few` tells the user what to do, and their heads are marked untrained like those above: where no
aspect is left to train, all heads are saved as they start; else the others are trained and these get the floor.
Stage 02's notebook shows them in its results table (`results_table`) and, with no training
paper at all, says so instead of an example (`example_views_html`).
"""

from __future__ import annotations

import json
import os
from html import escape
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from ..core.display import html_table
from ..core.files import strict, write_json
from ..core.progress import notice
from ..core.rundir import RunDir
from ..generate.summaries import nothing_kept, summaries_frame
from ..generate.views import AspectViews
from .head_training import new_unified, sentence_supervision
from .heads import PooledAspectModel
from .training import DistillResult, TrainResult


def without_supervision(views: dict[str, AspectViews], aspects: Sequence[str], corpus=None, run_dir=None,
                        include_human: bool = True) -> dict[str, str]:
    """{aspect: why it has nothing to learn from} for each aspect with neither views nor sentence labels.

    The usual cause is stage 01: every answer of the aspect unparsed or "Not applicable." (a server
    answering with its own page, a model that ignores the format), said with the counts and a sample of
    what came back (`summaries.nothing_kept`); or its answers were there but none was grounded in its
    abstract (`grounding.json`); or stage 01 did not run for it.
    """
    labels = sentence_supervision(corpus, aspects, run_dir, include_human) if corpus is not None else {}
    empty = [a for a in aspects if not views[a].views and not labels.get(a)]
    if not empty:
        return {}
    frame = summaries_frame(run_dir) if run_dir is not None else None
    if frame is not None and hasattr(corpus, "ids") and len(frame):  # the corpus's papers only, as stage 02 reads
        frame = frame[frame["doc_id"].isin(set(corpus.ids))]
    unkept = nothing_kept(frame, aspects) if frame is not None else {}
    asked = set(frame["aspect"]) if frame is not None and len(frame) else set()
    reasons = {}
    for a in empty:
        if a in unkept or "*" in unkept:
            why = unkept.get(a) or unkept["*"]
        elif a in asked:
            why = "none of its LLM answers was grounded in its own abstract (see grounding.json)"
        else:
            why = "stage 01 wrote no answer of it"
        reasons[a] = f"{why}; the corpus has no human summary, highlight or sentence label of it either"
    return reasons


def example_views_html(views_by_aspect: dict[str, AspectViews], train_ids) -> str:
    """The views of one training paper (the first with two or more of every aspect), as an HTML table.

    Without any training paper (no usable view at all: the notices of stages 01 and 02 say why) it says so
    instead of showing an empty table."""
    names = list(views_by_aspect)
    example = next((d for d in train_ids if all(len(views_by_aspect[a].views.get(d, ())) >= 2 for a in names)),
                   next(iter(train_ids), None))
    if example is None:
        return "<p>No paper has a view to train on, so there is no example to show.</p>"
    rows = [{"aspect": a, "source": s, "view": v} for a in names
            for v, s in zip(views_by_aspect[a].views.get(example, []), views_by_aspect[a].sources.get(example, []))]
    return f"<b>Views of {escape(str(example))}</b>" + html_table(pd.DataFrame(rows))


def results_table(results: dict[str, TrainResult], run_dir=None):
    """One row per aspect model (`TrainResult.summary`), and one per aspect stage 02 left untrained, with why."""
    rows = [r.summary() for r in results.values()]
    untrained = untrained_aspects(run_dir) if run_dir is not None else {}
    rows += [{"aspect": a, "not trained": why} for a, why in untrained.items() if a not in results]
    return pd.DataFrame(rows, columns=list(dict.fromkeys(k for r in rows for k in r)) or ["aspect"]).set_index("aspect")


#: Stage 03 validates a head on held-out papers by how its similarities among them agree with the teacher's, and
#: by the rank of each one's own target among theirs: two papers at least (`head_training.evaluate_heads`).
MIN_HELD_OUT = 2

#: What gives stage 03 papers to train on: more of stage 01's answers usable (said after the counts).
MORE_ANSWERS = ("For trained heads, stage 01 needs usable answers for more papers: an LLM that answers in the JSON "
                "format its prompts ask for (stage 01's notices and summaries.jsonl show what came back), more "
                "papers summarised (a larger 01_generate.subset; where the papers are split at random, 2 are held "
                "out only from 4 on), or room for whole answers (a larger max_new_tokens: an answer cut off before "
                "its JSON closes cannot be read).")


def too_few_to_train(targets: Mapping[str, Mapping], sentence_labels: Mapping[str, Mapping] | None, split,
                     n_papers: int) -> dict[str, str]:
    """{aspect: why} for each aspect with some supervision whose head stage 03 cannot both train and validate.

    A head needs a paper with a target or sentence labels of its aspect to train on and `MIN_HELD_OUT`
    validation papers with a target of it (validation compares with the teacher's targets). With fewer its
    step count stays 0, so it would be shipped as it starts: it is marked untrained instead, and the guard
    puts the aspect-file floor in its place. `split`: (train ids, validation ids); `n_papers`: stage 03's
    corpus. Aspects with no target and no label at all are left out: stage 02 said why (`without_supervision`).
    """
    train_ids, val_ids = (list(dict.fromkeys(map(str, ids))) for ids in split)
    out = {}
    for aspect, by_doc in targets.items():
        labelled = set((sentence_labels or {}).get(aspect) or ())
        if not by_doc and not labelled:
            continue
        n_train = sum(d in by_doc or d in labelled for d in train_ids)
        n_val = sum(d in by_doc for d in val_ids)
        if n_train >= 1 and n_val >= MIN_HELD_OUT:
            continue
        n = len(set(map(str, by_doc)) | labelled)
        out[aspect] = (f"only {n} of the {n_papers} papers {'has' if n == 1 else 'have'} a usable summary"
                       f"{' or sentence labels' if labelled else ''} of it: {n_train} to train on and {n_val} held out "
                       f"to check it on, where a head needs 1 and {MIN_HELD_OUT}")
    return out


def say_too_few(few: Mapping[str, str], trained: Sequence[str]) -> None:
    """One notice for the aspects of `too_few_to_train`: their counts, which heads are trained instead (`trained`),
    that the others read with the aspect-file floor, and what gives stage 01 more usable answers."""
    if not few:
        return
    counts = "; ".join(f"{a}: {why}" for a, why in few.items())
    if trained:
        them = "it" if len(few) == 1 else "them"
        floor = (f"The aspect file's own head (the aspect-file floor, which needs no summary) reads {them}; the heads "
                 f"of {', '.join(trained)} are trained.")
    else:
        floor = ("Every head is the aspect file's own (the aspect-file floor, which needs no summary), as when no "
                 "answer is usable; the run goes on.")
    notice(f"stage 03 cannot train the head{'s' if len(few) > 1 else ''} of {', '.join(few)} for want of "
           f"papers: {counts}. {floor} {MORE_ANSWERS}")


def mark_untrained(out_dir: str | os.PathLike, reasons: Mapping[str, str]) -> None:
    """Mark the heads of `reasons` ({aspect: why}, `too_few_to_train`) untrained, with why, in the unified model
    saved in `out_dir`, for stage 03's check to put the aspect-file floor in their place and say why. Done after
    training, which keeps such a head as it starts: it never has two validation papers to be chosen on."""
    if not reasons:
        return
    model = PooledAspectModel.from_pretrained(out_dir, device="cpu")
    untrained = list(dict.fromkeys([*(model.extra.get("untrained") or ()), *reasons]))
    model.save_pretrained(out_dir, extra={"untrained": untrained, "untrained_reasons": dict(reasons)})


def untrained_heads(corpus, aspects, out_dir, config, cache, reasons: Mapping[str, str] | None = None):
    """The unified model where no aspect has enough to learn from: its heads saved as they start (the base
    encoder's vectors), marked "untrained" for stage 03's check to put the aspect-file floor in their place.
    `reasons`: {aspect: why} of `too_few_to_train`, which the check says (others: stage 02 had nothing)."""
    nan = float("nan")
    model = new_unified(cache, aspects, config)
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, extra=strict({"stage": "distill", "mode": "frozen", "step": 0,
                                                 "distill_config": config.to_dict(), "untrained": list(aspects),
                                                 "untrained_reasons": dict(reasons or {})}))
    scores = {a: {"agreement": nan, "mean_rank": nan, "mrr": nan, "loss": nan, "n": 0, "step": 0} for a in aspects}
    none = {"agreement": nan, "mean_rank": nan, "mrr": nan, "loss": nan, "aspects": scores}
    history = {"train": [], "eval": []}
    write_json(out_dir / "history.json", history, indent=1)
    write_json(out_dir / "distill_config.json", strict({
        "kind": "distill", "mode": "frozen", "config": config.to_dict(), "seed": config.seed, "n_train": 0, "n_val": 0,
        "aspects": list(aspects), "untrained": list(aspects), "base_model": cache.backbone.name,
        "corpus": getattr(corpus, "name", ""), "steps": 0, "best_step": 0, "seconds": 0.0, "device": "cpu"}))
    return DistillResult(out_dir=out_dir, kind="distill (frozen heads, none trained)", aspects=list(aspects),
                         best_step=0, best=none, baseline=none, history=history, config=config, n_train=0, n_val=0,
                         steps=0, stopped_early=False, seconds=0.0, reference=none)


def untrained_aspects(run_dir: str | os.PathLike, aspects: Sequence[str] | None = None) -> dict[str, str]:
    """{aspect: why} for the aspects stage 02 left without a model (nothing to learn from), of `aspects` if given.

    Stage 03 gives them no target: their heads are the aspect-file floor (`guard.check_heads`)."""
    path = RunDir(run_dir).untrained
    try:
        untrained = json.loads(path.read_text()).get("aspects", {}) if path.is_file() else {}
    except (OSError, ValueError, AttributeError):
        raise ValueError(f"{path} cannot be read: run 02_train again") from None
    return {a: str(why) for a, why in untrained.items() if aspects is None or a in aspects}
