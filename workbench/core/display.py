"""What the notebooks show: HTML tables (paper text always escaped) and matplotlib figures."""

from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd


# A pandas Styler renders cells, index and column labels as raw HTML unless told otherwise: a summary
# or an aspect name holding `<img onerror=...>` ran in an exported report. Every notebook imports this
# module, so every Styler it shows escapes its cells; `styled` escapes the labels as well.
pd.set_option("styler.format.escape", "html")


def styled(frame: pd.DataFrame):
    """frame.style with every cell, index and column label HTML-escaped: the one way notebooks style a table."""
    return frame.style.format(escape="html").format_index(escape="html", axis=0).format_index(escape="html", axis=1)


def esc(value) -> str:
    """HTML-escape any value; None and NaN show as an empty cell."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return html.escape(str(value))


def show(items) -> None:
    """Show a notebook section's items in order (`evaluate.sections`): a str as Markdown, a matplotlib figure as
    its picture (then closed, so that the cell does not show it twice), anything else as IPython shows it."""
    from IPython.display import Markdown, display

    for item in items:
        if isinstance(item, str):
            display(Markdown(item))
        elif hasattr(item, "savefig"):
            import matplotlib.pyplot as plt

            display(item)
            plt.close(item)
        else:
            display(item)


def summary_examples_html(corpus, frame: pd.DataFrame, n_docs: int = 3, max_chars: int = 600,
                          aspects=None) -> str:
    """An HTML table per document: title, abstract, then each aspect's summaries with their status.

    Aspects come in the order of `aspects` (default: as first met in `frame`), the same for
    every document, and each aspect's summaries in sample order. Every piece of text from
    papers or models is escaped, so an abstract holding `<script>` shows as text.
    """
    if frame.empty:
        return "<p><em>No summaries yet.</em></p>"
    order = list(aspects) if aspects is not None else list(dict.fromkeys(frame["aspect"]))
    if "sample" in frame:
        frame = frame.sort_values("sample", kind="stable")
    parts = []
    for doc_id in [d for d in corpus.ids if d in set(frame["doc_id"])][:n_docs]:
        doc = corpus.get(doc_id)
        abstract = str(doc["abstract"])
        if len(abstract) > max_chars:
            abstract = abstract[:max_chars] + " …"
        rows = []
        mine = frame[frame["doc_id"] == doc_id]
        for aspect in order:
            group = mine[mine["aspect"] == aspect]
            if group.empty:
                continue
            errors = group["error"] if "error" in group else [None] * len(group)
            items = "".join(
                f"<li style='color:{'#999' if s != 'ok' else 'inherit'}'>{esc(t if s != 'unparsed' else r)}"
                f"{_status_tag(s, e)}</li>"
                for t, s, r, e in zip(group["text"], group["status"], group["raw"], errors)
            )
            rows.append(f"<tr><th style='text-align:left;vertical-align:top'>{esc(aspect)}</th>"
                        f"<td style='text-align:left'><ul style='margin:0'>{items}</ul></td></tr>")
        parts.append(
            f"<h4>{esc(doc.get('title') or doc_id)} <small>({esc(doc_id)})</small></h4>"
            f"<p style='font-size:90%'>{esc(abstract)}</p><table>{''.join(rows)}</table>"
        )
    return "".join(parts)


def _status_tag(status: str, error) -> str:
    """Nothing for a summary; "[not_applicable]", or "[unparsed: why]" so a report says what was wrong."""
    if status == "ok":
        return ""
    why = f": {esc(error)}" if status == "unparsed" and isinstance(error, str) and error else ""
    return f" <small>[{esc(status)}{why}]</small>"


def plot_status_shares(shares: pd.DataFrame, ax=None):
    """Stacked horizontal bars: per aspect, the share of usable, "Not applicable." and unparsed answers."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * max(len(shares), 1)))
    colours = {"ok": "#4c72b0", "not_applicable": "#dd8452", "unparsed": "#c44e52"}
    left = pd.Series(0.0, index=shares.index)
    for status in ["ok", "not_applicable", "unparsed"]:
        values = shares.get(status, pd.Series(0.0, index=shares.index))
        ax.barh(shares.index, values, left=left, color=colours[status], label=status.replace("_", " "))
        left = left + values
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of answers")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize="small", frameon=True)
    ax.set_title("Answers per aspect")
    return ax


def plot_judge_scores(frame: pd.DataFrame, ax=None):
    """Histogram of the LLM judge's scores per aspect (only parsed judgements)."""
    import matplotlib.pyplot as plt

    ok = frame[frame["status"] == "ok"] if len(frame) else frame
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3))
    if ok.empty:
        ax.text(0.5, 0.5, "no parsed judgements", ha="center", va="center", transform=ax.transAxes)
        return ax
    table = pd.crosstab(ok["score"], ok["aspect"])
    table.plot.bar(ax=ax, rot=0)
    ax.set_xlabel("judge score")
    ax.set_ylabel("pairs")
    ax.set_title("LLM judge scores per aspect")
    return ax


