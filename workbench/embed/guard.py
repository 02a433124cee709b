"""Stage 03's guard: no head is shipped reading its aspect's sentences less selectively than the encoder, and the
user is told what the check could and could not see.

After stage 03 has trained the unified model, each head is checked on its validation papers
(and, on a corpus larger than stage 01's sample, papers no stage trained on: `check_papers`)
by the swap probe (`health.hard_negative_probe`), which needs no ground truth: swap the
sentences that state aspect a for another paper's and see how far each embedding moves. A
head that reads its aspect's sentences moves for its own aspect's swaps and little for the others'.
Its *selectivity* is

    selectivity(h, a) = moved(h | swap of a) / mean over the other aspects b of moved(h | swap of b)

The whole-abstract vector of the encoder ("base") moves about alike for every swap, so its
selectivity is the level any head must beat. Three columns are compared per aspect: the
trained head, the aspect file's floor (`floor.fit_floor`, fitted to up to 2,000 papers of the corpus:
`floor_papers`; held in a head of the same kind) and the base; this module only compares them. A head
less selective than the base, or less than half as selective as the floor, is replaced by the floor
(`kept: "aspect file"`); the decision and the numbers go to `unified_model/guard.json` and the model's
config, and stage 03 and 06 say it in words.

Where the sentences come from the aspect file itself, the floor is measured on its own
choice of sentences and has the advantage; the factor of 2 leaves a trained head its place
unless the floor reads the aspect far more selectively. On ACLSum (human highlights) every head is
kept: 1.67, 4.77 and 2.45 against the floor's 1.27, 3.38 and 2.16 and the base's 0.65, 2.32 and 0.56.

The sentences that state each aspect come from the corpus's human highlights or stage 01's
LLM sentence labels where there are some (`health.corpus_sentence_aspects`), else from the
aspect file itself (`aspectfile.sentence_marks`: the sentences stating each aspect). A head the
probe cannot check (no pair of papers to swap, or no other aspect to compare with) is kept as
trained and named in a notice.

Evidence the floor did not use, or none. Where the swapped sentences come from the aspect file, they were
chosen by the same descriptions that built the floor: a floor wrong about which sentences state an aspect
passes that probe all the same. Such a verdict is *unverified* (`"verified": false`): the decision stands,
said as what it is, with what to add to verify it. Human highlights, stage 01's LLM sentence labels and the
user's `label_<aspect>` columns are evidence of their own: their verdicts are verified. They stay so because no
head learnt them on the papers checked: those are the validation papers, which teach stage 03's refit through
their targets alone, with no sentence label (`head_training.train_unified_heads`), and papers no stage trained on.

What selectivity can say. It says where a vector reads (a head pooling the marked sentences moves for them
and little else; the whole abstract moves for every swap), not whether it ranks papers by the aspect better
than the encoder. `benchmarks/check.py` measured it on 18 aspects of six corpora whose labels answer that: the
floor was more selective than the base on all 18, also on the 3 where the labels rank the base higher
(generator c's disease at seed 2: 43.6 against 2.7; an aspect file with disease and method swapped: 60.7
against 0.4 and 596 against 3.4). Marks from a held-out half of the aspect file's texts, with the floor fitted
on the other half, ranked those 3 the same way. So the probe's verdicts speak
of selectivity only, and only a label column's verdict says that a head follows an aspect more or less than
the encoder.

Where the corpus carries the user's own categories of an aspect (a `label_<aspect>` column),
they decide instead: each of the three is scored by the per-paper Spearman of its cosine
similarities against "shares the category" (Table 2's label truth) on the same papers, and
the best is kept, the head unless another beats it by more than `LABEL_MARGIN`. Only this
check sees a wrong aspect file (descriptions swapped between aspects): the swap probe's
sentences and the floor come from that same file. A head replaced by the base then returns
the encoder's whole-abstract vector.
"""

from __future__ import annotations

import copy
import json
from typing import Sequence

import numpy as np

from ..core.files import write_json
from ..core.progress import notice
from ..core.rundir import RunDir
from ..core.vectors import unit_rows
from ..generate.views import held_out_ids, sample_in_order
from ..measures.evaluation import label_similarity, rowwise_spearman
from ..measures.health import corpus_sentence_aspects, hard_negative_probe
from .aspectfile import aspect_prototypes, sentence_marks
from .checkpoints import load_model
from .features import FeatureCache, FrozenBackbone
from .floor import fit_floor
from .heads import PooledAspectModel

