"""Stage 07's report: the overview of the question axes, questions by map region, correlations, reading, summary.json.

    overview(reports, built, emb, encode_s)         one row per aspect: questions, answers, accuracy, cost
    region_questions(built, emb, regions)           the likeliest yes-questions of each region
    question_correlations(built, heads, truths)     do the axes explain the head's similarities? (ratio to the head)
    questions_reading(...)                          a plain reading, one line per aspect
    write_summary(run_dir, ...)                     questions/summary.json

`axes.py` builds the axes (asking the LLM, training the classifier); this module reads
what it built, so that notebook 07 holds parameters, calls, plots and tables only.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..core.files import write_json
from .axes import answering_cost, question_embedding_correlation
from ..core.rundir import RunDir
from ..embed.checkpoints import load_model

RATIO_GOAL = 0.8  # the question axes should reach this share of the head's own correlation with the truth


def encoder_seconds(run_dir, texts: Sequence[str], aspects: Sequence[str], n: int = 8) -> float:
    """Seconds per abstract of the unified model's encoder (every aspect in one pass), its cache bypassed."""
    unified = load_model(RunDir(run_dir).unified_model)
    if getattr(unified, "cache", None) is not None:
        unified.cache = None  # an empty in-memory feature cache: a pass is a pass, not a look-up
    unified.encode(list(texts[-2:]), aspects=list(aspects))  # warm-up
    t0 = time.perf_counter()
    unified.encode(list(texts[:n]), aspects=list(aspects))
    return (time.perf_counter() - t0) / len(texts[:n])


def overview(reports: Mapping[str, dict], built: Mapping, emb: Mapping[str, np.ndarray],
             encode_s: float = 0.0) -> tuple[pd.DataFrame, dict, dict]:
    """(table, costs, classifier seconds): per aspect the questions kept, the answers, the held-out accuracy of
    the classifier against the majority answer, and seconds per paper of MBQA (with and without the encoder)
    against the LLM."""
    rows, costs, classifier_s = [], {}, {}
    for a, r in reports.items():
        axes = built[a]
        row = {"aspect": a, "papers read": r["papers"], "clusters": r["clusters"], "parsed": r["generated"],
               "unique": r["unique"], "kept": r["kept"], "answers": r.get("answers", 0),
               "unparsed": r.get("unparsed", 0), "yes-rate": r.get("yes_rate", np.nan)}
        if axes is not None:
            h, m = r["heldout"], r["majority"]
            costs[a] = answering_cost(axes, emb[a], r["llm_seconds_per_answer"], encode_s)
            classifier = answering_cost(axes, emb[a], r["llm_seconds_per_answer"])
            classifier_s[a] = classifier["mbqa_s_per_paper"]
            row.update({"held-out pairs": h["pairs"], "MBQA accuracy": h["accuracy"],
                        "MBQA balanced": h["balanced_accuracy"], "majority accuracy": m["accuracy"],
                        "majority balanced": m["balanced_accuracy"], "LLM s/paper": costs[a]["llm_s_per_paper"],
                        "MBQA ms/paper (+encoder)": costs[a]["mbqa_s_per_paper"] * 1e3,
                        "classifier µs/paper": classifier["mbqa_s_per_paper"] * 1e6, "speed-up": costs[a]["speedup"]})
        rows.append(row)
    return pd.DataFrame(rows).set_index("aspect"), costs, classifier_s


def region_questions(built: Mapping, emb: Mapping[str, np.ndarray], regions: np.ndarray,
                     top: int = 3) -> pd.DataFrame:
    """One row for all papers and one per region (`regions`: each paper's region number, as the map numbers it,
    `maps.saved.map_regions`): each aspect's likeliest yes-questions."""
    table = []
    for g in [None, *np.unique(regions)]:
        members = np.ones(len(regions), bool) if g is None else regions == g
        row = {"region": "all papers" if g is None else str(g), "papers": int(members.sum())}
        for a, axes in built.items():
            if axes is not None:
                found = axes.region_questions(emb[a][members], top=top)
                row[a] = " | ".join(f"{q} ({share:.0%})" for q, share in found) or "-"
        table.append(row)
    return pd.DataFrame(table)


def question_correlations(built: Mapping, heads: Mapping[str, np.ndarray], truths_by_encoder: Mapping[str, dict],
                          encoders: Sequence[str]) -> pd.DataFrame:
    """Per aspect and truth encoder: Spearman of the question answers and of the head with the truth, their ratio."""
    rows = []
    for a, axes in built.items():
        if axes is None:
            continue
        probs = axes.answer(heads[a])
        for encoder in encoders:
            truth = truths_by_encoder[encoder].get(a)
            if truth is None:
                continue
            raw = question_embedding_correlation(probs, heads[a], truth)
            centred = question_embedding_correlation(probs, heads[a], truth, centre=True)
            rows.append({"aspect": a, "truth read by": encoder, "n questions": raw["questions_n"],
                         "Spearman questions": raw["questions"], "centred": centred["questions"],
                         "Spearman head": raw["head"], "ratio": raw["ratio"], "ratio (centred)": centred["ratio"]})
    return pd.DataFrame(rows, columns=["aspect", "truth read by", "n questions", "Spearman questions", "centred",
                                       "Spearman head", "ratio", "ratio (centred)"])