def html_table(frame: pd.DataFrame, max_chars: int | None = 400, index: bool = False) -> str:
    """A DataFrame as an HTML table with every cell escaped (paper text can hold markup) and long text cut."""
    shown = frame.copy()
    if max_chars:
        for col in shown.columns:
            if shown[col].dtype == object:
                shown[col] = shown[col].map(lambda v: v if not isinstance(v, str) or len(v) <= max_chars
                                            else v[:max_chars] + "…")
    table = shown.to_html(escape=True, index=index, border=0)  # escape=True: never render paper text as HTML
    return ('<div style="max-width:100%;overflow-x:auto">'
            '<style>.wb-table td{text-align:left;vertical-align:top;white-space:normal}</style>'
            + table.replace('<table class="dataframe">', '<table class="dataframe wb-table">', 1) + "</div>")


def plot_distill_curves(history, axes=None, title: str = ""):
    """Training loss (per step, and its mean between evaluations) and validation MRR per aspect vs step."""
    import matplotlib.pyplot as plt

    if hasattr(history, "history"):  # a training.DistillResult
        title = title or history.kind
        history = history.history
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    else:
        fig = axes[0].figure
    train, evals = history["train"], history["eval"]
    ax = axes[0]
    if train:
        ax.plot([r["step"] for r in train], [r["loss"] for r in train], color="0.75", lw=1, label="train (per step)")
    later = [e for e in evals if "train_loss" in e]
    ax.plot([e["step"] for e in later], [e["train_loss"] for e in later], "o-", color="C0", label="train (mean)")
    ax.set(xlabel="step", ylabel="training loss", title=f"{title} loss".strip())
    handles, labels = ax.get_legend_handles_labels()
    if evals and "loss" in evals[0] and math.isfinite(evals[0]["loss"]):
        # The validation loss is the MSE to the targets, not the training objective (which adds the
        # sentence labels and the distillation in frozen mode): its own axis, or it sits flat at 0.
        right = ax.twinx()
        line, = right.plot([e["step"] for e in evals], [e["loss"] for e in evals], "s--", color="C3",
                           label="validation (MSE to the targets, right axis)")
        right.set_ylabel("validation MSE", color="C3")
        handles, labels = handles + [line], labels + [line.get_label()]
    ax.legend(handles, labels, fontsize=8)
    ax = axes[1]
    steps = [e["step"] for e in evals]
    for i, aspect in enumerate(evals[0]["aspects"] if evals else []):
        ax.plot(steps, [e["aspects"][aspect]["mrr"] for e in evals], ".-", color=f"C{i}", label=aspect)
    ax.plot(steps, [e["mrr"] for e in evals], "k-", lw=2.5, label="mean")
    best = [e for e in evals if e.get("best")]
    if best:
        ax.axvline(best[-1]["step"], color="0.5", ls=":", lw=1)
    ax.set(xlabel="step", ylabel="validation MRR", title=f"{title} validation MRR (dotted: kept checkpoint)".strip())
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_aspect_correlations(frame, ax=None, title: str = "aspect spaces: mean per-document Spearman"):
    """Heatmap of `aspect_space_correlations` with the values written in the cells."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(1.3 * len(frame) + 2.2, 1.1 * len(frame) + 1.6))
    values = np.asarray(frame, dtype=float)
    image = ax.imshow(values, vmin=min(0.0, np.nanmin(values)), vmax=1.0, cmap="viridis")
    ax.set_xticks(range(len(frame.columns)), frame.columns, rotation=30, ha="right")
    ax.set_yticks(range(len(frame.index)), frame.index)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center",
                    color="black" if values[i, j] > 0.6 else "white", fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.figure.colorbar(image, ax=ax, fraction=0.046)
    return ax


_ASPECT_COLOURS = ["31, 119, 180", "255, 127, 14", "44, 160, 44", "214, 39, 40", "148, 103, 189", "140, 86, 75",
                   "227, 119, 194", "127, 127, 127"]


def sentence_weights_html(frames, titles=None, max_docs: int = 4) -> str:
    """What each aspect head reads: every sentence of a few abstracts, one shaded cell per aspect head.

    `frames` come from `PooledAspectModel.attention(texts)` (a DataFrame per document: the
    sentence, then one weight column per aspect summing to 1). A cell's colour is the
    weight relative to the document's heaviest sentence for that head, and it shows the
    weight itself; the header gives each head's learned share of the whole-abstract vector.
    Paper text is escaped.
    """
    parts = []
    for i, frame in enumerate(frames[:max_docs]):
        aspects = [c for c in frame.columns if c != "sentence"]
        share = frame.attrs.get("whole share", {})
        title = esc(titles[i]) if titles is not None else f"document {i + 1}"
        head = "".join(f"<th style='padding:2px 8px'>{esc(a)}<br><span style='font-weight:normal;font-size:85%'>"
                       f"whole abstract {100 * share.get(a, 0):.0f}%</span></th>" for a in aspects)
        rows = []
        for _, row in frame.iterrows():
            cells = []
            for k, a in enumerate(aspects):
                top = max(float(frame[a].max()), 1e-12)
                alpha = float(row[a]) / top
                colour = _ASPECT_COLOURS[k % len(_ASPECT_COLOURS)]
                cells.append(f"<td style='background:rgba({colour},{0.85 * alpha:.2f});text-align:center;"
                             f"padding:2px 8px'>{100 * float(row[a]):.0f}%</td>")
            rows.append(f"<tr><td style='text-align:left;padding:2px 8px;max-width:60em'>{esc(row['sentence'])}"
                        f"</td>{''.join(cells)}</tr>")
        parts.append(f"<table style='border-collapse:collapse;margin-bottom:1em;font-size:90%'>"
                     f"<caption style='text-align:left;font-weight:bold'>{title}</caption>"
                     f"<tr><th style='text-align:left'>sentence</th>{head}</tr>{''.join(rows)}</table>")
    return "".join(parts)


def plot_head_validation(result, ax=None):
    """Frozen mode: per aspect, agreement with the teacher on validation of the base encoder, untrained and kept heads."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(1.8 * len(result.aspects) + 2.5, 3.4))
    bars = {"base encoder (whole abstract)": (result.reference or {}).get("aspects", {}),
            "untrained head (step 0)": result.baseline["aspects"],
            "kept heads": result.best["aspects"]}
    width = 0.8 / len(bars)
    x = np.arange(len(result.aspects))
    for k, (label, values) in enumerate(bars.items()):
        heights = [values.get(a, {}).get("agreement", np.nan) for a in result.aspects]
        ax.bar(x + (k - (len(bars) - 1) / 2) * width, heights, width, label=label, color=f"C{k}")
    ax.set_xticks(x, result.aspects)
    ax.set(ylabel="agreement with the teacher\n(mean per-paper Spearman)", title="Validation papers")
    ax.legend(fontsize=8, loc="lower right")
    ax.figure.tight_layout()
    return ax


