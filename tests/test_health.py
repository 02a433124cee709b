"""workbench.measures.health: each measure against an independent computation or a known answer.

The probe runs on small synthetic corpora with fake encoders whose behaviour we know:
heads that read only their aspect's sentences (the probe must see a diagonal), and heads
that are one and the same function of the text (the probe must see no diagonal, the
reading must call them copies).
"""

import itertools
import json
import zlib

import numpy as np
import pandas as pd
import pytest

from workbench.measures.health import (anisotropy, corpus_sentence_aspects, effective_rank, fold_ids, hard_negative_probe,
                              health_reading, health_report, linear_cka, plot_health, ridge_r2, shared_variance,
                              swap_aspect)
from workbench.data.sentences import split_sentences

ASPECTS = ["challenge", "approach", "outcome"]
WORDS = ["alpha", "bravo", "cobalt", "delta", "ember", "falcon", "garnet", "harbor", "indigo", "juniper"]


# --------------------------------------------------------------------------- effective rank, anisotropy


def _centred_orthonormal(n, k, rng):
    """n x k with orthonormal columns that are all orthogonal to the ones vector (so centring keeps them)."""
    q, _ = np.linalg.qr(np.column_stack([np.ones(n), rng.normal(size=(n, k))]))
    return q[:, 1:]


@pytest.mark.parametrize("k", [1, 3, 17])
def test_effective_rank_of_k_equal_singular_values_is_k(k):
    rng = np.random.default_rng(k)
    u = _centred_orthonormal(60, k, rng)
    v, _ = np.linalg.qr(rng.normal(size=(40, k)))
    x = 2.5 * u @ v.T + rng.normal(size=40)  # k equal singular values, plus an offset that centring removes
    assert effective_rank(x) == pytest.approx(k, rel=1e-9)


def test_effective_rank_matches_eigenvalues_of_the_covariance():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 30)) * np.linspace(0.1, 3, 30) + 5.0
    # Independent route: singular values as square roots of the scatter matrix's eigenvalues.
    lam = np.clip(np.linalg.eigvalsh(np.cov(x, rowvar=False) * (len(x) - 1)), 0, None)
    s = np.sqrt(lam[lam > 1e-12])
    p = s / s.sum()
    assert effective_rank(x) == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-9)
    assert 1 < effective_rank(x) < 30


def test_anisotropy_is_the_mean_over_all_pairs():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(25, 8)) + 0.7
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    brute = np.mean([u[i] @ u[j] for i, j in itertools.combinations(range(len(u)), 2)])
    assert anisotropy(x) == pytest.approx(brute, abs=1e-12)
    # Sampled pairs (more pairs than n_pairs) come close to the exact value.
    big = rng.normal(size=(400, 8)) + 0.7
    assert anisotropy(big, n_pairs=20000) == pytest.approx(anisotropy(big, n_pairs=10 ** 6), abs=0.02)


# --------------------------------------------------------------------------- CKA and ridge


def _hsic_u_statistic(k, l):
    """Unbiased HSIC as the U-statistic over ordered 4-tuples of distinct indices (Song et al. 2012)."""
    n = len(k)
    total, count = 0.0, 0
    for i, j, q, r in itertools.permutations(range(n), 4):
        total += k[i, j] * l[i, j] + k[i, j] * l[q, r] - 2 * k[i, j] * l[i, q]
        count += 1
    return total / count


def test_debiased_cka_matches_the_u_statistic():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(7, 3)), rng.normal(size=(7, 4))
    y[:, 0] += x[:, 0]
    k, l = x @ x.T, y @ y.T
    want = _hsic_u_statistic(k, l) / np.sqrt(_hsic_u_statistic(k, k) * _hsic_u_statistic(l, l))
    assert linear_cka(x, y) == pytest.approx(want, rel=1e-9)


def test_biased_cka_matches_the_hsic_formula():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(30, 5)), rng.normal(size=(30, 6))
    y[:, :2] += x[:, :2]
    h = np.eye(30) - 1 / 30
    k, l = h @ x @ x.T @ h, h @ y @ y.T @ h
    want = np.trace(k @ l) / np.sqrt(np.trace(k @ k) * np.trace(l @ l))
    assert linear_cka(x, y, debiased=False) == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("debiased", [True, False])
def test_cka_invariances(debiased):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(50, 12))
    q, _ = np.linalg.qr(rng.normal(size=(12, 12)))
    assert linear_cka(x, x @ q, debiased=debiased) == pytest.approx(1.0, abs=1e-9)
    assert linear_cka(x, 3.7 * x + 2.0, debiased=debiased) == pytest.approx(1.0, abs=1e-9)
    assert linear_cka(x, x * np.linspace(0.2, 2, 12), debiased=debiased) < 0.99  # anisotropic scaling is not


