"""Views for stage 02: LLM summaries plus human views, never the test split's human ones."""

import json
import random

from workbench.data.corpus import load_corpus
from workbench.generate.views import collect_views, split_documents
from workbench.core.rundir import RunDir


def write_store(run_dir, records):
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "summaries.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")


def test_human_views_of_the_test_split_never_appear(tmp_path):
    corpus = load_corpus("aclsum")
    test_ids = set(corpus.docs.loc[corpus.docs["split"] == "test", "doc_id"])
    train_id = corpus.docs.loc[corpus.docs["split"] == "train", "doc_id"].iloc[0]
    test_id = sorted(test_ids)[0]
    write_store(tmp_path, [
        {"doc_id": test_id, "aspect": "challenge", "key": "challenge", "prompt_hash": "p", "model": "m", "sample": 0, "status": "ok", "text": "llm view"},
        {"doc_id": test_id, "aspect": "challenge", "key": "challenge", "prompt_hash": "p", "model": "m", "sample": 1, "status": "not_applicable",
         "text": "Not applicable."},
    ])
    views = collect_views(["challenge", "approach", "outcome"], run_dir=tmp_path, corpus=corpus)
    human = collect_views(["challenge", "approach", "outcome"], corpus=corpus)
    for aspect_views in human.values():
        assert not set(aspect_views.views) & test_ids
        assert len(aspect_views.docs(2)) > 100  # train + validation docs have summary + highlights
    # nothing of a test paper is a view, its LLM summaries included: stage 06 evaluates on these papers
    assert not set(views["challenge"].views) & test_ids
    summary = corpus.get(train_id)["summary_challenge"]
    assert " ".join(summary.split()) in views["challenge"].views[train_id]
    # stage 06's own pairs keep them (exclude_splits=()); "Not applicable." is never a view
    evaluation = collect_views(["challenge"], run_dir=tmp_path, corpus=corpus, exclude_splits=(), warn_unknown=False)
    assert evaluation["challenge"].views[test_id][0] == "llm view"
    assert evaluation["challenge"].sources[test_id][0] == "llm"


def test_held_out_papers_are_not_summarised_and_a_test_only_corpus_is_not_held_out(tmp_path):
    from workbench.evaluate.report import evaluation_corpus
    from workbench.generate.views import held_out_ids, trainable

    corpus = load_corpus("aclsum")
    test_ids = set(corpus.docs.loc[corpus.docs["split"] == "test", "doc_id"])
    assert held_out_ids(corpus) == test_ids and len(test_ids) == 100
    assert set(trainable(corpus).ids) == set(corpus.ids) - test_ids  # what stage 01 summarises
    # aclsum:test alone: the user chose those papers; stage 02 trains on them, so stage 06 cannot use them
    only_test = load_corpus("aclsum:test[:12]")
    assert held_out_ids(only_test) == set() and trainable(only_test).ids == only_test.ids
    run = tmp_path / "run"
    (RunDir(run).aspect_models).mkdir(parents=True)
    (RunDir(run).split_file).write_text(json.dumps({"train": only_test.ids[:9],
                                                                  "validation": only_test.ids[9:]}))
    assert evaluation_corpus(only_test, run).ids == only_test.ids[9:]
    # a test-only corpus the run never trained on is all held out
    assert evaluation_corpus(load_corpus("aclsum:test[20:30]"), run).ids == load_corpus("aclsum:test[20:30]").ids
    assert len(evaluation_corpus(corpus, run)) == 100


