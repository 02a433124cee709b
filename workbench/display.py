"""What the notebooks show: HTML tables (paper text always escaped) and matplotlib figures."""

from __future__ import annotations

import html

import pandas as pd


def esc(value) -> str:
    """HTML-escape any value; None and NaN show as an empty cell."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return html.escape(str(value))


def summary_examples_html(corpus, frame: pd.DataFrame, n_docs: int = 3, max_chars: int = 600) -> str:
    """An HTML table per document: title, abstract, then each aspect's summaries with their status.

    Every piece of text from papers or models is escaped, so an abstract holding
    `<script>` shows as text.
    """
    if frame.empty:
        return "<p><em>No summaries yet.</em></p>"
    parts = []
    for doc_id in [d for d in corpus.ids if d in set(frame["doc_id"])][:n_docs]:
        doc = corpus.get(doc_id)
        abstract = str(doc["abstract"])
        if len(abstract) > max_chars:
            abstract = abstract[:max_chars] + " …"
        rows = []
        for aspect, group in frame[frame["doc_id"] == doc_id].groupby("aspect", sort=False):
            items = "".join(
                f"<li style='color:{'#999' if s != 'ok' else 'inherit'}'>{esc(t if s != 'unparsed' else r)}"
                f"{'' if s == 'ok' else f' <small>[{esc(s)}]</small>'}</li>"
                for t, s, r in zip(group["text"], group["status"], group["raw"])
            )
            rows.append(f"<tr><th style='text-align:left;vertical-align:top'>{esc(aspect)}</th>"
                        f"<td style='text-align:left'><ul style='margin:0'>{items}</ul></td></tr>")
        parts.append(
            f"<h4>{esc(doc.get('title') or doc_id)} <small>({esc(doc_id)})</small></h4>"
            f"<p style='font-size:90%'>{esc(abstract)}</p><table>{''.join(rows)}</table>"
        )
    return "".join(parts)


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
