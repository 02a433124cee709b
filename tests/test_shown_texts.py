"""What the pane shows at a tap is true or says what it is (issue 42): kinds, statements worth showing, confidence.

A tiny run of 12 real ACLSum abstracts with their human summaries taken away (a user's own
corpus has none), frozen-mode heads with fresh weights (training is not under test) and a
summary store holding what the packaged SmolLM2 actually wrote on ACLSum and CSAbstruct
abstracts: prompt artefacts, an example sentence of the aspect file spliced into an answer, a
generic answer, and a few grounded ones. Stage 04's retrieval memory is built from it as the
stage builds it, and the pane's readout is read as a user reads it.
"""

import json
import re

import numpy as np
import pandas as pd
import pytest

from workbench.core.rundir import RunDir

ASPECTS = ["challenge", "approach"]
D = 16

# What the packaged SmolLM2-135M-Instruct wrote as "sentence" answers (stage 01, acl preset and an aspect file
# of one's own; stored as status "ok" by the parser), or, last, what issue 42 quotes from a run's pane.
SMOLLM2_ARTEFACTS = [
    "### [task and problem setting] | [mention the task and problem setting] | [mention the limitation or gap]",
    "### NOTES ON INTERACTIVE DISPLAY ###",
    "### Abstract 1.1.1.1: A New Language for Sem",
    "...A pretrained encoder is fine-tuned with a contrastive objective that pulls paraphrases together.",
    "...but...",
    "This is a summary of the abstract.",
    "BEGININPUT: a pretrained encoder is fine-tuned with a contrastive objective",
    "### Abstract (1) We propose a new parser.",
    "Abstract (1) We propose a new parser.",
    "We are pleased to announce that the workshop accepted twelve papers.",
    "<|im_start|>assistant The paper proposes a tagger.",
    "Summary: the paper proposes a tagger.",
    '{"sentence": "The paper proposes a tagger."',
    "Mentioning the impact of the implementation of a proposed new annotation scheme on the",
]
# An answer that splices an example sentence of the acl preset into its own continuation: only the prompt's
# words give it away (no marker).
SPLICED = ("A pretrained encoder is fine-tuned with a contrastive objective that pulls paraphrases together, "
           "and the parser is evaluated on treebanks.")
GENERIC = "This is a new way to train a machine learning model."


def test_the_filter_rejects_what_the_packaged_llm_writes_and_keeps_real_sentences():
    from workbench.data.aspects import load_aspects
    from workbench.data.corpus import load_corpus
    from workbench.data.sentences import split_sentences
    from workbench.decode.artefacts import artefact_reason, prompt_text

    prompt = prompt_text(load_aspects("acl"))
    for text in SMOLLM2_ARTEFACTS:
        assert artefact_reason(text, prompt), text
    abstract = "We parse treebanks of twelve languages with a graph-based parser."
    assert "prompt's words" in artefact_reason(SPLICED, prompt, abstract)
    # The words are the paper's own where its abstract has them: not a splice.
    assert artefact_reason(SPLICED, prompt, SPLICED) is None
    # Real statements pass: ACLSum's human summaries and the sentences of its abstracts.
    docs = load_corpus("aclsum:validation").docs.head(25)
    real = [s for a in ASPECTS for s in docs[f"summary_{a}"]]
    real += [s for text in docs["abstract"] for s in split_sentences(text)]
    rejected = [t for t in real if artefact_reason(t, prompt)]
    assert not rejected, rejected[:3]


# --------------------------------------------------------------------------- a run as stage 04 leaves it


def _answer(doc_id, aspect, text, sample=0):
    return {"doc_id": doc_id, "aspect": aspect, "key": aspect, "sample": sample, "status": "ok", "text": text,
            "raw": json.dumps({"sentence": text}), "model": "smollm2-135m-instruct", "prompt_hash": "h"}


