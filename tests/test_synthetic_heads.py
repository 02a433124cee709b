"""Frozen-mode heads on synthetic abstracts whose aspects vary independently (scripts/synthetic_corpus.py).

The generator's factors are known for every paper, so the ground truth of each factor is
exact: two papers are alike in `disease` when they share the disease. A head must follow
its own factor, more than the other factors, more than the whole-abstract embedding does,
and must not pick up the nuisance factor (the invented drug name), which the
whole-abstract embedding follows strongly.
"""

import importlib.util
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from workbench.core.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("synthetic_corpus", ROOT / "scripts" / "synthetic_corpus.py")
syn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(syn)


# --------------------------------------------------------------------------- the generator (fast)


def test_generator_is_deterministic_independent_and_highlights_are_abstract_sentences(tmp_path):
    from workbench.data.corpus import load_corpus
    from workbench.data.sentences import split_sentences
    from workbench.generate.views import collect_views

    corpus = syn.synthetic_corpus(n_train=60, n_val=24, n_test=36, seed=3)
    docs = corpus.docs
    pd.testing.assert_frame_equal(docs, syn.synthetic_corpus(n_train=60, n_val=24, n_test=36, seed=3).docs)
    assert not docs["abstract"].equals(syn.synthetic_corpus(n_train=60, n_val=24, n_test=36, seed=4).docs["abstract"])
    assert docs["split"].value_counts().to_dict() == {"train": 60, "validation": 24, "test": 36}
    assert docs["doc_id"].is_unique

    # Every value of every factor in every split, as often as any other (+-1).
    for split, part in docs.groupby("split"):
        for factor in syn.FACTORS:
            counts = part[factor].value_counts()
            assert set(counts.index) == set(syn.VALUES[factor]), (split, factor)
            assert counts.max() - counts.min() <= 1, (split, factor)
    # Independence: no value of one factor fixes another; each pair's contingency table has no
    # empty row or column and no value of one factor meets fewer than 4 values of the other.
    for i, a in enumerate(syn.FACTORS):
        for b in syn.FACTORS[i + 1:]:
            table = pd.crosstab(docs[a], docs[b])
            assert (table.sum(axis=1) > 0).all() and (table.sum(axis=0) > 0).all(), (a, b)
            assert ((table > 0).sum(axis=1) >= 4).all() and ((table > 0).sum(axis=0) >= 4).all(), (a, b, table)

    drug_in = Counter()
    for row in docs.itertuples():
        sentences = split_sentences(row.abstract)
        assert sentences == row.sentences  # the splitter recovers the intended sentences
        assert 4 <= len(sentences) <= 6
        assert row.drug in row.abstract
        stated = []
        for a in syn.ASPECTS:
            highlights = getattr(row, f"highlights_{a}")
            assert 1 <= len(highlights) <= 2 and all(h in sentences for h in highlights), (row.doc_id, a)
            stated += highlights
            summary = getattr(row, f"summary_{a}")
            assert row.drug not in summary and summary not in row.abstract
            assert split_sentences(summary) == [summary]
            drug_in[a] += sum(row.drug in h for h in highlights)
        assert len(stated) == len(set(stated)) < len(sentences)  # an aspect per sentence, and a filler
    # The drug is named in sentences of every aspect, so no head could take it for its aspect.
    assert all(drug_in[a] >= 0.1 * len(docs) for a in syn.ASPECTS), drug_in

    # ACLSum-like columns: the views of stage 02 come from them, the test split left out.
    views = collect_views(syn.ASPECTS, None, corpus)
    test_ids = set(docs.loc[docs["split"] == "test", "doc_id"])
    for a in syn.ASPECTS:
        assert len(views[a].docs(2)) == 84 and not test_ids & set(views[a].views)

    # The CLI writes a file that load_corpus reads back.
    syn.main([str(tmp_path / "s.jsonl"), "--train", "6", "--val", "3", "--test", "3", "--seed", "1"])
    back = load_corpus(tmp_path / "s.jsonl")
    assert list(back.docs["highlights_method"]) == list(syn.synthetic_frame(6, 3, 3, seed=1)["highlights_method"])
    syn.main([str(tmp_path / "s.csv"), "--train", "6", "--val", "3", "--test", "3", "--seed", "1"])
    back, frame = load_corpus(tmp_path / "s.csv"), syn.synthetic_frame(6, 3, 3, seed=1)
    assert list(back.docs["abstract"]) == list(frame["abstract"])
    assert list(back.docs["highlights_method"]) == list(frame["highlights_method"])  # JSON in a CSV cell: a list