def questions_reading(reports: Mapping[str, dict], built: Mapping, costs: Mapping, classifier_s: Mapping,
                      correlations: pd.DataFrame, main_encoder: str, weak_llm: bool = False) -> str:
    """Markdown, one line per aspect: what was kept, how well the classifier answers, what it costs, the ratio."""
    main = {r["aspect"]: r for r in correlations.to_dict("records") if r["truth read by"] == main_encoder}
    lines = []
    for a, r in reports.items():
        if built[a] is None:
            lines.append(f"- **{a}**: no question kept ({r['generated']} parsed, {r['unique']} unique): "
                         "no question axes.")
            continue
        h, m = r["heldout"], r["majority"]
        bar = "above" if h["balanced_accuracy"] > m["balanced_accuracy"] else "not above"
        text = (f"- **{a}**: {r['kept']} questions kept of {r['unique']} unique; MBQA balanced accuracy "
                f"{h['balanced_accuracy']:.2f} on {h['pairs']} held-out answers, {bar} the majority answer's "
                f"{m['balanced_accuracy']:.2f}; per paper MBQA answers them in {costs[a]['mbqa_s_per_paper'] * 1e3:.0f}"
                f" ms with the encoder pass ({classifier_s[a] * 1e6:.1f} µs for the classifier alone), the LLM in "
                f"{costs[a]['llm_s_per_paper']:.2f} s.")
        if a in main:
            c = main[a]
            goal = "meets" if c["ratio"] >= RATIO_GOAL else "misses"
            text += (f" Correlation with the truth: questions {c['Spearman questions']:.1f} against head "
                     f"{c['Spearman head']:.1f}, ratio {c['ratio']:.2f} (centred {c['ratio (centred)']:.2f}), "
                     f"{goal} the {RATIO_GOAL} goal.")
        lines.append(text)
    if weak_llm:
        lines.append("- These questions come from the packaged SmolLM2-135M-Instruct, which writes poor questions and "
                     "answers them unreliably: the figures show the pipeline working, not what question axes can "
                     "explain. Use a capable model through the openai backend (backend: openai, model, base_url, "
                     "api_key_env).")
    return "\n".join(lines)


SUMMARY_FIELDS = ("papers", "clusters", "generated", "unique", "kept", "answers", "unparsed", "yes_rate",
                  "llm_seconds_per_answer", "heldout", "majority", "train")


@dataclass(frozen=True)
class SummaryHeader:
    """The top-level fields of questions/summary.json beside its aspects: the LLM backend and model
    that wrote the questions, the stage's settings, the encoder's seconds per paper and the reading."""

    backend: str
    model: str
    settings: Mapping
    encode_s: float
    reading: str


def write_summary(run_dir, reports: Mapping[str, dict], built: Mapping, costs: Mapping, classifier_s: Mapping,
                  correlations: pd.DataFrame, main_encoder: str, header: SummaryHeader):
    """Write questions/summary.json: the header (settings, reading...) and every aspect's numbers; returns the path."""
    records = correlations.to_dict("records")
    aspects = {}
    for a, r in reports.items():
        entry = {f: r.get(f) for f in SUMMARY_FIELDS}
        entry["questions"] = built[a].questions if built[a] is not None else []
        entry["cost"] = {**costs[a], "classifier_s_per_paper": classifier_s[a]} if a in costs else None
        entry["correlation"] = {c["truth read by"]: {f: v for f, v in c.items() if f not in ("aspect", "truth read by")}
                                for c in records if c["aspect"] == a}
        entry["ratio"] = next((c["ratio"] for c in records if c["aspect"] == a and c["truth read by"] == main_encoder),
                              None)
        aspects[a] = entry
    summary = {"backend": header.backend, "model": str(header.model), "encoder_s_per_paper": header.encode_s,
               "reading": header.reading, "settings": dict(header.settings), "aspects": aspects}
    return write_json(RunDir(run_dir).questions() / "summary.json", summary, indent=1)


def compare_html(axes: Mapping, a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray],
                 names: tuple[str, str] = ("A", "B"), weights: Mapping[str, float] | None = None,
                 top: int = 3) -> str:
    """Escaped HTML: per aspect, the questions two points answer alike and differently (`QuestionAxes.compare`).

    axes: {aspect: QuestionAxes}; a, b: {aspect: (D,) embedding}; only aspects in all three
    are listed, in the order of `a`. names: what A and B are (titles), for the header.
    weights: shown beside each aspect. The numbers are the classifier's P(yes) for A and B.
    """
    yn = lambda p: "yes" if p > 0.5 else "no"  # noqa: E731 - QuestionAxes.compare's threshold
    blocks = []
    for aspect in a:
        if aspect not in axes or aspect not in b:
            continue
        agree, disagree = axes[aspect].compare(a[aspect], b[aspect], top)
        rows = [f"<li>both {yn(q['a'])}: {html.escape(q['question'])} <small>({q['a']:.2f}, {q['b']:.2f})</small></li>"
                for q in agree] or ["<li><i>none</i></li>"]
        rows_d = [f"<li>A {yn(q['a'])}, B {yn(q['b'])}: {html.escape(q['question'])} "
                  f"<small>({q['a']:.2f}, {q['b']:.2f})</small></li>" for q in disagree] or ["<li><i>none</i></li>"]
        weight = f" (weight {float(weights[aspect]):.2f})" if weights and aspect in weights else ""
        blocks.append(f"<p style='margin:4px 0'><b>{html.escape(aspect)}</b>{weight}</p>"
                      f"<p style='margin:2px 0'>Agree on:</p><ul>{''.join(rows)}</ul>"
                      f"<p style='margin:2px 0'>Disagree on:</p><ul>{''.join(rows_d)}</ul>")
    if not blocks:
        return "<p><i>No question axes (stage 07) for the weighted aspects, so no questions to compare.</i></p>"
    return (f"<h4>Why close? Questions answered from the embeddings</h4>"
            f"<p><b>A</b>: {html.escape(str(names[0]))}<br><b>B</b>: {html.escape(str(names[1]))}</p>"
            + "".join(blocks))