def test_an_own_corpus_is_also_evaluated_on_labelled_papers_no_stage_saw(tmp_path):
    import pandas as pd
    from workbench.data.corpus import Corpus
    from workbench.evaluate.report import evaluation_corpus

    frame = pd.DataFrame({"doc_id": [f"p{i}" for i in range(30)], "title": "t",
                          "abstract": [f"Abstract number {i}." for i in range(30)],
                          "label_disease": [None if i % 5 == 0 else f"d{i % 3}" for i in range(30)]})
    corpus = Corpus(frame)
    run = tmp_path / "run"
    (RunDir(run).aspect_models).mkdir(parents=True)
    (RunDir(run).split_file).write_text(json.dumps({"train": [f"p{i}" for i in range(6)],
                                                    "validation": ["p6", "p7", "p8"]}))
    assert evaluation_corpus(corpus, run).ids == ["p6", "p7", "p8"]  # by default the validation papers only
    held = evaluation_corpus(corpus, run, unseen=8, seed=1)
    extra = held.ids[3:]
    assert held.ids[:3] == ["p6", "p7", "p8"] and len(extra) == 8
    assert all(int(d[1:]) >= 9 and int(d[1:]) % 5 for d in extra)  # never trained on, each with a label
    assert extra == sorted(extra, key=lambda d: int(d[1:]))  # in corpus order
    assert evaluation_corpus(corpus, run, unseen=8, seed=1).ids == held.ids  # seeded
    assert len(evaluation_corpus(corpus, run, unseen=100).ids) == 3 + 17  # all 17 labelled unseen papers
    # without label columns nothing is added: nothing else could score those papers
    assert evaluation_corpus(Corpus(frame.drop(columns="label_disease")), run, unseen=8).ids == ["p6", "p7", "p8"]
    # papers stage 03's check read chose the heads: never among the unseen ones
    RunDir(run).unified_model.mkdir(parents=True)
    RunDir(run).guard.write_text(json.dumps({"checked": True, "paper_ids": ["p6", "p7", "p8", "p11", "p12"]}))
    after = evaluation_corpus(corpus, run, unseen=100).ids
    assert after[:3] == ["p6", "p7", "p8"] and len(after) == 3 + 15 and not {"p11", "p12"} & set(after)


def test_the_check_reads_validation_papers_then_papers_no_stage_trained_on():
    import pandas as pd
    from workbench.data.corpus import Corpus
    from workbench.embed.guard import check_papers

    frame = pd.DataFrame({"doc_id": [f"p{i}" for i in range(40)], "title": "t",
                          "abstract": [f"Abstract number {i}." for i in range(40)],
                          "split": ["test" if i >= 30 else "train" for i in range(40)]})
    corpus = Corpus(frame)
    train, val = [f"p{i}" for i in range(10)], ["p12", "p10"]
    ids = check_papers(corpus, train, val, seed=3, n=8)
    assert ids[:2] == ["p12", "p10"] and len(ids) == 8 and len(set(ids)) == 8
    extra = [int(d[1:]) for d in ids[2:]]
    assert all(10 < i < 30 and i != 12 for i in extra) and extra == sorted(extra)  # never trained on, never test
    assert check_papers(corpus, train, val, seed=3, n=8) == ids and check_papers(corpus, train, val, seed=4, n=8) != ids
    assert check_papers(corpus, train, val, n=100)[2:] == [f"p{i}" for i in range(11, 30) if i != 12]  # all there are
    assert check_papers(corpus, train, val, n=2) == ["p12", "p10"]
    # Papers the user marked sentences of come first among those no stage trained on (a blank cell marks nothing).
    frame["highlights_method"] = [["Abstract number 27."] if i in (25, 27) else ([] if i == 14 else None)
                                  for i in range(40)]
    marked = check_papers(Corpus(frame), train, val, seed=3, n=5)
    assert marked[:4] == ["p12", "p10", "p25", "p27"] and 10 < int(marked[4][1:]) < 30


def test_pairs_are_two_different_views_of_one_document(tmp_path):
    corpus = load_corpus("aclsum:train")
    views = collect_views(["outcome"], corpus=corpus)["outcome"]
    for doc_id, a, b in views.pairs(random.Random(0)):
        assert a != b and a in views.views[doc_id] and b in views.views[doc_id]