@pytest.fixture(scope="module")
def shown_run(tmp_path_factory):
    """(run, corpus, answers, explorer): stages 02-04 of 12 ACLSum abstracts without human statements."""
    from workbench.data.aspects import load_aspects
    from workbench.data.corpus import Corpus, load_corpus
    from workbench.decode.decoding import build_retrieval_decoders, calibrate_confidence, set_default_decoder
    from workbench.embed.distill import DistillConfig
    from workbench.embed.heads import PooledAspectModel
    from workbench.embed.aspect_training import TrainConfig
    from workbench.generate.summaries import summary_store
    from workbench.maps.explore import Explorer
    from workbench.maps.options import MapLayout

    run = tmp_path_factory.mktemp("shown")
    full = load_corpus("aclsum:validation[:12]").docs
    corpus = Corpus(full[["doc_id", "title", "abstract"]].copy(), name="own")
    ids = corpus.ids
    for i, aspect in enumerate(ASPECTS):
        PooledAspectModel("minilm", [aspect], hidden=384, pool=False, rank=TrainConfig().head_rank,
                          seed=i).save_pretrained(RunDir(run).aspect_model(aspect), extra={"mode": "frozen"})
    PooledAspectModel("minilm", ASPECTS, hidden=384, pool=True, rank=DistillConfig().head_rank).save_pretrained(
        RunDir(run).unified_model, extra={"stage": "distill", "mode": "frozen"})
    RunDir(run).write_split(ids[:8], ids[8:])
    grounded = {(ids[0], "challenge"): full.at[0, "summary_challenge"],
                (ids[5], "approach"): full.at[5, "summary_approach"],
                (ids[8], "challenge"): full.at[8, "summary_challenge"]}
    bad = {(ids[0], "approach"): SMOLLM2_ARTEFACTS[7], (ids[1], "challenge"): SPLICED,
           (ids[2], "approach"): SMOLLM2_ARTEFACTS[6], (ids[3], "challenge"): SMOLLM2_ARTEFACTS[9],
           (ids[4], "challenge"): GENERIC, (ids[6], "approach"): SMOLLM2_ARTEFACTS[0]}
    summary_store(run).append([_answer(d, a, t) for (d, a), t in {**grounded, **bad}.items()])
    build_retrieval_decoders(run, corpus, ASPECTS, aspect_set=load_aspects("acl").subset(ASPECTS))
    set_default_decoder(run, "retrieval")
    calibrate_confidence(run, corpus, ASPECTS)
    explorer = Explorer(run, corpus, ASPECTS, layout=MapLayout(perplexity=3.0, seed=0))
    return run, corpus, {"grounded": grounded, "bad": bad}, explorer


@pytest.mark.slow
def test_every_text_the_run_can_show_is_a_statement_worth_showing(shown_run):
    from workbench.decode.artefacts import marker_reason
    from workbench.decode.statements import grounding_verdicts
    from workbench.generate.views import collect_views

    run, corpus, answers, explorer = shown_run
    memories = {a: explorer.decoders[a].memory for a in ASPECTS}
    shown = [(a, t, d, s) for a, m in memories.items() for t, d, s in zip(m.texts, m.doc_ids, m.sources)]
    assert shown and all(marker_reason(t) is None for _, t, _, _ in shown)
    for (doc, aspect), text in answers["bad"].items():
        assert (aspect, text, doc, "llm") not in shown, text
    # An LLM answer is shown only where stage 02's grounding check keeps it.
    verdicts = grounding_verdicts(collect_views(ASPECTS, run, corpus), run, corpus)
    kept = {(a, t) for a in ASPECTS for (d, k), v in verdicts[a].items() if v == "kept"
            for t in [collect_views([a], run, corpus)[a].views[d][k]]}
    assert {(a, t) for a, t, _, s in shown if s == "llm"} <= kept
    assert verdicts["challenge"][(corpus.ids[4], 0)] != "kept"  # the generic answer: not grounded
    assert (("challenge", answers["grounded"][(corpus.ids[0], "challenge")], corpus.ids[0], "llm") in shown)
    # Where no answer is kept, the paper speaks by its own sentence; every train and validation paper speaks (no head
    # here reads marks: each keeps the sentence it weighs most, `aspect_margin.reads_marks`).
    for aspect, memory in memories.items():
        assert set(memory.doc_ids) == set(corpus.ids)  # 8 train + 4 validation papers, test split: none here
        assert set(memory.sources) <= {"llm", "sentence"} and "sentence" in memory.sources
    # What a tap shows as a paper's own statements is free of artefacts too.
    for index in range(len(corpus.ids)):
        for found in explorer.own_statements(index).values():
            assert found is not None and marker_reason(found[1]) is None


