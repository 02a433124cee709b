"""A run's HTML reports: self-contained files (no script from outside the file), in a folder that belongs to one run.

`export_html` turns an executed notebook into a report for a reader: results only, the run's
parameters as one table at the top, where the results came from at the end. The report runs
nothing it did not bring: nbconvert's lab template would load require.js, MathJax and Mermaid
from cdnjs and, for a notebook with widgets, `@jupyter-widgets/html-manager@*` (any future
version) from unpkg to draw the widget state, which holds paper titles. Here those scripts are
left out and each widget is shown as what it reads as without a widget manager
(`static_widgets`): a progress bar as its last text, anything else as its plain-text fallback.
The standalone map `05_map.html` inlines BokehJS for the same reason (maps/page.py).

`claim_report_dir` keeps two runs from sharing a report folder: `reports/<run name>/` is the
same for `x/exp` and `y/exp`, so the folder records the run it belongs to (REPORTS_MARKER) and
another run is refused before it writes anything, with the way to give it a folder of its own.
"""

from __future__ import annotations

import hashlib
import html
import json
import platform
import re
from importlib import metadata
from pathlib import Path

from ..core.files import write_json, write_text
from .runconfig import RunConfigError, without_iri_format_checker

REPORTS_MARKER = ".workbench-reports.json"
REPORTS_KIND = "workbench reports"  # what the marker's "kind" says: a stray JSON file of that name is not one
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_NOTE = "[an interactive widget: it works in JupyterLab with a live kernel; open {notebook} there to use it]"

# nbconvert's lab template with every script it would fetch from elsewhere left out: require.js (only
# a notebook's AMD outputs need it; ours have none), MathJax (the notebooks hold no formulas), Mermaid
# and the widget manager. Inline scripts the outputs carry themselves stay.
SELF_CONTAINED_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


# --------------------------------------------------------------------------- whose folder it is


def report_owner(report_path: Path) -> str | None:
    """The run directory whose reports `report_path` holds, or None for a folder no run has claimed yet.

    From the folder's marker; in a folder of reports written before the marker existed, from the
    `run_dir` row of a report's parameters table. RunConfigError for a marker that cannot be read.
    """
    marker = report_path / REPORTS_MARKER
    if marker.is_file():
        try:
            owner = json.loads(marker.read_text(encoding="utf-8"))
            if owner.get("kind") == REPORTS_KIND and isinstance(owner.get("run_dir"), str):
                return owner["run_dir"]
        except (OSError, ValueError, AttributeError):
            pass
        raise RunConfigError(f"{marker} should say which run's reports the folder {report_path} holds, and cannot "
                             f"be read; delete it if the folder is this run's, or set another report_dir")
    for report in sorted(report_path.glob("[0-9][0-9]_*.html")) if report_path.is_dir() else []:
        found = re.search(r"<td><code>run_dir</code></td><td>(.*?)</td>", report.read_text(errors="replace"))
        if found:
            return html.unescape(found.group(1))
    return None


def claim_report_dir(report_path: Path, run_path: Path) -> Path:
    """Make `report_path` the report folder of the run at `run_path`; returns the marker's path.

    Refused (RunConfigError, before the run writes anything) when the folder holds another run's
    reports: `x/exp` and `y/exp` both default to `reports/exp/`, and the second would overwrite
    the first's reports and its `05_map.html`. The message names both runs and how to go on.
    """
    report_path, run_path = Path(report_path).resolve(), Path(run_path).resolve()
    owner = report_owner(report_path)
    if owner is not None and Path(owner).expanduser().resolve() != run_path:
        raise RunConfigError(
            f"the report folder {report_path} holds the reports of the run {owner}, and this run is {run_path}: "
            f"runs whose folders have the same name share reports/<name>/, and this run would overwrite them. Give "
            f"this run a report folder of its own with a top-level `report_dir: reports/<another name>` in the "
            f"parameters file (--params), or move the other run's reports away (or delete "
            f"{report_path / REPORTS_MARKER}) to hand the folder to this run")
    return write_json(report_path / REPORTS_MARKER, {"kind": REPORTS_KIND, "run_dir": str(run_path)})


# --------------------------------------------------------------------------- the report


