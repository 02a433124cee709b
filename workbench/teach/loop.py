"""The teaching loop a script or a widget drives: ask for the next sentences, answer, refit, read the embeddings.

    loop = TeachLoop(features, floor, doc_ids, marks=Marks.of_run(run_dir))
    for q in loop.next_questions(10):            # Question(doc_id, sentence, index, why)
        loop.answer(q, "approach")               # or "none", "skip", ["challenge", "outcome"]
    loop.refit()
    vectors = loop.embeddings()                  # {aspect: [N, H] unit rows}, the floor's pooling
    loop.status()                                # per aspect: its marks and how sure its head is

`features` are the corpus's `DocumentFeatures` (the frozen-mode cache's), `floor` the aspect-file floor fitted
to them (`floor.fit_floor`). `askable` limits the questions to some papers (a benchmark keeps its reporting
papers out); every paper is embedded. `seed` seeds the chooser's draws. Marks already kept (a restart, a CSV
of a colleague's) train the first fit. A sentence the floor leaves out as boilerplate is never asked; where a
mark says one states an aspect (a colleague's CSV, say), it is pooled again (`learner.taught_floor`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..embed.boilerplate import keep_mask
from ..embed.features import position_features
from ..embed.floor import AspectFileFloor
from . import chooser
from .learner import TaughtScorer, fit_taught, floor_beliefs, sentence_inputs, taught_floor
from .marks import Mark, Marks, sentence_key


@dataclass(frozen=True)
class Question:
    """One sentence to ask about: its paper, its text, its index in the abstract, and why it was chosen."""
    doc_id: str
    sentence: str
    index: int
    why: str


class TeachLoop:
    """The chooser and the learner over one corpus and its floor (see the module doc)."""

    def __init__(self, features, floor: AspectFileFloor, doc_ids: Sequence[str], marks: Marks | None = None,
                 askable: Sequence[str] | None = None, word_vectors: Callable | None = None, seed: int = 0):
        self.features, self.floor, self.word_vectors = features, floor, word_vectors
        self.rng = np.random.default_rng(seed)  # the chooser's draws
        self.doc_ids = [str(d) for d in doc_ids]
        self.aspects = list(floor.aspects)
        self.marks = Marks() if marks is None else marks
        self.table(askable)
        self.scorer = TaughtScorer(floor.scorer)
        self.refit()

    def table(self, askable) -> None:
        """One row per sentence the floor pools (boilerplate left out): what the learner reads of it, its paper,
        its index, and the floor's beliefs."""
        inputs, doc, index, beliefs = [], [], [], []
        self.row_of: dict[tuple[str, str], int] = {}
        self.where: dict[tuple[str, str], tuple[int, int]] = {}  # every sentence, boilerplate too: (paper, index)
        for i, (sents, texts) in enumerate(zip(self.features.sentences, self.features.sentence_texts)):
            for k, text in enumerate(texts):
                self.where.setdefault((self.doc_ids[i], sentence_key(text)), (i, k))
            if not len(sents):
                continue
            keep = np.flatnonzero(keep_mask(sents, self.floor.boilerplate))
            positions = position_features(len(sents))[keep]
            kept = np.asarray(sents, np.float32)[keep]
            inputs.append(sentence_inputs(self.floor.scorer, kept, positions))
            beliefs.append(floor_beliefs(self.floor.scorer, kept, positions))
            for k in keep:
                self.row_of.setdefault((self.doc_ids[i], sentence_key(texts[k])), len(doc))
                doc.append(i)
                index.append(int(k))
        self.inputs = np.concatenate(inputs)
        self.doc, self.index = np.asarray(doc), np.asarray(index)
        self.beliefs = np.concatenate(beliefs)
        allowed = set(self.doc_ids if askable is None else (str(d) for d in askable))
        self.askable = np.array([self.doc_ids[i] in allowed for i in self.doc])

    # -- asking ----------------------------------------------------------------------
    def marked_rows(self) -> tuple[np.ndarray, list[Mark]]:
        """The table rows of the kept marks that name a sentence of this corpus, and those marks."""
        found = [(self.row_of.get((m.doc_id, m.sentence)), m) for m in self.marks.current()]
        found = [(r, m) for r, m in found if r is not None]
        return np.array([r for r, _ in found], int), [m for _, m in found]

    def next_questions(self, n: int = 10) -> list[Question]:
        """The next `n` sentences to ask about (see `chooser.py`): first each unconfirmed aspect's clearest
        sentence by the aspect file, then a draw that favours uncertain ones, spread over papers and positions."""
        rows, marks = self.marked_rows()
        open_rows = self.askable.copy()
        open_rows[rows] = False
        counts = self.marks.counts(self.aspects)
        # An aspect's tries at its clearest sentences: the marked sentences the floor reads as that aspect.
        read_as = np.argmax(self.beliefs[rows], axis=1) if len(rows) else np.zeros(0, int)
        unconfirmed = [j for j, a in enumerate(self.aspects)
                       if counts[a]["yes"] == 0 and (read_as == j).sum() < chooser.CLEAREST_TRIES]
        first = chooser.clearest(self.beliefs, open_rows, self.doc, unconfirmed)[:n]
        why = {r: f"clearest {self.aspects[j]}" for r, j in zip(first, unconfirmed)}
        open_rows[first] = False
        asked = np.bincount(self.doc[rows], minlength=len(self.doc_ids)).astype(float)
        rest = chooser.draw(chooser.uncertainty(self.scorer.read(self.inputs)), open_rows, self.doc, asked,
                            n - len(first), self.rng, taken=first)
        return [Question(self.doc_ids[self.doc[r]], self.features.sentence_texts[self.doc[r]][self.index[r]],
                         int(self.index[r]), why.get(r, "uncertain")) for r in first + rest]

    def answer(self, question: Question | str, answer, sentence: str | None = None, source: str = "person") -> Mark:
        """Keep an answer about a question (or a paper id and its `sentence`): an aspect, several, "none" or
        "skip". It counts at the next `refit`."""
        if isinstance(question, Question):
            return self.marks.add(question.doc_id, question.sentence, answer, source)
        return self.marks.add(question, sentence, answer, source)

    # -- learning --------------------------------------------------------------------
    def refit(self) -> TaughtScorer:
        """Fit each aspect's scorer to the marks kept now (skips train nothing)."""
        rows, marks = self.marked_rows()
        # A mark naming aspects, none of them this loop's (marks of another aspect set), says nothing here: read
        # as "none" it would teach every aspect that its sentence states none of them.
        used = [k for k, m in enumerate(marks) if not m.skipped and (not m.aspects or set(m.aspects) & set(self.aspects))]
        answers = np.array([[marks[k].states(a) for a in self.aspects] for k in used], bool)
        answers = answers.reshape(-1, len(self.aspects))  # no answer yet: [0, A]
        self.scorer = fit_taught(self.floor.scorer, self.inputs[rows[used]] if used else self.inputs[:0], answers)
        return self.scorer

    def stated(self) -> np.ndarray:
        """[k, H] the vectors of the corpus's sentences a mark says state an aspect (boilerplate included)."""
        found = [self.where.get((m.doc_id, m.sentence)) for m in self.marks.current() if m.aspects]
        rows = [np.asarray(self.features.sentences[i][k], np.float32) for i, k in filter(None, found)]
        return np.stack(rows) if rows else np.zeros((0, self.features.whole.shape[1]), np.float32)

    def taught(self) -> AspectFileFloor:
        """The floor as the marks teach it: its scorer taught, and no boilerplate step the marks contradict."""
        return taught_floor(self.floor, self.scorer, self.stated())

    def embeddings(self) -> dict[str, np.ndarray]:
        """{aspect: [N, H] unit rows}: every paper pooled by the taught scorer through the floor's own steps."""
        return self.taught().embeddings(self.features, self.word_vectors)

    def status(self) -> dict[str, dict]:
        """Per aspect: its marks ("yes", "no"), whether it is taught (else the floor's weights stand) and how
        sure its scorer is of the askable sentences (the share it puts within 0.2 of 0 or 1)."""
        counts = self.marks.counts(self.aspects)
        sure = chooser.certainty(self.scorer.read(self.inputs[self.askable]))
        return {a: {**counts[a], "taught": a in self.scorer.coef, "sure": round(float(sure[j]), 3)}
                for j, a in enumerate(self.aspects)}