def test_cka_of_unrelated_spaces_is_near_zero_only_when_debiased():
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(100, 384)), rng.normal(size=(100, 384))
    assert abs(linear_cka(x, y)) < 0.05
    assert linear_cka(x, y, debiased=False) > 0.7  # the bias that made us debias: ~d / (d + n)
    x, y = rng.normal(size=(3000, 4)), rng.normal(size=(3000, 4))
    assert abs(linear_cka(x, y, debiased=False)) < 0.02  # with n >> d both agree


def test_ridge_r2_known_answers():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(80, 5))
    y = x @ rng.normal(size=(5, 3)) - 1.0
    assert ridge_r2(x, y, alpha=1e-8) == pytest.approx(1.0, abs=1e-9)  # an exact linear map is found
    assert ridge_r2(rng.normal(size=(80, 5)), y, alpha=1e-8) < 0.1  # unrelated predictors explain nothing
    assert ridge_r2(x, y, alpha=1e4) < 0.5  # heavy shrinkage predicts little: alpha matters


@pytest.mark.slow  # importing sklearn takes 2-4 s on a busy machine
def test_ridge_r2_matches_sklearn():
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score
    from sklearn.model_selection import cross_val_predict

    rng = np.random.default_rng(6)
    x = rng.normal(size=(60, 10))
    y = x @ rng.normal(size=(10, 4)) + rng.normal(size=(60, 4)) + 3.0
    ids = fold_ids(60, 5, seed=1)
    cv = [(np.flatnonzero(ids != f), np.flatnonzero(ids == f)) for f in range(5)]
    pred = cross_val_predict(Ridge(alpha=0.5), x, y, cv=cv)
    want = r2_score(y, pred, multioutput="variance_weighted")
    assert ridge_r2(x, y, alpha=0.5, folds=5, seed=1) == pytest.approx(want, rel=1e-9)
    # More dimensions than papers: the (n x n) route must give the same answer.
    wide = np.column_stack([x, rng.normal(size=(60, 90))])
    pred = cross_val_predict(Ridge(alpha=0.5), wide, y, cv=cv)
    want = r2_score(y, pred, multioutput="variance_weighted")
    assert ridge_r2(wide, y, alpha=0.5, folds=5, seed=1) == pytest.approx(want, rel=1e-8)


def test_shared_variance_matrix():
    rng = np.random.default_rng(7)
    a = rng.normal(size=(40, 6))
    emb = {"a": a, "b": a @ np.linalg.qr(rng.normal(size=(6, 6)))[0], "c": rng.normal(size=(40, 6))}
    cka = shared_variance(emb)
    assert list(cka.index) == list(cka.columns) == ["a", "b", "c"]
    assert cka.loc["a", "b"] == pytest.approx(1.0) and abs(cka.loc["a", "c"]) < 0.2
    assert np.allclose(cka.to_numpy(), cka.to_numpy().T)
    r2 = shared_variance(emb, "ridge")
    assert r2.loc["b", "a"] > 0.9 and r2.loc["c", "a"] < 0.2
    with pytest.raises(ValueError):
        shared_variance(emb, "nope")


# --------------------------------------------------------------------------- the probe


def _corpus(n_docs=20, shared_doc=None):
    """Abstracts of 5 sentences (background, challenge, approach x2, outcome) with their labels."""
    texts, labels = [], []
    for d in range(n_docs):
        w = lambda k: f"{WORDS[d % 10]} {WORDS[(d // 10 + k) % 10]} {d} item {k}"  # noqa: E731
        sentences = [f"We study the {w(0)} setting here.", f"The problem of {w(1)} is open.",
                     f"We propose the {w(2)} method.", f"It uses the {w(3)} trick.", f"Results with {w(4)} improve."]
        marks = {"challenge": [0, 1, 0, 0, 0], "approach": [0, 0, 1, 1, 0], "outcome": [0, 0, 0, 0, 1]}
        if d == shared_doc:
            marks["approach"] = [0, 1, 1, 1, 0]  # sentence 1 states challenge and approach
        texts.append(" ".join(sentences))
        labels.append(marks)
    return texts, labels


def _vector(sentence, dim=16):
    return np.random.default_rng(zlib.crc32(sentence.encode())).normal(size=dim)