def export_html(notebook: Path, html_path: Path, code: bool = False) -> Path:
    """Export an executed notebook as a standalone HTML report: images inlined, no script from elsewhere.

    For a reader, not a developer: by default no code and no cell counters, the run's parameters
    as one table at the top and where the results came from at the end (package versions, the
    corpus file's hash, the parameters). code=True (`workbench run --report-code`) keeps the code.
    Widgets are shown as text (`static_widgets`); the file opens the same offline.
    """
    without_iri_format_checker()
    import nbformat
    from nbconvert import HTMLExporter

    nb = nbformat.read(notebook, as_version=4)
    params = nb.metadata.get("papermill", {}).get("parameters", {})
    if not code:
        nb.cells = [c for c in nb.cells if not (c.cell_type == "code" and {"parameters", "injected-parameters"}
                                                & set(c.metadata.get("tags", [])))]
        at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0  # after the notebook's title
        nb.cells.insert(at, nbformat.v4.new_markdown_cell(parameters_markdown(params)))
        nb.cells.append(nbformat.v4.new_markdown_cell(provenance_markdown(params)))
    static_widgets(nb, Path(notebook).name)
    exporter = HTMLExporter(template_name="lab", exclude_input=not code, exclude_input_prompt=not code,
                            exclude_output_prompt=not code, raw_template=SELF_CONTAINED_TEMPLATE)
    body, _ = exporter.from_notebook_node(nb)
    return write_text(html_path, body)


def static_widgets(nb, notebook_name: str = "the executed notebook") -> None:
    """Show each widget output as text and drop the notebook's widget state (in place).

    Without a widget manager (a script from a CDN) a widget draws nothing. A progress bar (tqdm's
    HBox of text, bar, text) becomes its last state as text, as the terminal showed it; another
    widget its own plain-text fallback where it has one (not the bare `VBox(children=...)` repr),
    else a line saying where it works.
    """
    state = nb.metadata.pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            data = output.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            view = data.pop(WIDGET_VIEW)
            model_id = view.get("model_id") if isinstance(view, dict) else None
            text = progress_text(model_id, state) or _own_fallback(data.get("text/plain"))
            data["text/plain"] = text or WIDGET_NOTE.format(notebook=notebook_name)


def progress_text(model_id: str | None, state: dict) -> str | None:
    """A tqdm widget bar's last state as text ("desc: 100%|██████████| 3/3 [...]"), None for another widget."""
    model = state.get(model_id or "", {})
    children = model.get("state", {}).get("children") or []
    if model.get("model_name") != "HBoxModel" or len(children) != 3:
        return None
    left, middle, right = (state.get(str(c).removeprefix("IPY_MODEL_"), {}).get("state", {}) for c in children)
    if "max" not in middle:
        return None
    text = [html.unescape(re.sub(r"<[^>]+>", "", str(w.get("value") or ""))).replace("\u2007", " ").strip()
            for w in (left, right)]
    filled = min(10, int(10 * (middle.get("value") or 0) / (middle["max"] or 1)))
    return f"{text[0]}|{'█' * filled}{' ' * (10 - filled)}| {text[1]}"


def _own_fallback(text) -> str | None:
    """A widget's plain text when it says something: ipywidgets' default repr is `ClassName(field=...)`."""
    if isinstance(text, list):
        text = "".join(text)
    if not isinstance(text, str) or not text.strip() or re.match(r"^[A-Za-z_]\w*\(.*\)$", text.strip(), re.S):
        return None
    return text


def parameters_markdown(params: dict) -> str:
    """The run's parameters as one table: an HTML block (no Markdown is read inside it), every value escaped."""
    def shown(value):
        return html.escape(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))

    rows = "".join(f"<tr><td><code>{html.escape(str(k))}</code></td><td>{shown(v)}</td></tr>" for k, v in params.items())
    table = f"<table><tr><th>parameter</th><th>value</th></tr>{rows}</table>" if rows else "<p>the notebook's defaults</p>"
    return f"<div class=\"wb-parameters\"><p><b>Parameters of this run</b></p>{table}</div>"


def provenance_markdown(params: dict) -> str:
    """Where the results came from: versions, the corpus file's hash, the platform (escaped Markdown)."""
    lines = []
    for package in ("semcse-workbench", "torch", "transformers", "sentence-transformers", "scikit-learn",
                    "openTSNE", "bokeh", "pandas", "numpy"):
        try:
            lines.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            continue
    corpus = params.get("corpus")
    if isinstance(corpus, str) and Path(corpus).is_file():
        digest = hashlib.sha256(Path(corpus).read_bytes()).hexdigest()[:16]
        lines.append(f"corpus file {Path(corpus).name}, sha256 {digest}…")
    elif corpus:
        lines.append(f"corpus {corpus}")
    lines.append(f"Python {platform.python_version()} on {platform.system()} {platform.machine()}")
    return ("<div class=\"wb-provenance\"><p><b>Provenance</b>: " + "; ".join(html.escape(line) for line in lines)
            + ".</p></div>")
