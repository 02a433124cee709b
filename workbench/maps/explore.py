"""Stage 05: explore a corpus on aspect-weighted maps (paper section 6, appendices A.9-A.11).

`Explorer` ties the pieces of the earlier stages to one map:

    embeddings   the unified model's aspect embeddings of every abstract (stage 03)
    AspectMap    t-SNE of the aspect-weighted distance (tsne.py), refit warm when weights move
    decoders     aspect embedding -> text (stage 04), with the round-trip confidence
    aspect models  embed query texts for aspect search and decoded texts for the round trip
    question axes  yes/no questions answered from an aspect embedding (stage 07, optional):
                 why two papers are close, region labels, hover questions

and hands plain callbacks to the view (`pane.MapPane` in JupyterLab, `page.export_html`
for a standalone page). Everything a callback returns as HTML is escaped here.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..data.corpus import text_or
from ..data.sentences import split_sentences
from ..data.writers import write_records
from ..core.progress import notice
from ..decode.faithfulness import describe_with_confidence
from ..decode.retrieval import own_sentences
from ..decode.stating import MarginReader, with_stated
from ..embed.embeddings import stored_embeddings
from ..teach.saved import place_taught_heads
from .labels import question_labels, statement_labels, term_labels
from .mapview import MapRegions, by_cluster, region_count
from .page import PageOptions, PresetDetails, export_html
from ..questions.overview import compare_html
from .saved import reopen_map, save_map
from .selection import Selection
from .options import MapLayout, PaneCallbacks, PaneState, PaneView
from .pane import MapPane
from .teaching import TeachPanel, attach, corpus_loop, verdict_for
from .readout import decoded_html, hover_meta, llm_statements, own_statements_html, pick_own
from .tsne import AspectMap, normalize_weights
from .tsne_math import unit32
from .weights import FitSettings, fit_weights, map_weights
from ..core.rundir import RunDir
from ..core.vectors import unit_rows


class Explorer:
    """One corpus, its aspect embeddings and a map of them, with decoding, placing and search.

    run_dir: a run with a unified model (stage 03); decoders (stage 04) and aspect models
    (stage 02) are used when present (`decode=False` skips loading the decoders, e.g.
    for a quick map). weights: {aspect: weight} (normalised; None = equal). layout: the map's
    perplexity, method and seed, and which saved map to reopen (`MapLayout`).
    """

    def __init__(self, run_dir, corpus, aspects: Sequence[str] | None = None, weights=None,
                 layout: MapLayout = MapLayout(), decode: bool = True, device: str | None = None,
                 sampling: Mapping | None = None):
        self.run_dir = RunDir(run_dir)
        self.corpus = corpus
        self.device = device
        model_dir = self.run_dir.unified_model
        if not model_dir.is_dir():
            raise FileNotFoundError(f"{model_dir} is missing: run stage 03 (distill) first")
        self.model_dir = model_dir
        # Read from disk, not loaded: the map checks and lays out memory-mapped rows by blocks (`stored.py`).
        emb = stored_embeddings(model_dir, corpus, self.run_dir, progress=False)
        self.aspects = list(aspects) if aspects is not None else list(emb)
        unknown = sorted(set(self.aspects) - set(emb))
        if unknown:
            raise ValueError(f"the unified model has no aspects {unknown}; it has {sorted(emb)}")
        self.embeddings = {a: unit32(np.asarray(emb[a])) for a in self.aspects}
        self.decoders = None
        self.confidence: dict = {}  # stage 04's calibration of the decoded texts' confidence, per aspect
        if decode:
            from ..decode.decoding import load_decoders
            from ..decode.faithfulness import load_confidence

            try:
                self.decoders = load_decoders(self.run_dir, self.aspects, device=device, skip_missing=True)
            except FileNotFoundError as exc:  # a map without text is still a map
                notice(f"decoding off: {exc}")
            try:
                self.confidence = load_confidence(self.run_dir)
            except ValueError as exc:  # decoded text is still shown, with its round trip and no level
                notice(f"confidence levels off: {exc}")
        self.meta = hover_meta(corpus, self.aspects, llm_statements(self.decoders))  # LLM text: the readout's
        # doc_id -> title: a decoded statement names its paper by id
        self.titles = dict(zip(self.meta["doc_id"].astype(str), self.meta["title"].fillna("").astype(str)))
        # The run's saved map when it fits (papers added since are placed on it, nothing else moves), else a fit.
        reopened = reopen_map(self.run_dir, layout.reuse_map, self.meta["doc_id"], self.embeddings, weights,
                              layout.perplexity, layout.seed, layout.method) if layout.reuse_map else None
        self.map = reopened or AspectMap.fit(self.embeddings, weights, perplexity=layout.perplexity,
                                             method=layout.method, seed=layout.seed)
        self.regions, self.term_indexes = MapRegions(), {}  # regions numbered alike across maps; terms per aspect
        if reopened is not None and reopened.engine.sparse and reopened.preparing is None:
            reopened.prepare(background=True)  # the first click on a reopened map need not build its caches
        self.picked = Selection.load(self.run_dir, self.meta["doc_id"])  # kept across kernel restarts
        self.sampling = {"greedy": True, "max_new_tokens": 40, **(sampling or {})}
        self._unified = None
        self._margins = None  # each shown sentence's aspect margin, its abstract weighed once (`decode.stating`)
        self._aspect_models: dict[str, object] = {}
        self._axes: dict | None = None  # question axes, loaded on first use (question_axes)
        self._inverted = None  # (map, (x, y), vectors) of the last inverted spot: a tap and its comparison share it
        self.teach_loop = None  # the teaching loop (`teach`), built on first use

    # ------------------------------------------------------------------ models, lazily

    @property
    def weights(self) -> dict[str, float]:
        """The current map's normalised aspect weights."""
        return dict(self.map.weights)

    @property
    def coords(self) -> np.ndarray:
        """[n, 2] positions of the corpus on the current map."""
        return self.map.coords

    def unified(self):
        """The unified model (loaded on first use)."""
        if self._unified is None:
            from ..embed.checkpoints import load_model

            self._unified = load_model(self.model_dir, device=self.device, run_dir=self.run_dir)
        return self._unified

    def aspect_model(self, aspect: str):
        """The model that embeds text in an aspect's space (loaded on first use): its stage-02 model; for an aspect
        stage 02 trained none of, the unified model, whose aspect-file head made the map's embeddings of it (and
        its retrieval memory); None when the run has neither."""
        if aspect not in self._aspect_models:
            from ..embed.checkpoints import load_model

            folder = self.run_dir.aspect_model(aspect)
            self._aspect_models[aspect] = load_model(folder, device=self.device, run_dir=self.run_dir) \
                if folder.is_dir() else self.unified() if aspect in self.run_dir.untrained_reasons() else None
        return self._aspect_models[aspect]

    def question_axes(self) -> dict:
        """{aspect: QuestionAxes} for this map's aspects that have saved axes (stage 07), loaded on first use.

        {} when the run has none, and then nothing on the map changes. An aspect counts when
        both files `questions.save_mbqa` writes are there (`build_axes` deletes them when no
        question was kept); axes of another embedding size (an older model) are skipped.
        """
        if self._axes is None:
            from ..questions.mbqa import CONFIG_NAME, WEIGHTS_NAME, QuestionAxes

            self._axes = {}
            for a in self.aspects:
                folder = self.run_dir.questions(a)
                if not ((folder / CONFIG_NAME).is_file() and (folder / WEIGHTS_NAME).is_file()):
                    continue
                axes = QuestionAxes.load(self.run_dir, a)
                if axes.config.get("dim") != self.embeddings[a].shape[1]:
                    print(f"question axes of {a} skipped: made for {axes.config.get('dim')}-d embeddings, "
                          f"the unified model's are {self.embeddings[a].shape[1]}-d")
                    continue
                self._axes[a] = axes
        return self._axes

    # ------------------------------------------------------------------ map operations

    def reweight(self, weights, on_frame=None) -> np.ndarray:
        """Refit the map for new aspect weights, warm-started from the current layout (on_frame: a first frame)."""
        self.map = self.map.with_weights(normalize_weights(weights, self.aspects), on_frame=on_frame)
        return self.map.coords

    def apply_taught(self, embeddings, on_frame=None) -> np.ndarray:
        """Taught aspects' new embeddings ({aspect: [N, H]}) onto the map through the weight change's warm path."""
        self.embeddings.update({a: unit_rows(v) for a, v in embeddings.items() if a in self.embeddings})
        if self.teach_loop is not None and self._unified is not None:  # the heads that drew it read and place
            place_taught_heads(self._unified, self.teach_loop, list(embeddings))
            if self._margins is not None:
                self._margins.forget()
        self.map = self.map.with_embeddings(self.embeddings, on_frame=on_frame)
        return self.map.coords

    def teach(self, aspect_set=None, start: bool = True) -> TeachPanel:
        """The teaching widget (`teaching.TeachPanel`): a sentence at a time, answered by button or number key; a
        refit moves the map (`apply_taught`). Its loop (`teaching.corpus_loop`; aspect_set: a preset, a YAML file
        or an AspectSet, None the run's own) is built on first use and kept."""
        def loop():
            self.teach_loop = self.teach_loop or corpus_loop(self.unified(), self.corpus, aspect_set, self.aspects,
                                                             self.run_dir)
            return self.teach_loop
        panel = TeachPanel(loop, self.aspects, self.titles, self.apply_taught, verdict_for(self.run_dir))
        return panel.start() if start else panel

    def fit_weights(self, labels=None, pairs=None, groups=None, negative: Sequence[str] = (), apply: bool = True,
                    settings: FitSettings = FitSettings()):
        """Aspect weights fitted to the user's judgement (weights.fit_weights), and with `apply` the map refit warm.

        One of labels (one per document, corpus order), pairs ([(i, j, similar), ...]) or groups ([[i, j, ...],
        ...]); negative: aspects that may weigh negatively; settings: `weights.FitSettings`. A negative weight
        cannot be drawn: the map uses the positive part (`weights.map_weights`). Returns the WeightFit.
        """
        fit = fit_weights(self.embeddings, labels=labels, pairs=pairs, groups=groups, negative=negative,
                          settings=settings)
        if apply:
            self.reweight(map_weights(fit.weights))
        return fit

    def embed_texts(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Aspect embeddings of new abstracts by the unified model: {aspect: [m, D]}."""
        texts = [str(t).strip() for t in texts]
        if not all(texts):
            raise ValueError("an abstract to place is empty")
        out = self.unified().encode(texts, aspects=self.aspects, max_length=512)
        return {a: unit_rows(out[a]) for a in self.aspects}

    def place_texts(self, texts: Sequence[str]) -> np.ndarray:
        """[m, 2] map positions of new abstracts (the map itself does not move)."""
        return self.map.place(self.embed_texts(texts))

    def describe(self, vectors: Mapping[str, np.ndarray], exclude: str | None = None,
                 point: str | None = None) -> pd.DataFrame:
        """Decode {aspect: [D]} with the run's decoders: each text's kind and source, and, where an aspect model
        exists, its confidence: the rank of the point among the map's papers for it (`describe_with_confidence`),
        and for another paper's sentence whether its own abstract reads it as the aspect (`stating.with_stated`).

        exclude: a paper of the corpus whose own statements the retrieval decoder may not use
        (when that paper is the one decoded, so the text is read from its embedding alone);
        point: what the point is in the confidence's words ("paper", "spot").
        """
        if self.decoders is None:
            raise RuntimeError("this run has no decoders (stage 04), so points cannot be described in words")
        vectors = {a: v for a, v in vectors.items() if a in self.decoders}  # an aspect with no decoder: no text
        models = {a: m for a in vectors if (m := self.aspect_model(a)) is not None}
        frame = describe_with_confidence(self.decoders, vectors, models, self.embeddings, self.sampling, exclude,
                                         levels=self.confidence, point=point)
        if self._margins is None:  # a shown sentence is read in its own abstract by the heads (`decode.stating`)
            self._margins = MarginReader(dict(zip(map(str, self.corpus.ids), self.corpus.texts())), self.unified)
        return with_stated(frame, self._margins)

    def invert(self, x: float, y: float) -> dict[str, np.ndarray]:
        """An embedding per weighted aspect that the map would place at (x, y) (appendix A.10).

        The last spot's result is kept: a tap on an empty spot describes it and then compares
        it with the paper tapped before, and the inversion (an optimisation) need run once.
        """
        spot = (float(x), float(y))
        if self._inverted is None or self._inverted[0] is not self.map or self._inverted[1] != spot:
            self._inverted = (self.map, spot, self.map.invert(np.array(spot, dtype=np.float64)))
        return dict(self._inverted[2])

    def example_queries(self, index: int = 0) -> dict[str, tuple[str, float]]:
        """A search to try, from paper `index`: like it in the second aspect (weight 1), unlike it in the first
        (-0.5). Each query is the paper's summary of that aspect, else its title, else its abstract's first
        sentence: a user's export may have no summaries and no titles."""
        row = self.meta.iloc[index]
        sentences = split_sentences(self.corpus.texts()[index]) or [""]
        fallback = text_or(row.get("title"), sentences[0])
        names = self.aspects[:2] if len(self.aspects) > 1 else self.aspects * 2
        return {names[1]: (text_or(row.get(f"summary_{names[1]}"), fallback), 1.0),
                **({names[0]: (text_or(row.get(f"summary_{names[0]}"), fallback), -0.5)} if len(self.aspects) > 1
                   else {})}

    def search(self, queries: Mapping[str, tuple[str, float]], k: int = 10) -> pd.DataFrame:
        """Papers nearest a query per aspect, each with its own weight (negative: "different in this aspect").

        Query texts are embedded by each aspect's stage-02 model, which reads summary-like
        sentences (a query is one), falling back to the unified model. The score is the
        weighted mean of the per-aspect cosine similarities, sum_a w_a cos_a / sum_a |w_a|.
        """
        active = {a: (str(t).strip(), float(w)) for a, (t, w) in queries.items() if str(t).strip() and w != 0}
        unknown = sorted(set(active) - set(self.aspects))
        if unknown:
            raise ValueError(f"unknown aspects {unknown}; this map has {self.aspects}")
        if not active:
            raise ValueError("give at least one query text with a non-zero weight")
        score = np.zeros(len(self.meta))
        cols = {}
        for aspect, (text, weight) in active.items():
            model = self.aspect_model(aspect)
            if model is not None:
                head = aspect if aspect in model.aspects else model.aspects[0]
                q = model.encode([text], aspects=head)[head][0]
            else:
                q = self.unified().encode([text], aspects=aspect)[aspect][0]
            cos = self.embeddings[aspect] @ unit_rows(q)
            cols[f"{aspect} cosine"] = cos
            score += weight * cos
        score /= sum(abs(w) for _, w in active.values())
        order = np.argsort(-score)[:k]
        table = self.meta.iloc[order][["doc_id", "title"]].copy()
        table.insert(2, "score", score[order])
        for name, values in cols.items():
            table[name] = values[order]
        return table.reset_index(drop=True)

    def region_labels(self, k: int = 8, words: int = 10, aspect: str | None = None,
                      by: str = "terms", fine: bool = False) -> list[tuple]:
        """Labels of the k regions of the map: [(x, y, short text, full text, number), ...], in number order.

        by="terms" (the default): terms that a quarter or more of the region's papers share, more than the
        map's papers do, or "mixed" (`labels.describe_regions`; the aspect is named where the terms come from
        its statements); the full text gives each term's share, then the region's nearest statement (as
        by="statements") where the run has decoders.
        by="statements": the decoded statement itself, cut to `words` words.
        by="questions" labels them with question axes instead (`region_question_labels`).

        Regions are the map's regions (`region_numbers`: numbered as its colours, kept across weight
        changes); fine=True: each cut in up to three sub-regions, numbered "3.1", "3.2". by="statements"
        describes each by decoding the mean embedding of its papers in one aspect (default: the most heavily weighted one). With the retrieval
        decoder the text is the statement of a paper *in that region* nearest to the
        region's mean, and the full text names that paper, so a reader can check it.
        (x, y) is the region's centre; the short text is cut to `words` words.
        """
        if by == "questions":
            return self.region_question_labels(k, words, aspect, fine=fine)
        if by == "terms":
            return self.region_term_labels(k, words, aspect, fine)
        if by != "statements":
            raise ValueError(f"by={by!r}: use 'terms', 'statements' or 'questions'")
        return statement_labels(self, k, words, aspect, fine)

    def region_numbers(self, k: int = 8, fine: bool = False) -> np.ndarray:
        """Per paper, its region's number on the current map (1..; kept across weight changes, `MapRegions`);
        fine=True: its sub-region's, "3.2" (`mapview.fine_regions`, kept across weight changes like the regions)."""
        return self.regions.fine(self.coords, k) if fine else self.regions.numbers(self.coords, k)

    def region_term_labels(self, k: int = 8, words: int = 10, aspect: str | None = None, fine: bool = False) -> list:
        """The k regions labelled by the terms their papers share (`labels.term_labels`; see `region_labels`)."""
        return term_labels(self, k, words, aspect, fine)

    def region_question_labels(self, k: int = 8, words: int = 10, aspect: str | None = None, top: int = 3,
                               fine: bool = False) -> list[tuple]:
        """The k regions labelled by the questions most of their papers answer "yes" (`labels.question_labels`)."""
        return question_labels(self, k, words, aspect, top, fine)

    def hover_questions(self, weights: Mapping[str, float] | None = None, per_aspect: int = 2) -> list[str] | None:
        """Per paper, its `per_aspect` likeliest yes-questions in each weighted aspect with axes (hover text).

        "challenge: Q1 / Q2 | approach: Q3"; a paper with no yes-question in an aspect has no
        entry for it. None when no weighted aspect has axes. weights: default the current ones.
        Plain text: the map's data source carries it and Bokeh escapes it in the tooltip.
        """
        weights = self.weights if weights is None else weights
        axes = {a: ax for a, ax in self.question_axes().items() if weights.get(a, 0) > 0}
        if not axes:
            return None
        parts: list[list[str]] = [[] for _ in range(len(self.meta))]
        for a, ax in axes.items():
            p = ax.answer(self.embeddings[a])
            order = np.argsort(-p, axis=1, kind="stable")[:, :per_aspect]
            for i, row in enumerate(order):
                yes = [ax.questions[q] for q in row if p[i, q] > 0.5]
                if yes:
                    parts[i].append(f"{a}: " + " / ".join(yes))
        return [" | ".join(p) for p in parts]

    # ------------------------------------------------------------------ callbacks for the view

    def own_statements(self, index: int) -> dict[str, tuple[str, str] | None]:
        """{aspect: (kind, text)}: what paper `index` itself states of each aspect of the map, or None.

        Its preferred statement of the retrieval memory (a human summary, an LLM answer the
        grounding check kept, a highlighted sentence, its abstract's sentence: `readout.pick_own`),
        else its abstract's sentence that the unified model weighs most for the aspect (a paper
        of the test split, or a run decoded by the soft-prompt decoder).
        """
        doc = str(self.meta.iloc[int(index)]["doc_id"])
        aspects = self.map_aspects()
        known = {a: (self.decoders[a].memory.of_paper(doc) if self.decoders and hasattr(self.decoders.get(a),
                                                                                         "memory") else [])
                 for a in aspects}
        sentences = {}
        if not all(known.values()):
            abstract = str(self.corpus.docs.iloc[int(index)].get("abstract", ""))
            found = own_sentences(self.unified(), [abstract], aspects) if abstract.strip() else []
            sentences = found[0] if found else {}
        return {a: pick_own(known[a], sentences.get(a)) for a in aspects}

    def _decoded_html(self, vectors: Mapping[str, np.ndarray], exclude: str | None = None,
                      point: str = "paper") -> str:
        if self.decoders is None:
            return "<p><i>No decoders in this run (stage 04), so no description in words.</i></p>"
        frame = self.describe(vectors, exclude, point)
        return decoded_html(frame, self.titles, len(self.meta), self.confidence, point)

    def on_tap(self, x: float, y: float, index: int | None) -> str:
        """HTML for a tapped spot: a paper (abstract, its own statements, the known statements nearest its
        embedding) or an empty spot (inverted, and the known statements nearest it).

        A tapped paper's own statements are hidden from the decoding, so the nearest statements
        say what its embedding is near, each with the other paper it comes from and how many
        papers are nearer that text than the tapped one (the confidence).
        """
        if index is not None:
            row = self.meta.iloc[int(index)]
            abstract = str(self.corpus.docs.iloc[int(index)].get("abstract", ""))
            vectors = {a: self.embeddings[a][int(index)] for a in self.map_aspects()}
            return (f"<h4>{html.escape(str(row['title']))}</h4>"
                    f"<p style='max-height:9em;overflow:auto'>{html.escape(abstract[:1500])}</p>"
                    f"{own_statements_html(self.own_statements(int(index)))}"
                    f"{self._decoded_html(vectors, exclude=str(row['doc_id']))}")
        vectors = self.invert(x, y)
        near = self.map.nearest(np.array([x, y]), k=3)
        titles = "".join(f"<li>{html.escape(str(self.meta.iloc[i]['title']))}</li>" for i in near)
        return (f"<h4>Empty spot ({x:.1f}, {y:.1f})</h4>"
                f"<p>Inverted to an embedding per weighted aspect. Nearest papers on the map:</p>"
                f"<ul>{titles}</ul>"
                f"{self._decoded_html(vectors, point='spot')}")

    def compare_html(self, i: int, j: int | None = None, vectors: Mapping[str, np.ndarray] | None = None,
                     top: int = 3) -> str:
        """Why paper i is close to paper j, or to a point given by its aspect `vectors` (e.g. `invert`):
        per weighted aspect with question axes, the questions they agree and disagree on (escaped HTML)."""
        if (j is None) == (vectors is None):
            raise ValueError("give either a second paper j or the vectors of a point")
        axes = self.question_axes()
        aspects = [a for a in self.map_aspects() if a in axes]
        a = {x: self.embeddings[x][int(i)] for x in aspects}
        if j is not None:
            b = {x: self.embeddings[x][int(j)] for x in aspects}
            other = str(self.meta.iloc[int(j)]["title"])
        else:
            b = {x: np.asarray(vectors[x]) for x in aspects if x in vectors}
            other = "the tapped spot (its inverted embedding)"
        return compare_html(axes, a, b, (str(self.meta.iloc[int(i)]["title"]), other), self.weights, top)

    def on_compare(self, i: int, other) -> str:
        """The pane's comparison: paper i with paper `other` (an index) or with an empty spot `other` = (x, y)."""
        if isinstance(other, tuple):
            return self.compare_html(i, vectors=self.invert(*other))
        return self.compare_html(i, int(other))

    def map_aspects(self) -> list[str]:
        """The aspects with a non-zero weight on the current map."""
        return [a for a in self.aspects if self.weights.get(a, 0) > 0]

    def on_place(self, text: str) -> tuple[float, float, str]:
        """Place a pasted abstract: (x, y, HTML with its nearest papers and decoded aspects)."""
        vectors = self.embed_texts([text])
        (x, y), = self.map.place(vectors)
        features = np.concatenate([np.sqrt(self.weights[a]) * vectors[a][0] for a in self.aspects])
        sims = self.map.features() @ features
        near = np.argsort(-sims)[:3]
        titles = "".join(f"<li>{html.escape(str(self.meta.iloc[i]['title']))} ({sims[i]:.2f})</li>" for i in near)
        decoded = self._decoded_html({a: vectors[a][0] for a in self.map_aspects()}, point="abstract")
        return float(x), float(y), f"<h4>Placed at ({x:.1f}, {y:.1f})</h4><p>Most similar papers:</p><ul>{titles}</ul>{decoded}"

    def pane(self, labels: bool | int = True, color_by=None, label_source: str = "terms", fine: bool = False,
             aspect_set=None):
        """The interactive JupyterLab pane (ipywidgets sliders + Bokeh map).

        label_source: "terms" (shared terms, the nearest statement in the detail), "statements" (decoded) or
        "questions" (question axes) region labels; fine=True labels the sub-regions ("3.2"). Colours are the
        labelled regions, and keep their numbers and colours when the weights change (`self.regions`).
        With question axes, two tapped papers (or a paper and then an empty spot) are compared. Below it, the
        teaching widget (`teach`, aspect_set as there; `pane.teaching`), whose refit moves this map.
        """
        k = labels if isinstance(labels, int) and labels > 1 else 8
        relabel = (lambda: self.region_labels(k, by=label_source, fine=fine)) if labels else None
        color_by = k if labels and color_by is None else color_by
        row = {d: i for i, d in enumerate(self.meta["doc_id"])}
        view = PaneView(labels=relabel() if relabel else None, color_by=color_by, regions=self.regions)
        callbacks = PaneCallbacks(on_tap=self.on_tap, on_place=self.on_place, on_search=self.search, on_labels=relabel,
                                  on_fit_weights=lambda marked: self.fit_weights(pairs=marked, apply=False),
                                  on_compare=self.on_compare if self.question_axes() else None,
                                  on_select=self.select, on_marks=self.set_marks, on_verdict=verdict_for(self.run_dir))
        state = PaneState(selected=[row[d] for d in self.picked.doc_ids if d in row],  # papers it can show
                          marks=[(row[a], row[b], s) for a, b, s in self.picked.marks if a in row and b in row])
        pane = MapPane(self.coords, self.meta, self.aspects, self.weights, on_weights=self.reweight,
                       callbacks=callbacks, view=view, state=state)
        return attach(pane, self.teach(aspect_set, start=False), self.apply_taught)  # started by its button

    # ------------------------------------------------------------------ the user's selection

    @property
    def selection(self) -> pd.DataFrame:
        """The papers selected on the map (lasso, box or region; in the pane or by `select`), from the corpus."""
        return self.picked.papers(self.corpus.docs)

    @property
    def marked_pairs(self) -> pd.DataFrame:
        """The pairs marked similar or not in the pane, by doc_id and title; `in_corpus` is False for a pair
        that names a paper this corpus lacks (kept, not shown on this map)."""
        return self.picked.pairs(self.titles)

    @property
    def not_in_corpus(self) -> pd.DataFrame:
        """The papers selected or marked in this run that this corpus lacks (doc_id, selected, marked_pairs):
        kept in maps/selection.json, never pruned, and shown again on a corpus that holds them."""
        return self.picked.not_in(self.meta["doc_id"])

    def select(self, papers: Sequence) -> pd.DataFrame:
        """Select papers by row index or doc_id (replacing the selection on this map); saved in the run directory.

        Selected papers this corpus lacks stay selected (`not_in_corpus`): this map cannot show them.
        """
        ids = self.meta["doc_id"].tolist()
        picked = [ids[int(p)] if isinstance(p, (int, np.integer)) else str(p) for p in papers]
        unknown = sorted(set(picked) - set(ids))
        if unknown:  # before anything changes, so a typo leaves the selection as it was
            raise ValueError(f"not papers of this map: {unknown[:5]}")
        self.picked.replace_ids(picked, ids)
        self.picked.save(self.run_dir)
        return self.selection

    def select_region(self, region: int, k: int = 8) -> pd.DataFrame:
        """Select the papers of region `region` (its number in the legend and on the map) of the map's k regions."""
        regions = self.region_numbers(k)
        if int(region) not in regions:
            raise ValueError(f"region {region} does not exist: the map's regions are "
                             f"{', '.join(map(str, np.unique(regions)))} (as numbered in the legend)")
        return self.select(np.flatnonzero(regions == int(region)).tolist())

    def set_marks(self, marks: Sequence[tuple[int, int, bool]]) -> None:
        """Keep the pane's marked pairs (row indices) by doc_id in the run directory; pairs marked earlier that
        name a paper this corpus lacks are kept (the pane cannot show them)."""
        ids = self.meta["doc_id"].tolist()  # row -> doc_id
        self.picked.replace_marks([(ids[int(i)], ids[int(j)], bool(s)) for i, j, s in marks], ids)
        self.picked.save(self.run_dir)

    def export_selection(self, path) -> Path:
        """Write the selected papers of this corpus as CSV or RIS (by suffix), for a reference manager;
        `load_corpus` reads it. Selected papers this corpus lacks have no fields to write (`not_in_corpus`)."""
        if self.selection.empty:
            away = len(self.picked.doc_ids)  # all of them, if any, are papers this corpus lacks
            raise ValueError("nothing is selected" + (f" in this corpus ({away} selected papers are not in it: see "
                                                      "explorer.not_in_corpus)" if away else "")
                             + ": lasso or box-select papers in the pane, or call select()")
        return write_records(self.selection, path)

    # ------------------------------------------------------------------ export and storage

    def export(self, path, presets: Mapping[str, Mapping[str, float]] | None = None, labels: bool | int = True,
               title: str = "", color_by=None, label_source: str = "terms") -> Path:
        """A standalone HTML map with a few weight presets precomputed (no kernel needed).

        presets: {name: weights}; default: the current weights, each aspect alone, and all
        equal. Each preset is a warm-started refit from the current map; the current map is
        restored afterwards. labels: region labels per preset (True: 8; a number: that
        many; False or 0: none); each costs one decoded sentence (label_source="statements")
        or a pass of the question classifier ("questions"). With question axes, each paper's
        hover also shows its likeliest yes-questions per weighted aspect of the preset.
        """
        presets = dict(presets or self.default_presets())
        keep, kept_regions = self.map, self.regions
        coords, drawn, used, asked, numbered = {}, {}, {}, {}, {}
        n = 8 if labels is True else int(labels or 0)
        if n and color_by is None:
            color_by = n  # colour by the same regions the labels describe, so the legend's colours match
        k = region_count(color_by) if by_cluster(color_by) else None
        if k:
            kept_regions.numbers(keep.coords, k)  # each preset's regions are numbered as the current map's
        try:
            for name, weights in presets.items():
                self.map = keep.with_weights(normalize_weights(weights, self.aspects))
                self.regions = kept_regions.fork()
                coords[name], used[name] = self.map.coords, dict(self.map.weights)
                numbered[name] = self.regions.numbers(self.map.coords, k) if k else None
                drawn[name] = self.region_labels(n, by=label_source) if n else []
                asked[name] = self.hover_questions(used[name]) if self.question_axes() else None
        finally:
            self.map, self.regions = keep, kept_regions
        # A preset whose weighted aspects have no axes still needs the column: empty hover text.
        questions = {name: q or [""] * len(self.meta) for name, q in asked.items()} if any(asked.values()) else None
        # The papers' own fields travel with the page, so a selection downloads as CSV or RIS.
        return export_html(path, coords, self.meta, labels_by_preset=drawn, title=title, records=self.corpus.docs,
                           options=PageOptions(color_by=color_by),
                           details=PresetDetails(weights_by_preset=used, questions_by_preset=questions,
                                                 regions_by_preset=numbered, verdicts=verdict_for(self.run_dir)()))

    def default_presets(self) -> dict[str, dict[str, float]]:
        """Current weights, equal weights, and each aspect alone."""
        presets = {"current": self.weights, "equal": {a: 1.0 for a in self.aspects}}
        presets.update({f"{a} only": {a: 1.0} for a in self.aspects})
        return presets

    def save_map(self, name: str = "current") -> Path:
        """Store the current map under <run_dir>/maps/<name>/ (safetensors + JSON); a later Explorer reopens it.

        name: a plain folder name (letters, digits, '.', '_', '-'; `saved.check_map_name`), never a path.
        """
        return save_map(self.run_dir, name, self.map, self.meta["doc_id"].tolist())

