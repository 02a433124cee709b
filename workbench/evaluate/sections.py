"""Notebook 06's sections: each computes its tables, records them in metrics.json and returns what to show.

A section returns the list of what the notebook shows, in order (`core.display.show` shows it): Markdown
text (str), tables (DataFrame, or `IPython.display.HTML` for wide ones) and matplotlib figures. The decisions
a section takes (no ground truth, a truth encoder without summaries, a probe that cannot run, decoders that
are not there) are taken here, where tests reach them; the notebook holds parameters, calls and prose.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping

import numpy as np
import pandas as pd

from ..core.display import html_table, plot_headline_bars, plot_matrix
from ..core.progress import notice
from ..core.rundir import RunDir
from ..decode.decoding import load_decoders
from ..embed.checkpoints import load_model
from ..embed.embeddings import embed_corpus
from ..embed.guard import probe_sentences
from ..measures.evaluation import (correlation_table, cosine_similarity_matrix, diagonal_reading, reading,
                                   retrieval_table)
from ..measures.health import hard_negative_probe, health_reading, health_report, plot_health
from ..measures.runmetrics import RunMetrics
from . import report

NO_TRUTH = "skipped: no ground truth (see above)"


@dataclass
class Evaluation:
    """What every section of stage 06 reads: the run, its held-out papers, the aspects, their embeddings
    (`report.embedding_rows`) and the ground truths under each truth encoder (`report.truths_by_encoder`; the
    first encoder's are the main ones), and the `runmetrics.RunMetrics` each section writes to."""
    run_dir: object
    held: object
    names: list[str]
    by_encoder: Mapping[str, Mapping[str, np.ndarray]]
    truth_encoders: list[str]
    metrics: object
    seed: int = 0
    n_permutations: int = 200
    rows: Mapping = field(default_factory=dict)  # `report.embedding_rows`, set before the correlations
    spearman: pd.DataFrame | None = field(default=None, init=False)  # Table 2, once `correlations` ran

    @classmethod
    def begin(cls, run_dir, held, names, truth_encoders, split: str | None = None, seed: int = 0,
              n_permutations: int = 200) -> "Evaluation":
        """Read the held-out papers' truths under each truth encoder and open metrics.json's first section."""
        encoders = list(truth_encoders)
        by_encoder = report.truths_by_encoder(held, names, encoders, run_dir)
        metrics = RunMetrics(run_dir, {"evaluation": {"documents": len(held), "split": split,
                                                      "truths": list(by_encoder[encoders[0]]),
                                                      "aspects": list(names), "truth_encoders": encoders}})
        return cls(RunDir(run_dir), held, list(names), by_encoder, encoders, metrics, seed, n_permutations)

    def opening(self) -> list:
        """What the evaluation reads: how many papers, which truths, or what a ground truth would need."""
        if self.truths:
            return [f"{len(self.held)} held-out papers; ground truths: {list(self.truths)} (summaries read by "
                    f"{self.truth_encoders[0]}); also read by {self.truth_encoders[1:]}"]
        return [f"{len(self.held)} held-out papers. " + report.missing_truths_note(self.names)]

    @property
    def truths(self) -> Mapping[str, np.ndarray]:
        return self.by_encoder[self.truth_encoders[0]]

    @cached_property
    def similarities(self) -> dict[str, np.ndarray]:
        """{aspect: [n, n]} cosine similarities of the unified model's heads."""
        return {a: cosine_similarity_matrix(self.rows["unified"][a]) for a in self.names}

    @cached_property
    def backbone(self) -> str:
        """The encoder the unified model starts from (`report.backbone_of`)."""
        return report.backbone_of(self.run_dir)

    @cached_property
    def backbone_vectors(self) -> np.ndarray:
        """The backbone's whole-abstract vectors of the held-out papers."""
        return report.encode_texts(self.backbone, self.held.texts(), run_dir=self.run_dir)


def retrieval(ev: Evaluation, baselines=("minilm", "mpnet")) -> list:
    """Table 1: the MRR of finding a paper's second view of an aspect, for the run's models and the baselines."""
    pairs = report.retrieval_pairs(ev.held, ev.names, ev.run_dir)
    encoders = report.retrieval_encoders(ev.run_dir, ev.names, baselines=[b for b in baselines if b != "minilm"])
    table = retrieval_table(encoders, pairs)
    ev.metrics["retrieval_mrr"] = table
    text = diagonal_reading(table.T, references=[r for r in table.index if "off the shelf" in r],
                            pairs={a: len(p[0]) for a, p in pairs.items()})
    ax = plot_matrix(table, title="retrieval MRR (rows: model, columns: aspect)", diagonal=True)
    return [text, ax.figure, table.round(3)]


def correlations(ev: Evaluation, k: int = 10) -> tuple[dict, list]:
    """Tables 2 and 7 and the truths against each other: (`correlation_table`'s result, what to show)."""
    corr = correlation_table(ev.rows, ev.truths, k=k)
    ev.spearman = corr["spearman"]
    ev.metrics["spearman"], ev.metrics["top10"] = corr["spearman"], corr["top10"]
    truth_vs_truth = correlation_table({}, ev.truths, similarities=ev.truths, k=k)["spearman"]
    ev.metrics["truth_correlation"] = truth_vs_truth
    if not ev.truths:
        return corr, [NO_TRUTH]
    return corr, [report.plot_correlation_tables(corr), corr["spearman"].round(1), truth_vs_truth.round(1)]


def headline_bars(ev: Evaluation, corr: dict) -> list:
    """The unified model's heads and the off-the-shelf encoders on each truth, with bootstrap intervals."""
    import matplotlib.pyplot as plt

    shown = [f"unified:{a}" for a in ev.names] + [r for r in corr["spearman"].index if "(abstract)" in r]
    bars = report.headline(corr["per_document"], shown, [t for t in ev.names if t in ev.truths], seed=ev.seed)
    ev.metrics["headline"] = bars
    if not len(bars):
        return []
    n = bars["truth"].nunique()
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, (truth, part) in zip(axes[0], bars.groupby("truth", sort=False)):
        plot_headline_bars(part.set_index("embedding"), ax=ax)
        ax.set_title(f"ground truth: {truth}")
    fig.tight_layout()
    return [fig]


def other_truths(ev: Evaluation, k: int = 10) -> list:
    """Table 2 again under each further truth encoder (its column names suffixed "@encoder")."""
    out, shown = {}, []
    for encoder in ev.truth_encoders[1:] if ev.truths else []:
        if not ev.by_encoder[encoder]:
            shown.append(f"No human-summary truths under {encoder}.")
            continue
        # embedding_rows embeds the human summaries with MiniLM: under MiniLM truths that row is the truth itself.
        rows = {r: v for r, v in ev.rows.items() if not (r == "human summaries" and encoder == "minilm")}
        other = correlation_table(rows, ev.by_encoder[encoder], k=k)
        out[encoder] = {m: report.with_truth_suffix(other[m], encoder) for m in ("spearman", "top10")}
        shown += [report.plot_correlation_tables(other, title=f"truths @{encoder}"), out[encoder]["spearman"].round(1)]
    ev.metrics["other_truth_encoders"] = out
    return shown


def diagonal_p_values(ev: Evaluation) -> list:
    """Appendix A.6: is each head better than every other head on its own aspect's truth?"""
    significance = report.diagonal_significance(ev.similarities, ev.truths, ev.names, n_permutations=ev.n_permutations,
                                         seed=ev.seed)
    ev.metrics["diagonal_p_values"] = significance
    return [significance.round(4)] if ev.truths else [NO_TRUTH]


def heads_against_backbone(ev: Evaluation) -> list:
    """Does each head beat the whole-abstract vector of the encoder it starts from? (per truth encoder)"""
    import matplotlib.pyplot as plt

    backbone_sim = cosine_similarity_matrix(ev.backbone_vectors)
    versus, shown = {}, []
    if ev.truths:
        fig, axes = plt.subplots(1, len(ev.truth_encoders), figsize=(5.5 * len(ev.truth_encoders), 3.4),
                                 squeeze=False)
        for ax, encoder in zip(axes[0], ev.truth_encoders):
            truths = ev.by_encoder[encoder]
            versus[encoder] = report.head_vs_backbone(ev.similarities, truths, ev.names, backbone_sim,
                                               n_permutations=ev.n_permutations, seed=ev.seed)
            intervals = report.head_backbone_intervals(ev.similarities, truths, ev.names, backbone_sim, seed=ev.seed)
            if len(intervals):
                report.plot_head_vs_backbone(intervals, ev.backbone, ax=ax, title=f"summaries read by {encoder}")
        fig.tight_layout()
        shown.append(fig)
    else:
        shown.append(NO_TRUTH)
    for encoder, table in versus.items():
        shown += [f"**Heads against {ev.backbone} (whole abstract), summaries read by {encoder}**",
                  table.round({"head": 1, "backbone (whole abstract)": 1, "gain": 1, "p-value": 4})]
    ev.metrics["evaluation"]["backbone"] = ev.backbone
    ev.metrics["heads_vs_backbone"] = versus  # written with the line above
    return shown


def health(ev: Evaluation, aspect_set, probe_pairs: int = 50) -> list:
    """The heads' health check (no ground truth needed) and stage 03's verdict on each head."""
    probe = None
    if probe_pairs:
        encode = report.probe_encoder(load_model(ev.run_dir.unified_model, run_dir=ev.run_dir), ev.backbone)
        try:  # sentences that state one aspect: human highlights, the LLM's sentence labels, else the aspect file's
            marks, _ = probe_sentences(ev.run_dir, ev.held, aspect_set, ev.names)
            probe = hard_negative_probe(ev.held.texts(), marks, encode, n_pairs=probe_pairs, seed=ev.seed)
        except ValueError as exc:
            notice(f"hard-negative probe skipped: {exc}")
    checked = health_report(ev.rows["unified"], base=ev.backbone_vectors, probe=probe, seed=ev.seed)
    checked["reading"] = health_reading(checked)
    ev.metrics["health"] = checked
    figure = plot_health(checked)
    shown = ([] if figure is None else [figure]) + ["\n".join(f"- {line}" for line in checked["reading"])]
    guard = report.guard_section(ev.run_dir, ev.metrics)  # without guard.json: a warning in metrics.json
    if guard is not None and guard.get("checked"):
        shown.append("**Each head against its encoder** (stage 03's check on papers no stage trained on; "
                      "selectivity, unless a label column decided):\n"
                      + "\n".join(f"- **{a}**: {r['verdict']}" for a, r in guard["aspects"].items()))
    elif guard is not None:
        shown.append(f"Stage 03 did not check the heads against their encoder: {guard['reason']}")
    return shown


def decoding(ev: Evaluation, corpus, decode: bool = True,
             config: report.HeldOutDecodingConfig = report.HeldOutDecodingConfig()) -> tuple[pd.DataFrame | None, list]:
    """Table 3, the reconstructed points and the confidence check on the held-out papers: (the table or None,
    what to show). Skipped, with a notice, without decoders or without papers that have human summaries."""
    from IPython.display import HTML

    try:
        decoders = load_decoders(ev.run_dir, ev.names) if decode else None
    except FileNotFoundError as exc:
        notice(f"decoding table skipped: {exc}")
        return None, []
    if not decoders:
        return None, []
    # A map's points lie among all the run's papers: the confidence check takes each paper's density among them.
    everyone = embed_corpus(ev.run_dir.unified_model, corpus, ev.run_dir, progress=False)
    found = report.held_out_decoding(decoders, ev.rows["unified"], ev.held, ev.names, ev.run_dir, all_embeddings=everyone,
                              config=config)
    for warning in found.get("warnings", []):  # a missing confidence.json: said, and kept in metrics.json
        ev.metrics.warn(warning)
    table, shown = None, []
    if "skipped" in found:
        notice(f"decoding table skipped: {found['skipped']}")
    else:
        table = ev.metrics["decoding"] = found["table"]
        if "reconstruction_cosine" in found:
            ev.metrics["reconstruction_cosine"] = found["reconstruction_cosine"]
        shown.append(HTML(html_table(table.round(3), index=True)))  # 16 columns: the table scrolls, not cut
    if "confidence" in found:
        # Decodings a map marks high confidence should be nearer their human summaries than those marked low.
        check = found["confidence"]
        ev.metrics["decoding_confidence"] = check.to_dict("records")
        shown += [HTML("<b>Confidence of decoded texts</b>, by the level a map would show (stage 04's rule), "
                       "against each paper's human summary"),
                  check.pivot(index="aspect", columns="level", values=["BERTScore vs human summary", "papers"])
                  .reindex(columns=["high", "medium", "low"], level=1).round(3)]
    return table, shown


def extra_tables(ev: Evaluation) -> list:
    """The tables extensions add (`report.register_table`), each recorded under its name."""
    from IPython.display import HTML

    shown = []
    for name, table in report.extra_tables(ev.run_dir, ev.held, ev.names, ev.rows, ev.truths).items():
        ev.metrics[name] = table
        shown += [f"**{name}**", HTML(html_table(table.round(3), index=True))]
    return shown


def closing_reading(ev: Evaluation, decoding_table: pd.DataFrame | None) -> list:
    """The evaluation read in plain sentences (Table 2's diagonal against the encoders, Table 3), recorded."""
    spearman = ev.spearman if ev.spearman is not None else correlations(ev)[0]["spearman"]
    base_rows = [r for r in spearman.index if "(abstract)" in r]
    text = reading(spearman, [t for t in ev.names if t in spearman.columns], "unified", base_rows)
    if decoding_table is not None:
        text += "\n" + report.decoding_reading(decoding_table)
    ev.metrics["reading"] = text
    return [text]
