"""Stage 03 with marks: the marks of the run directory (and of a CSV the run is given) teach the heads, and the
verdict they give is written into guard.json (`verdict.py`).

`teach_heads` runs after the guard (`embed.guard.check_heads`). Without a mark it changes nothing: no file is
written, so guard.json and the embeddings are those of a run without marks. With marks, every aspect they
state gets the taught head (`saved.place_taught`) unless the verdict finds the whole abstract reads it better
(then the better of the whole abstract and the aspect-file floor); its verdict is *verified*.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir
from ..embed.aspectfile import aspect_prototypes
from ..embed.checkpoints import load_model
from ..embed.guard import base_state, guard_floor, load_guard
from ..embed.heads import PooledAspectModel
from .loop import TeachLoop
from .marks import Marks
from .saved import place_taught
from .verdict import cross_check, said

SOURCE = "your marks"  # what guard.json says checked a marked aspect


def read_marks(run_dir, marks_csv=None, aspects: Sequence[str] | None = None) -> Marks:
    """The run's marks, a CSV's (`marks_csv`, a path or None) added to them first, so the run keeps them; with
    `aspects`, a CSV naming another aspect is refused (`Marks.read_csv`)."""
    marks = Marks.of_run(run_dir)
    if marks_csv:
        try:
            n = marks.read_csv(marks_csv, aspects=aspects)
        except ValueError:
            marks.close()
            raise
        notice(f"{n} marked sentences read from {marks_csv} into the run's marks")
    return marks


def teach_heads(run_dir, corpus, aspect_set, aspects: Sequence[str], marks_csv=None, seed: int = 0) -> dict | None:
    """Teach and check the unified model's heads with the run's marks (see the module doc). Returns
    {aspect: its check} (`verdict.cross_check`), or None where there is no mark or no frozen-encoder head."""
    run = RunDir(run_dir)
    marks = read_marks(run, marks_csv, aspects)
    try:
        ids = {m.doc_id for m in marks.current()}
        papers = [str(d) for d in corpus.ids if str(d) in ids]
        if not papers:
            return None
        model = load_model(run.unified_model, run_dir=run)
        if not isinstance(model, PooledAspectModel) or not model.pool:
            notice("the marks teach frozen-encoder heads only; the fine-tuned model is kept as trained")
            return None
        aspects = list(aspects)
        protos = aspect_prototypes(aspect_set, aspects, model.cache.vectors)
        report = load_guard(run) or {}
        # the floor of stage 03's check, fitted again to the same papers
        fitted, _ = guard_floor(run, corpus, model, protos, report.get("paper_ids") or [], seed)
        loop = TeachLoop(model.features(corpus.subset(ids=papers).texts()), fitted, papers, marks=marks,
                         word_vectors=model.cache.word_vectors, seed=seed)
        checks = cross_check(loop, seed=seed)
        kept = save_taught(model, loop, checks, run)
        for a, check in checks.items():  # an aspect the marks could not teach keeps the guard's head
            check["kept"] = kept.get(a, (report.get("aspects") or {}).get(a, {}).get("kept", "head"))
        write_verdicts(run, report, checks, len(marks))
        return checks
    finally:
        marks.close()


def save_taught(model, loop: TeachLoop, checks: dict, run: RunDir) -> dict[str, str]:
    """Put what each taught aspect's check keeps in its head and save the unified model; returns {aspect: kept}."""
    taught = loop.taught()
    kept = {}
    for a, check in checks.items():
        if a not in loop.scorer.coef:
            continue  # its marks lack a "yes" or a "no": the guard's head stands
        kept[a] = check["kept"]
        if check["kept"] == "taught":
            place_taught(model.heads[a], loop.floor, taught, a)
        elif check["kept"] == "aspect file":
            loop.floor.place(model.heads[a], a)
        else:
            model.heads[a].load_state_dict(base_state(model.heads[a]))
    if any(k != "base" for k in kept.values()):
        model.phrase_frequencies = loop.floor.frequencies or model.phrase_frequencies
    guard = dict(model.extra.get("guard") or {})
    model.save_pretrained(run.unified_model, extra={"guard": {**guard, **kept}, "taught": sorted(kept)})
    return kept


def write_verdicts(run: RunDir, report: dict, checks: dict, n_marks: int) -> None:
    """guard.json with each marked aspect's verified verdict beside what the guard wrote (its keys kept)."""
    results = dict(report.get("aspects") or {})
    for a, check in checks.items():
        results[a] = {**results.get(a, {}), "kept": check["kept"], "verified": True, "checked by": SOURCE,
                      "verdict": said(a, check), "marks check": check}
    report = {**report, "aspects": results, "marks": report.get("marks", SOURCE), "taught_marks": n_marks,
              "replaced": [a for a, r in results.items() if r.get("kept") != "head"]}
    write_json(run.guard, report)