BASE = "base"
FLOOR_PAPERS = 2000  # papers the floor is fitted to at most (its CKA and calibration sample as many)
CHECK_PAPERS = 200  # papers the check reads at most: the validation papers, then papers no stage trained on
MARGIN = 0.0  # a head is kept when its selectivity is at least the base's plus this ...
FLOOR_FACTOR = 2.0  # ... and more than 1 / FLOOR_FACTOR of the aspect-file head's
LABEL_MARGIN = 1.0  # with label columns: another column must beat the head by this (Spearman x 100)
MIN_LABELLED = 6  # papers with a label before the labels decide
INDEPENDENT_MARKS = "human highlights or LLM sentence labels"  # marks the floor did not choose


def base_state(head) -> dict:
    """The state of a `SentencePoolingHead` that returns the encoder's whole-abstract vector (gate at 1)."""
    import torch

    state = {k: v.detach().clone() for k, v in head.state_dict().items()}
    state["blend.gate"] = torch.tensor(30.0, dtype=state["blend.gate"].dtype)  # sigmoid(30) = 1 - 1e-13
    if "projection.up" in state:
        state["projection.up"] = torch.zeros_like(state["projection.up"])
    return state


def label_scores(vectors: dict[str, np.ndarray], labels) -> dict[str, float]:
    """{column: mean per-paper Spearman x 100 of its cosine similarities against "shares the label"}."""
    truth = label_similarity(list(labels))
    out = {}
    for name, v in vectors.items():
        v = unit_rows(v, np.float64)
        out[name] = float(np.nanmean(rowwise_spearman(v @ v.T, truth)) * 100)
    return out


def selectivity(matrix: dict, column: str, aspect: str) -> float:
    """moved(column | swap of aspect) over the mean moved(column | swap of another aspect)."""
    others = [matrix[b][column] for b in matrix if b != aspect and column in matrix[b]]
    if aspect not in matrix or not others or not np.mean(others) > 0:
        return float("nan")
    return float(matrix[aspect][column] / np.mean(others))


def aspect_sentences(corpus, aspects: Sequence[str], run_dir, features, prototypes,
                     boilerplate: np.ndarray | None = None) -> tuple[list[dict], str]:
    """(per document {aspect: [mark per sentence]}, where they came from): the corpus's human highlights or
    stage 01's LLM sentence labels where at least four papers have them for every aspect, else the sentences
    the aspect file points at (`aspectfile.sentence_marks`, boilerplate never marked)."""
    try:
        marks = corpus_sentence_aspects(corpus, aspects, run_dir)
    except ValueError:
        marks = []
    if sum(1 for m in marks if all(m.get(a) for a in aspects)) >= 4:
        return marks, INDEPENDENT_MARKS
    return sentence_marks(features, prototypes, boilerplate=boilerplate), f"the aspect file ({prototypes.description})"


def probe_sentences(run_dir, corpus, aspect_set, aspects: Sequence[str]) -> tuple[list[dict], str]:
    """`aspect_sentences` for stage 06's swap probe: the sentence vectors from the run's unified model (frozen
    heads) or, for a fine-tuned model, from MiniLM's cache in the run directory."""
    run = RunDir(run_dir)
    model = load_model(run.unified_model, run_dir=run)
    cache = model.cache if isinstance(model, PooledAspectModel) and model.cache is not None else \
        FeatureCache.for_run(run, FrozenBackbone("minilm"))
    features = cache.documents(corpus.texts())
    try:
        protos = aspect_prototypes(aspect_set, aspects, cache.vectors)
    except ValueError:  # an aspect the file says nothing about: only human or LLM labels can serve
        return corpus_sentence_aspects(corpus, aspects, run), INDEPENDENT_MARKS
    heads = list(model.heads.values()) if isinstance(model, PooledAspectModel) else []
    boiler = heads[0].pooling.boilerplate.cpu().numpy() if heads else None  # the guard's, where it set a floor
    return aspect_sentences(corpus, aspects, run, features, protos, boiler)


