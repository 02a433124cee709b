"""Teaching the aspects in a notebook: one sentence at a time inside its abstract, answered by a button or a key.

`TeachPanel` drives a `teach.loop.TeachLoop`. It shows the paper's title and its abstract with the sentence
asked about highlighted, and asks which aspect that sentence states: one button per aspect, then "none",
"several" (the aspects' buttons then pick which, and "several" again keeps them) and "skip". The same answers
come from number keys typed into the panel's key box: 1 to A for the A aspects, A + 1 none, A + 2 several,
A + 3 skip. Why a text box: a plain ipywidget gets no key events, and a box with `continuous_update` sends
each key to the kernel in JupyterLab and Notebook 7 alike, with no front-end code to build or load.

Each answer is on disk in the run directory before the next sentence shows (`teach.marks.Marks`); "refit"
teaches the heads, and the caller's `on_refit` gets the new embeddings (`Explorer` moves its map through the
weight change's warm path). Marks travel as CSV: a download link, and an upload button that adds a
colleague's. Paper text is escaped wherever it is shown.
"""

from __future__ import annotations

import base64
import tempfile
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import yaml

from ..core.display import esc
from ..core.rundir import RunDir
from ..data.aspects import list_presets, load_aspects
from ..embed.aspectfile import aspect_prototypes
from ..embed.guard import guard_floor, load_guard
from ..teach.loop import TeachLoop
from ..teach.marks import NONE, SKIP, Marks, sentence_key
from ..teach.verdict import verdict_lines

SEVERAL = "several"
BATCH = 10  # questions asked between two looks at the chooser: it reads the heads as the last refit left them


def key_actions(aspects: Sequence[str]) -> dict[str, str]:
    """{number key: what it answers}: the aspects first, then none, several and skip."""
    return {str(k + 1): a for k, a in enumerate([*aspects, NONE, SEVERAL, SKIP])}


def abstract_html(title: str, sentences: Sequence[str], index: int) -> str:
    """The paper's title, then its abstract with sentence `index` highlighted; every text escaped."""
    body = " ".join(f"<mark style='background:#ffe58a;padding:1px 2px'><b>{esc(s)}</b></mark>" if k == index
                    else f"<span style='color:#555'>{esc(s)}</span>" for k, s in enumerate(sentences))
    return f"<div style='max-width:760px'><h4 style='margin:4px 0'>{esc(title)}</h4><p>{body}</p></div>"


def status_words(status: Mapping[str, dict]) -> list[str]:
    """`TeachLoop.status()` in plain words, one line per aspect."""
    out = []
    for a, s in status.items():
        head = (f"its sentence scorer is taught and sure of {100 * s['sure']:.0f}% of the sentences it may ask about"
                if s["taught"] else "not taught yet: the aspect file's reading stands")
        out.append(f"{a}: {s['yes']} sentences marked as stating it, {s['no']} as not; {head}")
    return out


def csv_link(text: str) -> str:
    """A link that downloads `text` as a CSV file of marks."""
    data = base64.b64encode(text.encode("utf-8")).decode("ascii")
    return f"<a download='marks.csv' href='data:text/csv;base64,{data}'>download the marks as CSV</a>"


def run_aspect_set(run_dir, aspects: Sequence[str]):
    """The aspect file a run was made with (its params.yaml's `aspects`), else the one shipped preset that names
    every aspect of the map; a ValueError says to pass it where neither is found."""
    params = RunDir(run_dir).params
    spec = (yaml.safe_load(params.read_text(encoding="utf-8")) or {}).get("parameters", {}).get("aspects") \
        if params.is_file() else None
    if spec:
        return load_aspects(spec)
    fitting = [p for p in list_presets() if set(aspects) <= set(load_aspects(p).names)]
    if len(fitting) == 1:
        return load_aspects(fitting[0])
    raise ValueError("the run does not say which aspect file it was made with: pass aspect_set= (a preset's name "
                     "or the YAML file of stage 01)")


def corpus_loop(model, corpus, aspect_set, aspects: Sequence[str], run_dir):
    """A `TeachLoop` over a corpus read by a run's frozen-mode unified model (its feature cache, filled by the
    stages before), the aspect-file floor fitted to it as stage 03 fits it, and the run's marks. aspect_set: an
    `AspectSet`, a preset's name or a YAML file; None: the run's own (`run_aspect_set`)."""
    if not getattr(model, "pool", False) or getattr(model, "cache", None) is None:
        raise ValueError("teaching needs a unified model of frozen-encoder heads (the CPU path of stage 03); "
                         "this run's is fine-tuned")
    if aspect_set is None or isinstance(aspect_set, (str, Path)):
        aspect_set = run_aspect_set(run_dir, aspects) if aspect_set is None else load_aspects(aspect_set)
    protos = aspect_prototypes(aspect_set, list(aspects), model.cache.vectors)
    checked = (load_guard(run_dir) or {}).get("paper_ids") or []
    floor, _ = guard_floor(RunDir(run_dir), corpus, model, protos, checked)  # stage 03's floor, as its marks refit
    return TeachLoop(model.features(corpus.texts()), floor, [str(d) for d in corpus.ids], marks=Marks.of_run(run_dir),
                     word_vectors=model.cache.word_vectors)


