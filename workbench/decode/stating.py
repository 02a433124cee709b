"""Whether a shown sentence states its aspect, not only whether it lies near the tapped point.

The confidence level of a decoded text (`faithfulness.rank_level`) reads the rank of the point among the map's
papers for the text: it says that the text is *near* the paper, which a sentence sharing only the topic
("Dependency Parsing ...") can be. A nearest known statement that is a sentence of another paper's abstract
(the retrieval memory's source "sentence" or "highlight") is also read by the unified model's heads, in its own
abstract: each head weighs the abstract's sentences (`PooledAspectModel.attention`, each head's weights summing
to 1 over the abstract). The sentence's *aspect margin* is the log of the shown aspect's weight on it less the
largest log weight another aspect's head gives it: positive where the sentence is more the shown aspect's than
any other's (`aspect_margin.py`, which also chooses the sentences the retrieval memory holds).

`stated_level` joins the two: a near text (rank level high or medium) whose margin is below `STATES_MARGIN`
reads "topic only" (near, but not more this aspect's sentence than another's), and only one whose margin clears
`HIGH_MARGIN` is "high" (`TAUGHT_HIGH_MARGIN` where a person's marks taught the aspect's head, whose margin reads the
sentence's words), up to `WIDEN` times the rank that makes a text high. A human summary, a highlight and an LLM answer written
for the aspect keep the rank's level (no abstract around them to weigh; an LLM answer is checked by the shown
filter, `embed.grounding`). The constants were chosen on CSAbstruct dev (`benchmarks/aspect_confidence.py`;
docs/results.md has what they give on its test split).
"""

from __future__ import annotations

from typing import Callable, Mapping

from .aspect_margin import aspect_margins, reads_marks
from .faithfulness import rank_level, rank_thresholds

# Chosen on CSAbstruct dev (`benchmarks/aspect_confidence.py --split dev`, stage 03's floor and a head taught from
# 120 marks): the least HIGH_MARGIN at which 80% of the sentences marked high state their aspect under both heads.
STATES_MARGIN = 1.0  # below it, a near sentence reads "topic only": about as much another aspect's as this one's
HIGH_MARGIN = 2.5    # at or above it, a sentence near enough (`WIDEN`) is "high"; below it, never high
# A head taught by marks reads a sentence's words, not its place, so a lower line already means the aspect: on the
# dev taps with a head taught from 120 marks, 1.5 marked 302 sentences high, 87% of them stating the aspect (2.5: 54
# at 85%; the rank alone: 150 at 84%). The floor's margin is where a sentence sits; under 2.5 it is under 70%.
TAUGHT_HIGH_MARGIN = 1.5
WIDEN = 5            # such a sentence reads high up to WIDEN x the rank that makes a text high
TOPIC_ONLY = "topic only"
CHECKED_SOURCES = ("sentence",)  # memory sources that are sentences of an abstract the heads can weigh
LINE = ("A sentence of another paper is also read in its own abstract by the aspect heads: \"topic only\" where it "
        "is near but more another aspect's sentence than this one's, and high only where it reads as the aspect.")


def sentence_weights(model, abstract: str, aspects) -> list[tuple[str, dict[str, float]]]:
    """[(sentence, {aspect: the head's weight on it})] of one abstract, by the unified model's heads; [] for a
    model that does not weigh sentences."""
    if not getattr(model, "pool", False) or not hasattr(model, "attention") or not str(abstract).strip():
        return []
    heads = [a for a in aspects if a in model.aspects]
    if not heads:
        return []
    frame = model.attention([str(abstract)], heads)[0]
    return [(str(s), {a: float(frame[a].iloc[i]) for a in heads}) for i, s in enumerate(frame["sentence"])]


def find_margin(weighed: list[tuple[str, dict[str, float]]], sentence: str, aspect: str) -> float | None:
    """The aspect margin of `sentence` among an abstract's weighed sentences (`sentence_weights`); None where the
    sentence is not one of them (matched on its whitespace-normalised text) or the aspect has no head."""
    key = " ".join(str(sentence).split())
    for text, weights in weighed:
        if " ".join(text.split()) == key and aspect in weights:
            return aspect_margins(weights)[aspect]
    return None