def check_papers(corpus, train_ids: Sequence[str], val_ids: Sequence[str], seed: int = 0,
                 n: int = CHECK_PAPERS) -> list[str]:
    """The papers stage 03's check reads: the validation papers, then a seeded sample of the corpus's papers
    that no stage trained on (outside stage 01's sample, not in a held-out split), up to `n` in all.

    Stage 01 summarises a sample (150 abstracts by default), so on a large corpus the validation papers are
    some 20: 13 to 19 pairs to swap per aspect, and selectivities a few hundredths apart decide. Papers
    outside the sample need no summary to be swapped; stage 06 leaves them out of its own sample
    (`report.evaluation_corpus`), since they chose the heads. Of those, the papers with sentences marked in a
    `highlights_<aspect>` column come first: the user marked them so that a check could read them."""
    taken = {str(d) for d in train_ids} | {str(d) for d in val_ids} | held_out_ids(corpus)
    ids = [str(d) for d in val_ids]
    rest = [d for d in map(str, corpus.ids) if d not in taken]
    marked = marked_ids(corpus)
    first = sample_in_order([d for d in rest if d in marked], n - len(ids), seed)
    return ids + first + sample_in_order([d for d in rest if d not in marked], n - len(ids) - len(first), seed)


def marked_ids(corpus) -> set[str]:
    """The papers with at least one sentence given in a `highlights_<aspect>` column."""
    docs = corpus.docs
    columns = [c for c in docs.columns if str(c).startswith("highlights_")]
    return {str(d) for d, *cells in zip(docs["doc_id"], *(docs[c] for c in columns))
            if any(isinstance(v, (list, tuple, np.ndarray)) and len(v) for v in cells)}


def floor_papers(run, corpus, check_ids: Sequence[str], seed: int = 0, n: int = FLOOR_PAPERS) -> list[str]:
    """The papers the aspect-file floor is fitted to, in corpus order: every paper stages 02-03 saw and the
    checked ones, then a seeded sample of the rest up to `n` in all, none of the papers held out for stage 06.

    The floor reads text, no label, so the more of the corpus the better: on CSAbstruct run as a user would
    (`scripts/csabstruct_run.py`), the outcome floor fitted to the 294 papers stages 02-03 saw and checked
    reached 70.7 / 66.5 against the human-marked sentences (MiniLM / mpnet truth), fitted to 2,000 of the
    2,155 papers 75.8 / 68.4."""
    try:
        seen = {str(d) for part in run.split() for d in part} | {str(d) for d in check_ids}
    except FileNotFoundError:
        seen = {str(d) for d in check_ids}
    held = held_out_ids(corpus)
    rest = [d for d in map(str, corpus.ids) if d not in seen and d not in held]
    chosen = seen | set(sample_in_order(rest, n - len(seen), seed))
    return [d for d in map(str, corpus.ids) if d in chosen]


def guard_floor(run, corpus, model, protos, check_ids: Sequence[str], seed: int = 0):
    """The aspect-file floor of stage 03's check: fitted by `model`'s frozen encoder to `floor_papers`. The check,
    the marks' stage 03 (`teach.stage`) and the teaching widget fit this one floor, so a head taught in the pane is
    the head stage 03 saves from the same marks. Returns the floor and the papers it was fitted to."""
    fit_ids = floor_papers(run, corpus, check_ids, seed)
    return fit_floor(model.features(corpus.subset(ids=fit_ids).texts()), protos, model.cache.word_vectors,
                     seed), fit_ids