@pytest.mark.slow
def test_no_text_joins_sentences_of_two_papers(shown_run, monkeypatch):
    from workbench.data.sentences import split_sentences
    from workbench.decode.retrieval import RetrievalDecoder, StatementMemory

    run, corpus, answers, explorer = shown_run
    abstracts = dict(zip(corpus.ids, corpus.texts()))
    told = {(d, a): t for (d, a), t in {**answers["grounded"], **answers["bad"]}.items()}
    for aspect in ASPECTS:
        memory = explorer.decoders[aspect].memory
        for text, doc, source in zip(memory.texts, memory.doc_ids, memory.sources):
            # Each text is one paper's: its LLM answer, or one sentence of its own abstract.
            assert text == told.get((doc, aspect)) if source == "llm" else text in split_sentences(abstracts[doc])
    # The LM's rewrite reads the statements of one paper, never a mix of the nearest papers'.
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((6, D)).astype(np.float32)
    memory = StatementMemory("approach", [f"s{i}" for i in range(6)], ["p0", "p1", "p2", "p0", "p1", "p2"],
                             ["llm"] * 6, vectors)
    decoder = RetrievalDecoder(memory, None, lm=None, context=3)
    read = []
    monkeypatch.setattr(decoder, "_generate", lambda contexts, n: read.extend(contexts) or [""] * len(contexts))
    monkeypatch.setattr(decoder, "embed", lambda texts: np.zeros((len(texts), D)))
    found = decoder.decode(vectors[:3] + 0.01, rewrite=True)
    for context, best in zip(read, found):
        assert {memory.doc_ids[memory.texts.index(t)] for t in context} == {best["doc_id"]}
    assert all(f["kind"] == "nearest known statement" for f in found)


@pytest.mark.slow
def test_each_shown_text_says_what_it_is(shown_run):
    from workbench.decode.decoding import AspectDecoder
    from workbench.decode.faithfulness import describe_with_confidence
    from workbench.maps.readout import decoded_html

    _, corpus, _, explorer = shown_run
    text = explorer.on_tap(0.0, 0.0, 0)
    assert "Decoded from its embedding" not in text and "What it states" in text
    own, nearest = text.split("Nearest known statements to its embedding")
    assert own.count("(LLM answer, kept by the grounding check)") + own.count("(own sentence)") == len(ASPECTS)
    assert nearest.count("nearest known statement, from “") == len(ASPECTS)
    titles = [t for t in explorer.titles.values() if t]
    assert all(re.search(r"from “([^”]+)”", item).group(1) in {t[:120] for t in titles}
               for item in nearest.split("<li>")[1:])
    assert corpus.docs.at[0, "title"][:40] not in nearest  # never the tapped paper's own statement
    spot = explorer.on_tap(*explorer.coords.max(axis=0) + 5, None)
    assert spot.count("nearest known statement, from “") == len(ASPECTS) and "this spot" in spot

    class Generator:  # the soft-prompt decoder's place: it writes text, no paper states it
        aspects, chat = None, True

        def generate(self, emb, sampling=None, batch_size=16, aspect=None, progress=False):
            return [["a written sentence"] for _ in range(len(emb))]

    frame = describe_with_confidence({"approach": AspectDecoder("approach", Generator())},
                                     {"approach": explorer.embeddings["approach"][0]})
    assert frame.iloc[0]["kind"] == "generated"
    assert "generated (written by the LM" in decoded_html(frame, explorer.titles, len(corpus.ids))


# --------------------------------------------------------------------------- confidence


class TableEncoder:
    """An aspect model stand-in: each known text has a fixed vector."""

    def __init__(self, table, aspect="approach"):
        self.table, self.aspects, self.dim = table, [aspect], D

    def encode(self, texts, aspects=None, **_):
        rows = np.asarray([self.table[t] for t in texts], dtype=np.float32)
        return {self.aspects[0]: rows / np.linalg.norm(rows, axis=1, keepdims=True)}