# --------------------------------------------------------------------------- the heads (slow)

# Margins in points of mean per-paper Spearman x100. Seed 0 gives (see the printed table):
# own factor minus best other factor >= 7.2 (method head vs drug), head minus whole abstract on the
# own factor >= 1.9 (disease: MiniLM already follows the disease words), whole abstract minus
# head on the drug >= 21.
OWN_OVER_OTHERS = 3.0
OWN_OVER_WHOLE = 1.0
NUISANCE_UNDER_WHOLE = 10.0


@pytest.fixture
def one_thread():
    """The heads' tensors are tiny: with two intra-op threads on a busy 2-core machine their training
    took ten times the CPU time of one thread. Restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_frozen_heads_follow_their_own_factor_and_not_the_nuisance(tmp_path, one_thread):
    from workbench.embed.distill import DistillConfig, documents_with_targets, train_unified_model
    from workbench.embed.targets import compute_targets
    from workbench.embed.embeddings import embed_corpus
    from workbench.measures.evaluation import cosine_similarity_matrix, label_similarity, rowwise_spearman
    from workbench.embed.head_training import sentence_supervision
    from workbench.evaluate.report import encode_texts
    from workbench.embed.aspect_training import TrainConfig, train_aspect_models
    from workbench.generate.views import collect_views, split_documents

    t0 = time.perf_counter()
    aspects, factors = syn.ASPECTS, syn.FACTORS
    corpus = syn.synthetic_corpus(n_train=120, n_val=40, n_test=60, seed=0)
    run = tmp_path / "run"

    teachers = train_aspect_models(aspects, run, corpus,
                                   TrainConfig(base_model="minilm", pooling="mean", mode="frozen", head_steps=100),
                                   val_split="validation", progress=False)
    assert set(teachers) == set(aspects)
    views = collect_views(aspects, run, corpus)
    targets = compute_targets(run, views, aspects, progress=False)
    train_ids, val_ids = split_documents(sorted(documents_with_targets(targets)), corpus, "validation")
    labels = sentence_supervision(corpus, aspects, run)
    test_ids = set(corpus.docs.loc[corpus.docs["split"] == "test", "doc_id"])
    assert not test_ids & (set(train_ids) | set(val_ids) | {d for a in aspects for d in labels[a]})
    result = train_unified_model(corpus, targets, (train_ids, val_ids), RunDir(run).unified_model,
                                 DistillConfig(base_model="minilm", pooling="mean", mode="frozen"),
                                 progress=False, run_dir=run, sentence_labels=labels)

    test = corpus.subset(where=corpus.docs["split"] == "test")
    heads = embed_corpus(result.out_dir, test, run, progress=False)
    whole = encode_texts("minilm", test.texts(), max_length=256)
    rows = {**{f"{a} head": heads[a] for a in aspects}, "whole abstract": whole}
    truth = {f: label_similarity(list(test.docs[f])) for f in factors}
    table = pd.DataFrame({f: {name: 100 * float(np.nanmean(rowwise_spearman(cosine_similarity_matrix(v), truth[f])))
                              for name, v in rows.items()} for f in factors})
    seconds = time.perf_counter() - t0
    print(f"\nmean per-paper Spearman x100 on {len(test.docs)} test papers ({syn.NUISANCE}: nuisance); "
          f"best step {result.best_step}; {seconds:.0f}s\n{table.round(1).to_string()}")

    for a in aspects:
        row = table.loc[f"{a} head"]
        others = row.drop(a)
        # (a) its own factor, more than any other factor, the nuisance included
        assert row[a] >= others.max() + OWN_OVER_OTHERS, f"{a} head follows {others.idxmax()}\n{table}"
        # (b) its own factor, more than the whole-abstract embedding does
        assert row[a] >= table.loc["whole abstract", a] + OWN_OVER_WHOLE, f"{a} head vs whole abstract\n{table}"
        # (c) the drug's name, less than the whole-abstract embedding does
        assert row[syn.NUISANCE] <= table.loc["whole abstract", syn.NUISANCE] - NUISANCE_UNDER_WHOLE, \
            f"{a} head picks up the {syn.NUISANCE}\n{table}"