def stated_level(rank, corpus_size, margin: float | None, high_margin: float = HIGH_MARGIN) -> str | None:
    """The level of a shown text from its rank (`rank_level`) and, for a sentence the heads weighed, its aspect
    margin (None: not checked, the rank's level): "topic only" where near (not low) but below `STATES_MARGIN`;
    "high" where within `WIDEN` x the high rank and at or above `high_margin` (`TAUGHT_HIGH_MARGIN` for a head
    taught by marks); a sentence the rank calls high but the margin does not is medium; far is low."""
    level = rank_level(rank, corpus_size)
    if level is None or margin is None:
        return level
    if level != "low" and margin < STATES_MARGIN:
        return TOPIC_ONLY
    high, _ = rank_thresholds(corpus_size)
    if margin >= high_margin and float(rank) <= WIDEN * high:
        return "high"
    return "medium" if level == "high" else level


def with_stated(frame, reader: Callable | None):
    """`describe_with_confidence`'s rows with each checked sentence's "aspect margin" and its level and confidence
    read by `stated_level` (reader(doc_id, sentence, aspect) -> margin or None, e.g. `MarginReader`)."""
    if reader is None or "round-trip rank" not in frame or "source" not in frame or not len(frame):
        return frame
    frame = frame.copy()
    margins, levels, words = [], [], []
    line = getattr(reader, "high_margin", lambda aspect: HIGH_MARGIN)
    for _, row in frame.iterrows():
        margin = reader(row["from paper"], str(row["decoded"]), str(row["aspect"])) \
            if row.get("source") in CHECKED_SOURCES and row.get("from paper") else None
        level = row.get("level")
        if margin is not None and level is not None:
            level = stated_level(row["round-trip rank"], row["corpus size"], margin, line(str(row["aspect"])))
        margins.append(margin)
        levels.append(level)
        words.append(stated_words(row.get("confidence"), level, row.get("level"), row["aspect"], margin))
    frame["aspect margin"], frame["level"], frame["confidence"] = margins, levels, words
    return frame


def stated_words(confidence, level, rank_level_, aspect: str, margin: float | None):
    """The confidence's words once the aspect is checked: the level named anew, and what the check read."""
    if not isinstance(confidence, str) or margin is None or level is None or ":" not in confidence:
        return confidence
    where = confidence.split(":", 1)[1].strip()
    if level == TOPIC_ONLY:
        return f"topic only: near ({where}), but its own abstract reads this sentence as another aspect than {aspect}"
    said = f"its own abstract reads it as {aspect}" if margin >= STATES_MARGIN else \
        f"its own abstract reads it as another aspect more than {aspect}"
    return f"{level} confidence: {where}; {said}"


class MarginReader:
    """The aspect margin of a paper's sentence, its abstract weighed once by the model's heads and kept.

    abstracts: {doc_id: abstract}; model: a callable returning the unified model (loaded on first use)."""

    def __init__(self, abstracts: Mapping[str, str], model: Callable[[], object]):
        self.abstracts, self.model = abstracts, model
        self.weighed: dict[str, list] = {}

    def __call__(self, doc_id, sentence: str, aspect: str) -> float | None:
        doc = str(doc_id)
        if doc not in self.abstracts:
            return None
        if doc not in self.weighed:
            model = self.model()
            self.weighed[doc] = sentence_weights(model, self.abstracts[doc], list(getattr(model, "aspects", [])))
        return find_margin(self.weighed[doc], sentence, aspect)

    def high_margin(self, aspect: str) -> float:
        """The margin at which a near sentence of `aspect` reads "high": lower where marks taught its head."""
        return TAUGHT_HIGH_MARGIN if reads_marks(self.model(), aspect) else HIGH_MARGIN

    def forget(self) -> None:
        """Drop what was weighed (the heads changed)."""
        self.weighed.clear()