def test_the_level_is_ordered_by_the_rank_of_the_tapped_paper():
    from workbench.decode.faithfulness import describe_with_confidence, rank_level, rank_thresholds
    from workbench.decode.retrieval import RetrievalDecoder, StatementMemory

    rng = np.random.default_rng(0)
    corpus = rng.standard_normal((400, D)).astype(np.float32)
    corpus /= np.linalg.norm(corpus, axis=1, keepdims=True)
    statement = rng.standard_normal(D).astype(np.float32)
    by_nearness = np.argsort(-(corpus @ statement))  # the papers ordered by their cosine to the statement
    memory = StatementMemory("approach", ["the one statement"], ["other"], ["llm"], statement[None])
    decoder = RetrievalDecoder(memory, None, lm=None)
    encoder = TableEncoder({"the one statement": statement})
    assert rank_thresholds(400) == (4, 40)  # high within the 4 nearest of 400 papers, low beyond the 40 nearest
    levels = {"approach": {"high_within": 4, "low_beyond": 40}}
    got = {}
    for rank in (1, 300):
        paper = int(by_nearness[rank - 1])
        row = describe_with_confidence({"approach": decoder}, {"approach": corpus[paper]}, {"approach": encoder},
                                       {"approach": corpus}, exclude="tapped", levels=levels).iloc[0]
        assert row["round-trip rank"] == rank and row["corpus size"] == 400
        got[rank] = row["level"]
    assert got == {1: "high", 300: "low"}
    order = {"high": 2, "medium": 1, "low": 0}
    for n in (5, 30, 100, 4205):
        seen = [order[rank_level(r, n)] for r in range(1, n + 1)]
        assert seen == sorted(seen, reverse=True) and seen[0] == 2  # never rises as more papers are nearer
    assert rank_thresholds(4205) == (10, 50) and rank_level(265, 4205) == "low"  # issue 42: 264 nearer


@pytest.mark.slow
def test_stage_04_records_the_levels_by_rank_and_an_older_calibration_still_loads(shown_run, tmp_path, capsys):
    from workbench.decode.faithfulness import (confidence_label, held_out_line, load_confidence, rank_level,
                                               save_confidence)

    run = shown_run[0]
    saved = json.loads(RunDir(run).confidence.read_text())["aspects"]
    assert set(saved) == set(ASPECTS) and all(v["corpus size"] == 12 and v["papers"] == 4 for v in saved.values())
    ranks = pd.DataFrame({"round-trip rank": [1, 2, 3, 8, 30, 200, 400, 1], "corpus size": 1000,
                          "bertscore": [0.7, 0.6, 0.7, 0.5, 0.5, 0.4, 0.3, 0.8]})
    levels = save_confidence(tmp_path, {"a": ranks})["a"]
    held = levels["held out"]
    assert held["high"]["papers"] == 5 and held["high"]["median rank"] == 2 and held["low"]["median rank"] == 300
    assert held["high"]["BERTScore"] == pytest.approx(0.66) and held["medium"]["papers"] == 1
    assert "a: high 5 (0.66), medium 1 (0.50), low 2 (0.35)" in held_out_line({"a": levels})
    # An older calibration (round trip and density, terciles) loads, and says that it is older.
    old = {"rule": "z(round-trip cosine) + z(density of the 10 nearest papers), terciles of the validation papers",
           "aspects": {"a": {"cosine": [0.5, 0.1], "density": [0.4, 0.1], "papers": 20, "low_below": -0.5,
                             "high_from": 0.5}}}
    RunDir(tmp_path).confidence.write_text(json.dumps(old))
    capsys.readouterr()
    loaded = load_confidence(tmp_path)
    assert loaded == old["aspects"] and "older calibration" in capsys.readouterr().out
    assert confidence_label(265, 4205, loaded["a"]) == \
        "low confidence: 264 of the 4,205 papers are nearer this text than this paper"
    assert rank_level(1, 4205) == "high" and "older one" in held_out_line(loaded)