def test_document_split():
    corpus = load_corpus("aclsum:train,validation")
    train, val = split_documents(corpus.ids, corpus, val_split="validation")
    assert len(train) == 100 and len(val) == 50 and not set(train) & set(val)
    train, val = split_documents([f"d{i}" for i in range(10)], val_docs=0.3, seed=1)
    assert len(val) == 3 and len(train) == 7
    assert split_documents([f"d{i}" for i in range(10)], val_docs=0.3, seed=1) == (train, val)
    # a small corpus still holds out two documents (20% of 7 rounds to one: too few to validate on)
    assert [len(part) for part in split_documents([f"d{i}" for i in range(7)])] == [5, 2]
    assert [len(part) for part in split_documents([f"d{i}" for i in range(3)])] == [2, 1]


def test_stage_06_pairs_of_the_held_out_papers_raise_no_changed_corpus_warning(tmp_path):
    """The run's summaries of training papers are outside the held-out part by design, not a changed corpus."""
    import warnings

    from workbench.evaluate.report import evaluation_corpus, retrieval_pairs

    corpus = load_corpus("aclsum")
    train_id = corpus.docs.loc[corpus.docs["split"] == "train", "doc_id"].iloc[0]
    write_store(tmp_path, [{"doc_id": train_id, "aspect": "challenge", "key": "challenge", "prompt_hash": "p",
                            "model": "m", "sample": s, "status": "ok", "text": f"view {s}",
                            "raw": json.dumps({"sentence": f"view {s}"})}
                           for s in range(2)])
    held = evaluation_corpus(corpus, tmp_path, "test")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pairs = retrieval_pairs(held, ["challenge"], tmp_path)
    assert len(pairs["challenge"][0]) == len(held) and train_id not in held.ids
    # the whole corpus without that paper is a changed corpus: still said
    import pytest

    with pytest.warns(UserWarning, match="not in the corpus"):
        collect_views(["challenge"], tmp_path, corpus.subset(where=corpus.docs["doc_id"] != train_id))


def test_labelled_papers_are_kept_for_stage_06_even_when_stage_01_reads_the_whole_corpus(tmp_path):
    """`subset: null` used to summarise, train on and check every labelled paper, leaving Table 2 against the
    labels the few validation papers: a third of the labelled papers (up to 300) now stay with stage 06 alone."""
    import pandas as pd
    from workbench.data.corpus import Corpus
    from workbench.generate.views import labelled_held_out, trainable
    from workbench.embed.guard import check_papers
    from workbench.evaluate.report import evaluation_corpus

    frame = pd.DataFrame({"doc_id": [f"p{i}" for i in range(150)], "title": "t",
                          "abstract": [f"Abstract number {i}." for i in range(150)],
                          "label_disease": [None if i % 5 == 0 else f"d{i % 3}" for i in range(150)],
                          "summary_disease": [f"Disease of paper {i}." for i in range(150)]})
    corpus = Corpus(frame)
    kept = labelled_held_out(corpus)
    assert len(kept) == 120 // 3 and all(int(d[1:]) % 5 for d in kept)  # labelled papers only
    assert labelled_held_out(Corpus(frame.sample(frac=1, random_state=0))) == kept  # order does not matter
    pool = trainable(corpus)  # what stage 01 summarises with subset: null
    assert set(pool.ids) == set(corpus.ids) - kept
    views = collect_views(["disease"], corpus=corpus, include_human=True)["disease"]
    assert not kept & set(views.views) and len(views.views) == 150 - 40
    others = [d for d in corpus.ids if d not in kept]
    train, val = others[:90], others[90:]
    assert not kept & set(check_papers(corpus, train, val, n=200))  # nor do they choose a head
    run = tmp_path / "run"
    RunDir(run).aspect_models.mkdir(parents=True)
    RunDir(run).split_file.write_text(json.dumps({"train": train, "validation": val}))
    assert set(evaluation_corpus(corpus, run, unseen=300).ids) == set(val) | kept
    # A small corpus keeps its papers for training: a third of 60 labelled papers is under 30.
    assert labelled_held_out(Corpus(frame.iloc[:75])) == set()
    assert labelled_held_out(Corpus(frame.drop(columns="label_disease"))) == set()