def check_heads(run_dir, corpus, aspect_set, aspects: Sequence[str], doc_ids: Sequence[str] | None = None,
                n_pairs: int = 50, seed: int = 0, apply: bool = True) -> dict:
    """Check each head of the run's unified model against the aspect-file floor and the base; keep the best.

    corpus: the run's corpus; doc_ids: the papers checked (default: stage 02's validation
    papers). Returns {"aspects": {aspect: {"head", "aspect file", "base": selectivity, "kept",
    "verdict", and with a label column "labels": {column: Spearman x 100}, "checked by"}},
    "marks": where the aspect sentences came from, "labels": the aspects the labels decided,
    ...}; with apply, a head replaced by the floor or the base is saved into the unified model. Writes unified_model/guard.json.
    A model that is not frozen-mode heads (the GPU fine-tuning path) is reported as not checked.
    """
    run = RunDir(run_dir)
    model = load_model(run.unified_model, run_dir=run)
    aspects = list(aspects)
    if not isinstance(model, PooledAspectModel) or not model.pool:
        report = {"checked": False, "reason": "the unified model is fine-tuned, not frozen-encoder heads"}
        write_json(run.guard, report)
        return report
    ids = [str(d) for d in (doc_ids if doc_ids is not None else run.split()[1])]
    held = corpus.subset(ids=ids)
    texts = held.texts()
    features = model.features(texts)
    try:
        protos = aspect_prototypes(aspect_set, aspects, model.cache.vectors)
    except ValueError as exc:  # an aspect the file says nothing about: nothing to build a floor from
        notice(f"heads not checked against the aspect file: {exc}")
        report = {"checked": False, "reason": str(exc)}
        write_json(run.guard, report)
        return report
    fitted, fit_ids = guard_floor(run, corpus, model, protos, ids, seed)
    marks, source = aspect_sentences(held, aspects, run, features, fitted.scorer, fitted.boilerplate)

    # The floor is a copy of the model's heads; the feature cache (every cached vector) is shared, not copied.
    cache, model.cache = model.cache, None
    floor = copy.deepcopy(model)
    model.cache = floor.cache = cache
    floor.phrase_frequencies = fitted.frequencies
    for a in aspects:
        fitted.place(floor.heads[a], a)

    def encode(batch):
        out = dict(model.encode(batch, aspects=aspects))
        out.update({f"floor:{a}": v for a, v in floor.encode(batch, aspects=aspects).items()})
        out[BASE] = model.base_vectors(batch)
        return out

    untrained = untrained_verdicts(model.extra, aspects)  # the floor, said why
    probe = swap_probe(texts, marks, encode, n_pairs, seed)
    results = {a: probe_verdict(probe["matrix"], a) for a in aspects}
    labelled = label_verdicts(held, aspects, encode(texts)) if texts else {}
    if not labelled and "error" in probe:
        if len(untrained) < len(aspects):
            notice(f"heads not checked: {probe['error']}")
        if apply and untrained:
            save_decisions(model, floor, untrained, run)
        report = {"checked": False, "reason": probe["error"], "marks": source, "aspects": untrained,
                  "replaced": list(untrained)}
        write_json(run.guard, report)
        return report
    for a in aspects:
        results[a] = results[a] | ({"verified": True, "checked by": source} if source == INDEPENDENT_MARKS else
                                   unverified(results[a], a))
    for a, verdict in labelled.items():  # the labels decide; the probe's selectivities stay beside them
        results[a] = {**results[a], **verdict, "verified": True}
    results.update({a: {**results[a], **v} for a, v in untrained.items()})  # whatever the probe read: the floor
    replaced = [a for a in aspects if results[a]["kept"] != "head"]
    report = {"checked": True, "marks": source, "papers": len(texts), "paper_ids": ids, "n_pairs": probe["n_pairs"],
              "floor_papers": len(fit_ids), **fitted.summary(), "labels": sorted(labelled), "aspects": results,
              "replaced": replaced}
    for a in replaced:
        notice(f"{a}: {results[a]['verdict']}")
    for a in aspects:  # a head nobody could check is shipped as trained: the user must know
        if results[a]["verdict"].startswith("not checked"):
            notice(f"{a}: the trained head is kept unchecked ({results[a]['verdict']}); add a label_{a} column "
                   "to the corpus, or more papers, for stage 03 to check it")
    if apply and replaced:
        save_decisions(model, floor, results, run)
    write_json(run.guard, report)
    return report


def swap_probe(texts, marks, encode, n_pairs: int, seed: int) -> dict:
    """`health.hard_negative_probe` of the papers, or {"error": why there is nothing to read} (no paper, no swap)."""
    if not texts:
        return {"matrix": {}, "n_pairs": 0, "error": "the swap probe has no paper to read"}
    try:
        return hard_negative_probe(texts, marks, encode, n_pairs=n_pairs, seed=seed)
    except ValueError as exc:
        return {"matrix": {}, "n_pairs": 0, "error": f"the swap probe found nothing to swap ({exc})"}