def _row_aspect(row: str) -> str:
    return str(row).rsplit(":", 1)[-1]


def plot_matrix(frame: pd.DataFrame, ax=None, title: str = "", diagonal: bool = True):
    """Heatmap of a correlation table with the values written in; cells where the row's
    aspect (the part after the last ":") equals the column are outlined."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if ax is None:
        _, ax = plt.subplots(figsize=(1.1 * len(frame.columns) + 3, 0.45 * len(frame) + 1.5))
    values = frame.to_numpy(dtype=float)
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", aspect="auto")
    ax.figure.colorbar(image, ax=ax, fraction=0.04)
    ax.set_xticks(range(len(frame.columns)), [str(c) for c in frame.columns], rotation=35, ha="right")
    ax.set_yticks(range(len(frame.index)), [str(r) for r in frame.index])
    finite = values[np.isfinite(values)]
    middle = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    # Two decimals for values on a 0-1 scale (an MRR of 0.86 and one of 0.94 both read "0.9" with one),
    # one for scores x100 (Spearman 50.7).
    digits = 2 if finite.size and np.abs(finite).max() <= 1.5 else 1
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if np.isfinite(values[i, j]):
                ax.text(j, i, f"{values[i, j]:.{digits}f}", ha="center", va="center", fontsize="small",
                        color="black" if values[i, j] > middle else "white")
    if diagonal:
        columns = [str(c) for c in frame.columns]
        for i, row in enumerate(frame.index):
            if _row_aspect(row) in columns:
                j = columns.index(_row_aspect(row))
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    ax.set_xlabel("ground truth")
    ax.set_title(title)
    return ax


def plot_headline_bars(frame_of_mean_low_high: pd.DataFrame, ax=None):
    """Bars of `mean` with error bars from `low` to `high` (e.g. rows of `bootstrap_ci`), one per index entry."""
    import matplotlib.pyplot as plt

    frame = frame_of_mean_low_high
    if ax is None:
        _, ax = plt.subplots(figsize=(0.6 * len(frame) + 3, 3))
    mean = frame["mean"].to_numpy(dtype=float)
    errors = np.vstack([mean - frame["low"].to_numpy(dtype=float), frame["high"].to_numpy(dtype=float) - mean])
    ax.bar(range(len(frame)), mean, yerr=errors, capsize=4, color="#4c72b0")
    ax.set_xticks(range(len(frame)), [str(i) for i in frame.index], rotation=35, ha="right")
    ax.set_ylabel("mean (bootstrap CI)")
    return ax