def _aspect_reading_encoder(texts, labels):
    """Fake unified model: head a is the sum of random vectors of the text's sentences labelled a (and only a)."""
    aspect_of = {}
    for text, marks in zip(texts, labels):
        for k, sentence in enumerate(split_sentences(text)):
            aspect_of[sentence] = {a for a, m in marks.items() if m[k] >= 0.5}

    def encode(batch):
        out = {a: np.zeros((len(batch), 16)) for a in ASPECTS}
        for i, text in enumerate(batch):
            for sentence in split_sentences(text):
                for a in aspect_of[sentence]:
                    out[a][i] += _vector(sentence)
        return out

    return encode


def _copy_encoder(batch):
    """Fake unified model whose heads are one and the same embedding of the whole text."""
    whole = np.stack([sum(_vector(s) for s in split_sentences(t)) for t in batch])
    return {a: whole.copy() for a in ASPECTS}


def test_swap_keeps_every_other_sentence():
    i = ["b0", "c1", "a2", "c3", "b4"]
    j = ["x0", "C1", "C2", "x3"]
    out = swap_aspect(i, [1, 3], j, [1, 2])
    assert out == ["b0", "C1", "C2", "a2", "b4"]
    kept = [s for k, s in enumerate(i) if k not in (1, 3)]
    assert [s for s in out if s not in ("C1", "C2")] == kept  # the non-aspect sentences, identical and in order


def test_probe_builds_swaps_that_change_only_the_aspect():
    texts, labels = _corpus()
    seen = []

    def encode(batch):
        seen.extend(batch)
        return _copy_encoder(batch)

    probe = hard_negative_probe(texts, labels, encode, n_pairs=5, seed=3)
    swapped = seen[len(texts):]
    start = 0
    for a in ASPECTS:
        for (i, j), text in zip(probe["pairs"][a], swapped[start:start + 5]):
            assert i != j
            si, sj, sx = split_sentences(texts[i]), split_sentences(texts[j]), split_sentences(text)
            own_i = [s for s, m in zip(si, labels[i][a]) if m]
            own_j = [s for s, m in zip(sj, labels[j][a]) if m]
            assert [s for s in sx if s not in own_j] == [s for s in si if s not in own_i]
            assert [s for s in sx if s in own_j] == own_j
        start += 5
    assert probe["n_pairs"] == {a: 5 for a in ASPECTS}
    again = hard_negative_probe(texts, labels, _copy_encoder, n_pairs=5, seed=3)
    assert again["pairs"] == probe["pairs"]  # seeded: the same pairs every time


def test_probe_skips_documents_whose_aspect_sentences_are_shared():
    texts, labels = _corpus(shared_doc=4)
    probe = hard_negative_probe(texts, labels, _copy_encoder, n_pairs=50)
    assert 4 not in [i for i, _ in probe["pairs"]["approach"]]
    assert 4 not in [j for _, j in probe["pairs"]["approach"]]
    assert 4 in [i for i, _ in probe["pairs"]["outcome"]]  # its outcome sentence is its own
    assert probe["n_pairs"]["approach"] == 19


def test_probe_sees_heads_that_read_their_aspect():
    texts, labels = _corpus()
    probe = hard_negative_probe(texts, labels, _aspect_reading_encoder(texts, labels), n_pairs=10)
    m = probe["matrix"]
    for a in ASPECTS:
        assert m[a][a] > 0.5
        for h in ASPECTS:
            if h != a:
                assert m[a][h] == pytest.approx(0.0, abs=1e-9)
        assert probe["passed"][a]
        assert probe["percentile"][a][a] > 0.2  # i' is no longer i's near neighbour under head a
    report = health_report(_aspect_reading_encoder(texts, labels)(texts), probe=probe)
    lines = " ".join(health_reading(report))
    for a in ASPECTS:
        assert f"moves the {a} head" in lines and f"it reads {a}." in lines


def test_probe_and_reading_on_heads_that_are_copies():
    texts, labels = _corpus()
    probe = hard_negative_probe(texts, labels, _copy_encoder, n_pairs=10)
    for a in ASPECTS:
        assert probe["ratio"][a] == pytest.approx(1.0)
        assert not probe["passed"][a]
    report = health_report(_copy_encoder(texts), probe=probe)
    lines = health_reading(report)
    assert ("the approach head is nearly a copy of the challenge head (CKA 1.00): weighting one against the other "
            "barely changes a map.") in lines
    assert sum("nearly a copy" in line for line in lines) == 3
    assert sum("does not single out its aspect" in line for line in lines) == 3


# --------------------------------------------------------------------------- report, reading, plot