def save_decisions(model, floor, results: dict, run: RunDir) -> None:
    """Put the floor's head (`floor`, a model of the same kind) or the base in each replaced head's place, and
    save the unified model with what was kept per aspect."""
    kept = {a: r["kept"] for a, r in results.items()}
    if "aspect file" in kept.values():
        model.phrase_frequencies = floor.phrase_frequencies
    for a, what in kept.items():
        if what == "aspect file":  # the floor's head, its kind of scorer included (`floor.AspectFileFloor.place`)
            model.heads[a].scorer = copy.deepcopy(floor.heads[a].scorer)
            model.heads[a].load_state_dict(floor.heads[a].state_dict())
        elif what == "base":
            model.heads[a].load_state_dict(base_state(model.heads[a]))
    model.save_pretrained(run.unified_model, extra={"guard": kept})


def untrained_verdicts(extra: dict, aspects: Sequence[str]) -> dict:
    """{aspect: `untrained_verdict`} for the heads the unified model's config (`extra`) marks untrained, with the
    reason it records (too few papers: `untaught.too_few_to_train`), else that stage 02 had nothing."""
    reasons = extra.get("untrained_reasons") or {}
    return {a: untrained_verdict(a, reasons.get(a)) for a in aspects if a in (extra.get("untrained") or ())}


def untrained_verdict(aspect: str, why: str | None = None) -> dict:
    """The guard's decision for a head stage 03 could not train (its aspect had no usable view and no sentence
    label, or `why`: too few papers had one, `untaught.too_few_to_train`): the aspect file's head takes its
    place, unchecked, since there is nothing to compare it with."""
    why = why or (f"stage 02 had nothing to learn {aspect} from (no usable LLM answer, no human summary or "
                  "sentence label)")
    return {"kept": "aspect file", "verified": False,
            "verdict": f"no trained head: {why}, so the aspect file's own head reads it"}


def unverified(result: dict, aspect: str) -> dict:
    """A swap-probe verdict whose sentences the aspect file chose, said as unverified, with what would verify it.

    The decision (what is kept) stands: without other evidence it is the best reading there is, but neither
    its numbers nor its words may claim that a head follows the aspect."""
    if result["verdict"].startswith("not checked"):
        return {**result, "verified": False}
    return {**result, "verified": False, "checked by": "the aspect file's own sentences",
            "verdict": (f"unverified: {result['verdict']}. The swapped sentences were chosen by the aspect file that "
                        f"also built its head, so this cannot confirm either; to verify, add a label_{aspect} column "
                        f"(your categories for some papers), a highlights_{aspect} column (the sentences of some "
                        "abstracts that state it, copied into the cell), or run stage 01 with an LLM that labels "
                        "sentences")}


def said_ratio(value: float) -> str:
    """A selectivity as the notices say it: two decimals, or "over 100" for a head that barely moves when the
    other aspects' sentences are swapped (a head reading phrases: its ratio's denominator is near zero)."""
    return f"{value:.2f}" if not np.isfinite(value) or value < 100 else "over 100"


def probe_verdict(matrix: dict, a: str) -> dict:
    """One aspect's swap-probe selectivities (head, aspect file, base), what is kept and why, in words."""
    if a not in matrix:
        return {"head": None, "aspect file": None, "base": None, "kept": "head",
                "verdict": "not checked: no validation paper has a sentence of this aspect alone"}
    head, zero, base = (selectivity(matrix, a, a), selectivity(matrix, f"floor:{a}", a),
                        selectivity(matrix, BASE, a))
    if not (np.isfinite(head) and np.isfinite(base)):  # only this aspect could be swapped: nothing to compare with
        return {"head": head, "aspect file": zero, "base": base, "kept": "head",
                "verdict": f"not checked: no other aspect's sentences could be swapped to compare {a} with"}
    h, z, b = (said_ratio(v) for v in (head, zero, base))
    # Said as what the probe measures, where a vector reads: never that a head ranks papers by the aspect better
    # than the encoder. More selective is not better by labels (`benchmarks/check.py`: on generator c, seed 2,
    # the floor reads disease's sentences 16 times as selectively as the encoder's whole abstract while disease's
    # labels rank the encoder higher); only a label column says that (`label_verdicts`).
    if np.isfinite(head) and np.isfinite(base) and head < base + MARGIN and zero > head:
        kept, verdict = "aspect file", (f"the trained head reads {a}'s sentences less selectively than the encoder's "
                                        f"whole abstract does (selectivity {h} against {b}); replaced by the "
                                        f"aspect file's head ({z})")
    elif np.isfinite(head) and np.isfinite(zero) and zero >= FLOOR_FACTOR * head:
        kept, verdict = "aspect file", (f"the trained head reads {a}'s sentences more selectively than the encoder "
                                        f"does ({h} against {b}) but less than half as selectively as the aspect "
                                        f"file's head ({z}), which replaces it")
    elif np.isfinite(head) and np.isfinite(base) and head < base + MARGIN:
        kept, verdict = "head", (f"the trained head reads {a}'s sentences no more selectively than the encoder "
                                 f"does ({h} against {b}), and the aspect file does no better ({z}): improve the "
                                 "aspect's description and examples, or the summaries")
    else:
        kept, verdict = "head", (f"the trained head reads {a}'s sentences more selectively than the encoder does "
                                 f"({h} against {b}; the aspect file alone: {z})")
    return {"head": head, "aspect file": zero, "base": base, "kept": kept, "verdict": verdict}