def verdict_for(run_dir) -> Callable[[], list[str]]:
    """The verdict lines of a run's aspects in plain words (`teach.verdict`), read afresh at each call: stage 03
    run again with new marks changes them."""
    return lambda: verdict_lines(run_dir)


def attach(pane, panel: "TeachPanel", apply_taught: Callable):
    """Put the teaching widget under a `pane.MapPane` (as `pane.teaching`): a refit redraws that pane's map, a
    first frame and then the settled map, through `apply_taught(embeddings, on_frame)`."""
    panel.on_refit = lambda emb: pane.relayout(lambda on_frame: apply_taught(emb, on_frame))
    pane.layout.children += (panel.box,)
    pane.teaching = panel
    return pane


class TeachPanel:
    """The teaching widget (see the module doc). `make_loop()` builds the `TeachLoop` on first use (`start`);
    `titles`: doc_id -> title; `on_refit(embeddings)`: what a refit's new embeddings change (the map);
    `verdict()`: plain-words verdict lines to show under the marks' counts, or None."""

    def __init__(self, make_loop: Callable[[], object], aspects: Sequence[str], titles: Mapping[str, str],
                 on_refit: Callable[[dict], object] | None = None, verdict: Callable[[], list[str]] | None = None):
        self.make_loop, self.aspects, self.titles = make_loop, list(aspects), titles
        self.on_refit, self.verdict = on_refit, verdict
        self.loop, self.queue, self.picked, self.new_marks = None, [], None, 0  # picked: aspects of "several"
        self.keys = key_actions(self.aspects)
        self.build()

    # -- the widgets

    def build(self) -> None:
        import ipywidgets as widgets

        self.paper = widgets.HTML(verdict_html(self.verdict) + "<em>Start teaching: the workbench reads the "
                                  "corpus's sentences first.</em>")
        self.start_button = widgets.Button(description="start teaching", layout=widgets.Layout(width="auto"))
        self.start_button.on_click(lambda _: self.start())
        self.key_box = widgets.Text(placeholder=f"click here, then type 1-{len(self.keys)}", continuous_update=True,
                                    layout=widgets.Layout(width="230px"))
        self.key_box.observe(self.typed, names="value")
        self.buttons = {}
        for key, action in self.keys.items():
            self.buttons[action] = widgets.Button(description=f"{key} {action}" + ("…" if action == SEVERAL else ""),
                                                  layout=widgets.Layout(width="auto"))
            self.buttons[action].on_click(lambda _, a=action: self.act(a))
        self.refit_button = widgets.Button(description="refit", layout=widgets.Layout(width="auto"))
        self.refit_button.on_click(lambda _: self.refit())
        self.message, self.status, self.export = widgets.HTML(), widgets.HTML(), widgets.HTML()
        self.upload = widgets.FileUpload(accept=".csv", multiple=False, description="import CSV")
        self.upload.observe(self.uploaded, names="value")
        for css, widget in {"paper": self.paper, "start": self.start_button, "keys": self.key_box,
                            "refit": self.refit_button, "message": self.message, "status": self.status,
                            "export": self.export, "import": self.upload}.items():
            widget.add_class(f"wb-teach-{css}")
        for action, button in self.buttons.items():
            button.add_class(f"wb-teach-answer-{self.aspects.index(action) + 1 if action in self.aspects else action}")
        self.box = widgets.VBox([widgets.HTML("<b>Teach the aspects</b> <small>(which aspect does the highlighted "
                                              "sentence state?)</small>"), self.start_button, self.paper,
                                 widgets.HBox([self.key_box, *self.buttons.values()]),
                                 widgets.HBox([self.refit_button, self.message]), self.status,
                                 widgets.HBox([self.export, self.upload])])
        self.enable(False)

    def enable(self, on: bool) -> None:
        for widget in (self.key_box, self.refit_button, *self.buttons.values()):
            widget.disabled = not on

    def _ipython_display_(self):
        from IPython.display import display

        display(self.box)

    # -- what the widgets call (and tests)

    def start(self) -> "TeachPanel":
        """Build the loop (first use only) and show the first sentence."""
        if self.loop is None:
            self.message.value = "<em>Reading the corpus's sentences…</em>"
            try:
                self.loop = self.make_loop()
            except Exception as exc:  # shown, never raised into the kernel
                self.message.value = f"<span style='color:#b00020'>Teaching is not available: {esc(exc)}</span>"
                return self
        self.start_button.layout.display = "none"
        self.enable(True)
        self.message.value = ""
        self.advance()
        self.show_status()
        return self

    @property
    def question(self):
        """The sentence asked about now (a `teach.loop.Question`), or None."""
        return self.queue[0] if self.queue else None

    def advance(self) -> None:
        """Show the next question, asking the chooser for a batch when none is left."""
        if not self.queue:
            self.queue = list(self.loop.next_questions(BATCH))
        q = self.question
        if q is None:
            self.paper.value = "<em>No sentence is left to ask about.</em>"
            return
        i, _ = self.loop.where[(q.doc_id, sentence_key(q.sentence))]
        self.paper.value = abstract_html(self.titles.get(q.doc_id, q.doc_id), self.loop.features.sentence_texts[i],
                                         q.index)

    def typed(self, change) -> None:
        """The key box changed: each typed key is an answer; the box is emptied again."""
        text = str(change["new"])
        if not text:
            return
        self.key_box.value = ""
        for key in text:
            if key in self.keys:
                self.act(self.keys[key])

    def press(self, key: str) -> None:
        """A number key, as typed into the key box."""
        self.typed({"new": key})

    def act(self, action: str) -> None:
        """An aspect's, none's, several's or skip's button (or key). While picking several aspects an aspect's
        toggles it and "several" keeps the picked ones."""
        if self.loop is None or self.question is None:
            return
        if action == SEVERAL:
            if self.picked is None:
                self.picked = set()
                self.message.value = "<em>Several: pick the aspects, then press several again.</em>"
                return
            picked, self.picked = sorted(self.picked), None
            return self.answer(picked or NONE)
        if self.picked is not None and action in self.aspects:
            self.picked ^= {action}
            self.message.value = f"<em>Several: {esc(', '.join(sorted(self.picked)) or 'none yet')}</em>"
            return
        self.picked = None
        self.answer(action)

    def answer(self, answer) -> None:
        """Keep the answer about the sentence shown (on disk before the next shows) and move on."""
        q = self.queue.pop(0)
        mark = self.loop.answer(q, answer)
        self.new_marks += not mark.skipped
        self.message.value = f"<em>Kept: {esc(mark.answer)}. {self.new_marks} new marks since the last refit.</em>"
        self.advance()
        self.show_status()

    def refit(self) -> dict | None:
        """Teach the heads the marks kept now; `on_refit` gets the new embeddings. Returns them."""
        if self.loop is None:
            return None
        try:
            start = time.perf_counter()
            self.loop.refit()
            known = set(getattr(self.loop.scorer, "coef", {}))  # an untaught aspect keeps the map's own
            embeddings = {a: v for a, v in self.loop.embeddings().items() if a in known}
            taught = time.perf_counter() - start
            self.message.value = f"<em>Heads taught in {taught:.1f} s; the map moves…</em>"
            if self.on_refit is not None:
                self.on_refit(embeddings)
            self.message.value = (f"<em>Refit: heads taught in {taught:.1f} s, the map moved in "
                                  f"{time.perf_counter() - start - taught:.1f} s.</em>")
        except Exception as exc:  # shown, never raised into the kernel
            self.message.value = f"<span style='color:#b00020'>Refit failed: {esc(type(exc).__name__)}: {esc(exc)}</span>"
            return None
        self.new_marks, self.queue = 0, []  # the chooser asks again from the new heads
        self.advance()
        self.show_status()
        return embeddings

    def show_status(self) -> None:
        """Per aspect its marks and how sure its head is, the verdict lines where there are some, and the
        CSV link."""
        lines = status_words(self.loop.status())
        self.status.value = ("<ul>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>"
                             + verdict_html(self.verdict))
        self.export.value = csv_link(self.loop.marks.to_csv())

    def uploaded(self, change) -> None:
        """A CSV of marks uploaded: add them (a person's unless the file names another source)."""
        files = change["new"]
        if not files or self.loop is None:
            return
        item = files[0] if isinstance(files, (list, tuple)) else next(iter(files.values()))
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "import.csv"
            path.write_bytes(bytes(item["content"]))
            self.import_csv(path)

    def import_csv(self, path) -> int:
        """Add the marks of a CSV file (`Marks.read_csv`); returns how many sentences it answered."""
        marks = self.loop.marks
        before = set(marks.latest)
        try:
            count = marks.read_csv(path, aspects=self.loop.aspects)
        except (ValueError, KeyError, OSError) as exc:
            self.message.value = f"<span style='color:#b00020'>Import failed: {esc(exc)}</span>"
            return 0
        # Kept either way (a re-export may bring the papers back), but said: they teach nothing now.
        elsewhere = len({(d, s) for d, s, _ in set(marks.latest) - before if (d, s) not in self.loop.where})
        self.message.value = (f"<em>Imported {count} marked sentences; refit to teach them.</em>" + (
            f" <span style='color:#b00020'>{elsewhere} of them are not sentences of this corpus's abstracts "
            f"(other papers, or edited text): kept, but they teach nothing here.</span>" if elsewhere else ""))
        self.queue = [q for q in self.queue if (q.doc_id, q.sentence) not in self.loop.marks]
        self.advance()
        self.show_status()
        return count


def verdict_html(verdict: Callable[[], list[str]] | None) -> str:
    """Stage 03's verdict of each aspect in plain words, as an escaped list ("" without one)."""
    try:
        lines = list(verdict()) if verdict is not None else []
    except Exception as exc:  # the verdict reads files of its own; the marks' counts stand without it
        lines = [f"no verdict: {exc}"]
    return "<b>Verdict</b><ul>" + "".join(f"<li>{esc(v)}</li>" for v in lines) + "</ul>" if lines else ""