def test_reading_names_copies_only_above_the_threshold():
    rng = np.random.default_rng(8)
    a = rng.normal(size=(60, 20))
    emb = {"challenge": a, "approach": a + 0.05 * rng.normal(size=a.shape), "outcome": rng.normal(size=(60, 20))}
    base = rng.normal(size=(60, 20)) * np.r_[np.ones(10), np.full(10, 0.01)]
    report = health_report(emb, base=base)
    lines = health_reading(report)
    assert any(line.startswith("the approach head is nearly a copy of the challenge head") for line in lines)
    assert not any("outcome head is nearly a copy" in line for line in lines)
    assert any(line.startswith("the outcome head uses") and "for the base encoder" in line for line in lines)


def test_report_is_json_and_has_what_the_reading_needs():
    texts, labels = _corpus()
    encode = _aspect_reading_encoder(texts, labels)
    emb = encode(texts)
    emb["outcome"][0] = 0.0  # a zero row must not give NaN anywhere that JSON refuses
    report = health_report(emb, base=_copy_encoder(texts)["challenge"],
                           probe=hard_negative_probe(texts, labels, encode, n_pairs=5))
    again = json.loads(json.dumps(report, allow_nan=False))
    assert again == report
    assert set(report) >= {"documents", "aspects", "heads", "base", "cka", "cka_with_base", "ridge_r2", "probe"}
    assert report["documents"] == 20 and report["heads"]["challenge"]["dim"] == 16
    assert report["cka"]["challenge"]["challenge"] == 1.0


@pytest.mark.slow  # importing matplotlib takes 1-3 s on a busy machine
def test_plot_health_draws_both_matrices():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    texts, labels = _corpus()
    encode = _aspect_reading_encoder(texts, labels)
    report = health_report(encode(texts), probe=hard_negative_probe(texts, labels, encode, n_pairs=5))
    fig = plot_health(report)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 2
    assert heatmaps[1].images[0].get_array().shape == (3, 3)
    plt.close(fig)
    fig = plot_health(health_report(encode(texts)))
    assert len([ax for ax in fig.axes if ax.images]) == 1
    plt.close(fig)


def test_corpus_sentence_aspects_prefers_highlights():
    from workbench.data.corpus import Corpus

    docs = pd.DataFrame({
        "doc_id": ["a", "b"], "title": ["", ""],
        "abstract": ["Parsing is hard for long sentences. We use a chart parser.",
                     "Tagging is slow in practice. We cache the lattice."],
        "split": ["test", "test"],
        "highlights_challenge": [["Parsing is hard for long sentences."], None],
    })
    out = corpus_sentence_aspects(Corpus(docs, name="t"), ["challenge", "approach"])
    assert out == [{"challenge": [1.0, 0.0]}, {}]


def test_corpus_sentence_aspects_falls_back_to_stored_llm_labels(tmp_path):
    from workbench.data.corpus import Corpus
    from workbench.generate.sentence_labels import label_store

    docs = pd.DataFrame({"doc_id": ["a", "b"], "title": ["", ""],
                         "abstract": ["Parsing is hard for long sentences. We use a chart parser.",
                                      "Tagging is slow in practice. We cache the lattice."],
                         "highlights_challenge": [["Parsing is hard for long sentences."], None]})
    store = label_store(tmp_path)
    store.append([{"doc_id": "b", "prompt_hash": "h", "model": "m", "sample": 0, "status": "ok", "n_sentences": 2,
                   "labels": {"challenge": [0], "approach": [1]}}])
    store.close()
    out = corpus_sentence_aspects(Corpus(docs, name="t"), ["challenge", "approach"], run_dir=tmp_path)
    # Human highlights win where they exist; the LLM's labels fill in the rest; nobody labelled a's approach.
    assert out == [{"challenge": [1.0, 0.0]}, {"challenge": [1.0, 0.0], "approach": [0.0, 1.0]}]


def test_too_few_papers_give_a_plain_answer_not_an_error():
    """An own corpus with a handful of held-out papers: stage 06 says so instead of failing."""
    from workbench.measures.health import health_reading, health_report, plot_health

    rng = np.random.default_rng(0)
    report = health_report({"a": rng.normal(size=(3, 8)), "b": rng.normal(size=(3, 8))}, base=rng.normal(size=(3, 8)))
    assert report["too_few"] and report["cka"] is None
    assert health_reading(report) == ["3 held-out papers are too few for a health check of the heads (it needs 10)."]
    assert plot_health(report) is None
    json.dumps(report)