def label_verdicts(held, aspects: Sequence[str], vectors: dict) -> dict:
    """{aspect: verdict} for the aspects whose `label_<aspect>` column labels at least MIN_LABELLED of the
    papers with two or more categories: head, aspect file and base scored against the labels (the swap
    probe's selectivities stay beside them). `vectors`: the check's encode() of the papers."""
    out = {}
    for a in aspects:
        column = f"label_{a}"
        labels = held.docs[column] if column in held.docs else None
        if labels is None or labels.notna().sum() < MIN_LABELLED or labels.dropna().astype(str).nunique() < 2:
            continue
        scores = label_scores({"head": vectors[a], "aspect file": vectors[f"floor:{a}"], "base": vectors[BASE]},
                              labels.tolist())
        best = max(("aspect file", "base"), key=lambda c: scores[c])
        said = ", ".join(f"{c} {v:.1f}" for c, v in scores.items())
        if scores[best] > scores["head"] + LABEL_MARGIN:
            kept = best
            verdict = (f"against your {column} column the trained head follows {a} less than the "
                       f"{'encoder' if best == 'base' else 'aspect file'} does (Spearman x100: {said}); "
                       f"replaced by the {'encoder whole abstract' if best == 'base' else 'aspect file head'}"
                       + (": check the aspect file's description of this aspect" if best == "base" else ""))
        else:
            kept, verdict = "head", f"against your {column} column the trained head holds its place ({said})"
        out[a] = {"labels": scores, "kept": kept, "verdict": verdict, "checked by": column}
    return out


def load_guard(run_dir) -> dict | None:
    """The guard's report of a run (unified_model/guard.json), or None when stage 03 did not write one."""
    path = RunDir(run_dir).guard
    return json.loads(path.read_text()) if path.is_file() else None


def guard_table(report: dict):
    """The guard's report as a DataFrame: one row per aspect, the swap probe's selectivities, the label scores
    where a label column decided (`labels: head`, ...), the aspect-file head's share of pooled sentences
    (`aspectfile.corpus_blends`) and of each sentence's words (`aspectfile.corpus_word_shares`), where in an
    abstract it sits and how sure its sentence scores may be (the position mixture's densities and sharpness,
    `mixture.py`, where the floor took it), and what was kept."""
    import pandas as pd

    rows = {}
    for a, r in report.get("aspects", {}).items():
        row = {f"selectivity: {c}": r.get(c) for c in ("head", "aspect file", BASE)}
        row.update({f"labels: {c}": v for c, v in (r.get("labels") or {}).items()})
        if "blends" in report:  # reports written before the blend was read from the corpus have none
            row["aspect file: sentences' share"] = report["blends"].get(a)
        if "word_shares" in report:  # nor, before phrases were pooled, a phrases' share
            row["aspect file: phrases' share"] = report["word_shares"].get(a)
        if report.get("position_mixture"):  # where the aspect sits, first bin to last (1: as any sentence)
            row["aspect file: where it sits"] = " ".join(f"{x:.1f}" for x in report["position_mixture"][a])
        if report.get("mixture_sharpness") is not None:  # how sure the sentence scores may be, read from the corpus
            row["aspect file: sharpness"] = report["mixture_sharpness"]
        rows[a] = {**row, "kept": r["kept"], "verified": r.get("verified")}
    return pd.DataFrame.from_dict(rows, orient="index")
