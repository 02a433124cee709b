"""Evaluation metrics (workbench.measures.evaluation) against independent computations on small fixed inputs."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from workbench.core import display
from workbench.measures import evaluation as ev
from workbench.measures import runmetrics
from workbench.cli import main
from workbench.core.rundir import RunDir


def _sym(rng, n, integer=False):
    x = rng.integers(1, 6, size=(n, n)).astype(float) if integer else rng.normal(size=(n, n))
    x = np.triu(x, 1)
    x = x + x.T
    np.fill_diagonal(x, np.nan)
    return x


# ---------------------------------------------------------------- rowwise_spearman


def _spearman_loop(pred, true):
    out = []
    for i in range(len(pred)):
        js = [j for j in range(len(pred)) if j != i and np.isfinite(true[i, j]) and np.isfinite(pred[i, j])]
        x, y = pred[i, js], true[i, js]
        if len(js) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
            out.append(np.nan)
        else:
            out.append(spearmanr(x, y).statistic)
    return np.array(out)


def test_rowwise_spearman_matches_scipy_with_ties_and_unknown_pairs():
    rng = np.random.default_rng(1)
    n = 12
    pred = ev.cosine_similarity_matrix(rng.normal(size=(n, 4)))
    pred[0, 1:6] = 0.5  # ties in the prediction too
    true = _sym(rng, n, integer=True)  # judge-like integer scores: many ties
    true[rng.random((n, n)) < 0.25] = np.nan  # pairs the judge did not score
    true[3, :] = np.nan  # a document with no known pair
    true[4, :] = np.nan
    true[4, [0, 1]] = [1, 2]  # two known pairs only
    true[5, :] = np.where(np.isfinite(true[5]), 3.0, np.nan)  # constant truth
    got = ev.rowwise_spearman(pred, true)
    want = _spearman_loop(pred, true)
    assert np.isnan(got[[3, 4, 5]]).all()
    np.testing.assert_allclose(got, want, atol=1e-12, equal_nan=True)
    assert np.isfinite(got).sum() >= 8


def test_rowwise_spearman_perfect_and_reversed():
    rng = np.random.default_rng(0)
    truth = _sym(rng, 6)
    assert np.allclose(ev.rowwise_spearman(truth * 3 + 1, truth), 1.0)
    assert np.allclose(ev.rowwise_spearman(-truth, truth), -1.0)


# ---------------------------------------------------------------- top_k_overlap


def _overlap_loop(pred, true, k):
    out = []
    for i in range(len(pred)):
        js = [j for j in range(len(pred)) if j != i and np.isfinite(true[i, j]) and np.isfinite(pred[i, j])]
        if len(js) <= k:
            out.append(np.nan)
            continue
        kth_true = sorted((true[i, j] for j in js), reverse=True)[k - 1]
        neighbours = {j for j in js if true[i, j] >= kth_true}
        kth_pred = sorted((pred[i, j] for j in js), reverse=True)[k - 1]
        above = [j for j in js if pred[i, j] > kth_pred]
        tied = [j for j in js if pred[i, j] == kth_pred]
        share = (k - len(above)) / len(tied)  # tied documents share the last places
        hits = sum(j in neighbours for j in above) + share * sum(j in neighbours for j in tied)
        out.append(hits / k)
    return np.array(out)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_top_k_overlap_matches_brute_force(k):
    rng = np.random.default_rng(k)
    n = 14
    pred = np.round(ev.cosine_similarity_matrix(rng.normal(size=(n, 3))), 1)  # rounding makes pred ties
    true = _sym(rng, n, integer=True)
    true[rng.random((n, n)) < 0.2] = np.nan
    true[2, :] = np.nan
    np.testing.assert_allclose(ev.top_k_overlap(pred, true, k), _overlap_loop(pred, true, k), equal_nan=True)


def test_top_k_overlap_counts_truth_ties_and_excludes_self():
    true = np.array([[np.nan, 5, 1, 4, 4], [5, np.nan, 1, 1, 1], [1, 1, np.nan, 1, 2],
                     [4, 1, 1, np.nan, 1], [4, 1, 2, 1, np.nan]], dtype=float)
    # The large diagonal would win every row if self were not excluded.
    pred = np.array([[9, .9, .1, .2, .8], [.9, 9, .1, .2, .3], [.1, .1, 9, .2, .3],
                     [.8, .2, .2, 9, .1], [.2, .3, .1, .1, 9]])
    got = ev.top_k_overlap(pred, true, k=2)
    # Doc 0: truth 5, 1, 4, 4 -> docs 3 and 4 tie for second place, so both count: the
    # prediction's top 2 {1, 4} scores 1.0 (0.5 if only one of the tied docs counted).
    assert got[0] == 1.0
    # Doc 4: truth 4, 1, 2, 1 -> true neighbours {0, 2}; prediction's top 2 {1, 0} -> 0.5.
    assert got[4] == 0.5
    np.testing.assert_allclose(got, _overlap_loop(pred, true, 2))
    assert np.isnan(ev.top_k_overlap(pred, true, k=4)).all()  # 4 known pairs per row: nothing to rank


# ---------------------------------------------------------------- permutation test


def test_permutation_identical_matrices_give_p_one():
    rng = np.random.default_rng(0)
    truth, sim = _sym(rng, 10), _sym(rng, 10)
    out = ev.permutation_test(sim, sim.copy(), truth, n_permutations=50)
    assert out["observed_difference"] == 0.0
    assert out["p_value"] == 1.0 and out["n_permutations"] == 50


def test_permutation_truth_against_noise_is_significant_with_floor():
    rng = np.random.default_rng(0)
    truth = _sym(rng, 20)
    noise = _sym(rng, 20)
    out = ev.permutation_test(truth, noise, truth, n_permutations=200, seed=1)
    assert out["correlation_a"] == pytest.approx(1.0)
    assert out["observed_difference"] > 0.8
    assert out["p_value"] == pytest.approx(1 / 201)  # nothing beats S_a, and p never goes below the floor
    # Swapped: the noise is not better than the truth, so p is large.
    assert ev.permutation_test(noise, truth, truth, n_permutations=50)["p_value"] == 1.0


def test_permutation_equal_quality_is_not_significant():
    rng = np.random.default_rng(3)
    truth = _sym(rng, 16)
    a, b = truth + 1.5 * _sym(rng, 16), truth + 1.5 * _sym(rng, 16)
    out = ev.permutation_test(a, b, truth, n_permutations=100, seed=2)
    assert out["p_value"] > 0.01


# ---------------------------------------------------------------- bootstrap


def test_bootstrap_ci_contains_mean_and_narrows():
    rng = np.random.default_rng(0)
    small = rng.normal(0.3, 1.0, size=20)
    large = rng.normal(0.3, 1.0, size=2000)
    mean, low, high = ev.bootstrap_ci(np.append(small, [np.nan, np.nan]), n_boot=500)
    assert mean == pytest.approx(small.mean()) and low < mean < high
    m2, l2, h2 = ev.bootstrap_ci(large, n_boot=500)
    assert l2 < m2 < h2 and (h2 - l2) < (high - low) / 4
    assert all(math.isnan(v) for v in ev.bootstrap_ci([np.nan, np.nan]))


# ---------------------------------------------------------------- ground truths


def test_judge_similarity_from_records_and_run_dir(tmp_path):
    records = [
        {"aspect": "method", "doc_a": "a", "doc_b": "b", "prompt_hash": "p", "model": "m", "sample": 0, "status": "ok", "score": 4},
        {"aspect": "method", "doc_a": "a", "doc_b": "b", "prompt_hash": "p", "model": "m", "sample": 1, "status": "ok", "score": 2},
        {"aspect": "method", "doc_a": "c", "doc_b": "a", "prompt_hash": "p", "model": "m", "sample": 0, "status": "ok", "score": 5},  # reversed order
        {"aspect": "method", "doc_a": "b", "doc_b": "c", "prompt_hash": "p", "model": "m", "sample": 0, "status": "unparsed", "score": None},
        {"aspect": "task", "doc_a": "b", "doc_b": "c", "prompt_hash": "p", "model": "m", "sample": 0, "status": "ok", "score": 1},
        {"aspect": "method", "doc_a": "a", "doc_b": "zz", "prompt_hash": "p", "model": "m", "sample": 0, "status": "ok", "score": 1},  # not in ids
    ]
    want = np.array([[np.nan, 3, 5], [3, np.nan, np.nan], [5, np.nan, np.nan]])
    np.testing.assert_array_equal(ev.judge_similarity(records, ["a", "b", "c"], "method"), want)
    with open(tmp_path / "judgements.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)
    np.testing.assert_array_equal(ev.judge_similarity(tmp_path, ["a", "b", "c"], "method"), want)
    with pytest.raises(FileNotFoundError):
        ev.judge_similarity(tmp_path / "missing", ["a"], "method")


def test_label_similarity_with_lists_and_missing():
    labels = ["h1", ["h1", "h2"], ["h2"], None, [], "h3"]
    sim = ev.label_similarity(labels)
    nan = np.nan
    want = np.array([
        [nan, 1, 0, nan, nan, 0],
        [1, nan, 1, nan, nan, 0],
        [0, 1, nan, nan, nan, 0],
        [nan] * 6,
        [nan] * 6,
        [0, 0, 0, nan, nan, nan],
    ])
    np.testing.assert_array_equal(sim, want)


def test_summary_similarity_averages_and_marks_missing():
    emb = [np.array([1.0, 0.0]), np.array([[0.0, 1.0], [0.0, 3.0]]), None]
    sim = ev.summary_similarity(emb)
    assert sim[0, 1] == pytest.approx(0.0) and np.isnan(sim[2]).all() and np.isnan(sim[0, 0])


# ---------------------------------------------------------------- tables


def test_correlation_table_rows_and_combined():
    rng = np.random.default_rng(0)
    n = 15
    e_x, e_y, base = rng.normal(size=(n, 4)), rng.normal(size=(n, 4)), rng.normal(size=(n, 4))
    truths = {"x": ev.cosine_similarity_matrix(e_x), "y": ev.cosine_similarity_matrix(e_y),
              "labels": ev.label_similarity(rng.integers(0, 3, size=n).tolist())}
    out = ev.correlation_table({"multi": {"x": e_x, "y": e_y}, "base": base}, truths, k=3,
                               truth_aspects={"labels": "x"})
    sp = out["spearman"]
    assert list(sp.index) == ["multi:x", "multi:y", "multi:combined", "base"]
    assert list(sp.columns) == ["x", "y", "labels"]
    assert sp.at["multi:x", "x"] == pytest.approx(100.0) and out["top10"].at["multi:y", "y"] == pytest.approx(100.0)
    assert sp.at["multi:combined", "y"] == sp.at["multi:y", "y"]
    assert sp.at["multi:combined", "labels"] == sp.at["multi:x", "labels"]
    per_doc = out["per_document"]["spearman"]["base"]["y"]
    assert sp.at["base", "y"] == pytest.approx(100 * np.nanmean(ev.rowwise_spearman(
        ev.cosine_similarity_matrix(base), truths["y"])))
    assert per_doc.shape == (n,) and out["n_docs"].at["base", "x"] == n


def test_retrieval_table_mrr_by_hand():
    vectors = {"q1": [1, 0], "q2": [0, 1], "q3": [1, 1], "c1": [1, 0.1], "c2": [1, 0.2], "c3": [0, 1]}

    def encode(texts):
        return np.array([vectors[t] for t in texts], dtype=float)

    pairs = {"aspect": (["q1", "q2", "q3"], ["c1", "c2", "c3"])}
    table = ev.retrieval_table({"toy": encode, "per-aspect": {"aspect": encode}}, pairs)
    # q1 -> c1 first (rank 1); q2: c3 (1.0) > c2 (0.196) > c1 (0.100) -> rank 2;
    # q3 -> c3 (0.707) vs c2 (0.832), c1 (0.774) -> rank 3.
    assert table.at["toy", "aspect"] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert table.at["per-aspect", "aspect"] == table.at["toy", "aspect"]
    assert table.attrs["n_pairs"] == {"aspect": 3}


def test_reading_names_leaks_and_baselines():
    table = pd.DataFrame({"hyp": [44.0, 38.2, 26.1], "rq": [45.5, 40.0, 28.9]},
                         index=["M:hyp", "M:rq", "SPECTER"])
    text = ev.reading(table, ["hyp", "rq"], "M", ["SPECTER", "absent"])
    lines = text.splitlines()
    assert lines[0].startswith("- **hyp**: 44.0") and "leaks into rq (45.5)" in lines[0]
    assert "above every baseline (SPECTER 26.1)" in lines[0]
    assert "the ground truth it follows best in its row" in lines[1] and "hyp embedding (45.5) does better" in lines[1]
    # Each reading ends with what it means for the next step.
    assert "*Next:* the hyp head also follows rq" in lines[0] and "exclude list of hyp" in lines[0]
    assert "*Next:* another aspect's embedding reads rq" in lines[1]
    loses = ev.reading(table.assign(hyp=[20.0, 38.2, 26.1]), ["hyp", "rq"], "M", ["SPECTER"]).splitlines()[0]
    assert "not above SPECTER" in loses and "*Next:* for maps weighted by hyp, the baseline" in loses


# ---------------------------------------------------------------- metrics.json and compare


def test_metrics_round_trip_whole_file_and_compare(tmp_path):
    frame = pd.DataFrame({"x": [1.5, np.nan]}, index=["m1", "m2"])
    runmetrics.write_metrics(tmp_path, {"decoding": {"ppl": 3.0}})  # an older run's section ...
    path = runmetrics.write_metrics(tmp_path, {"retrieval": {"mrr": np.float32(0.5), "n": np.int64(3), "ok": np.bool_(True),
                                                     "curve": np.array([1.0, np.nan])},
                                       "correlations": frame, "inf": float("inf")})
    loaded = runmetrics.load_metrics(tmp_path)
    assert "decoding" not in loaded and loaded["written"]["by"].startswith("stage 06")  # ... is not kept as current
    assert json.loads(path.read_text()) == loaded  # strict JSON: no NaN tokens
    assert loaded["retrieval"] == {"mrr": 0.5, "n": 3, "ok": True, "curve": [1.0, None]}
    assert loaded["correlations"] == {"m1": {"x": 1.5}, "m2": {"x": None}} and loaded["inf"] is None
    other = {"retrieval": {"mrr": 0.75, "n": 3, "ok": False}, "new": {"v": 2}}
    table = runmetrics.compare_metrics(loaded, other)
    assert table.loc["retrieval/mrr"].tolist() == [0.5, 0.75, 0.25]
    assert "retrieval/ok" not in table.index
    assert np.isnan(table.at["correlations/m2/x", "A"]) and table.at["retrieval/curve[0]", "A"] == 1.0
    assert np.isnan(table.at["new/v", "A"]) and table.at["new/v", "B"] == 2


def test_cli_compare(tmp_path, capsys):
    runmetrics.write_metrics(tmp_path / "a", {"s": {"mrr": 0.5, "rank": 2}})
    runmetrics.write_metrics(tmp_path / "b", {"s": {"mrr": 0.625, "rank": 2}})
    runmetrics.write_metrics(tmp_path / "b", {"s": {"mrr": 0.625, "rank": 2}, "decoding": {"ppl": 3.0}})
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b" / "metrics.json")]) == 0
    out = capsys.readouterr().out
    assert "only in B: decoding (not computed by A's run)" in out and out.count("(written 20") == 2
    row = next(line for line in out.splitlines() if line.startswith("s/mrr"))
    assert row.split() == ["s/mrr", "0.5", "0.625", "0.125"]
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "nothing")]) == 2
    assert "no metrics file" in capsys.readouterr().err


def test_plots_draw(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    table = pd.DataFrame({"x": [50.0, 10.0], "y": [5.0, np.nan]}, index=["M:x", "M:y"])
    mrr = display.plot_matrix(pd.DataFrame({"x": [0.86, 0.94]}, index=["M:x", "M:y"]))
    assert [t.get_text() for t in mrr.texts] == ["0.86", "0.94"]  # both read "0.9" with one decimal
    ax = display.plot_matrix(table, title="t")
    assert len(ax.patches) == 2  # both diagonal cells outlined
    bars = display.plot_headline_bars(pd.DataFrame({"mean": [1.0, 2.0], "low": [0.5, 1.5], "high": [1.5, 2.5]},
                                              index=["a", "b"]))
    assert len(bars.patches) == 2


def test_permutation_test_is_not_fooled_by_scale():
    """A worse S_a on another similarity scale must not come out significant (raw cell mixing did)."""
    from workbench.measures.evaluation import permutation_test

    rng = np.random.default_rng(1)
    n = 40
    x = rng.standard_normal((n, 8))
    truth = x @ x.T
    good = truth + 1.5 * rng.standard_normal((n, n))              # S_b
    bad = 5.0 + 0.2 * (truth + 2.0 * rng.standard_normal((n, n)))  # S_a: noisier, shifted and narrower
    out = permutation_test(bad, good, truth, n_permutations=100, seed=0)
    assert out["observed_difference"] < 0
    assert out["p_value"] > 0.5  # mixing raw cells gave p = 0.0099 here
    reverse = permutation_test(good, bad, truth, n_permutations=100, seed=0)
    assert reverse["observed_difference"] > 0


# ---------------------------------------------------------------- heads against their backbone (stage 06)


def _noisy(rng, truth, scale):
    noise = rng.standard_normal(truth.shape)
    return truth + scale * (noise + noise.T)


def _heads_case(n=30, seed=3):
    """Truths for two aspects; head "a" equals its truth, head "b" equals the backbone."""
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((n, 6)), rng.standard_normal((n, 6))
    truths = {"a": ev.summary_similarity(x), "b": ev.summary_similarity(y)}
    backbone = ev.cosine_similarity_matrix(x + y + 1.5 * rng.standard_normal((n, 6)))
    heads = {"a": truths["a"].copy(), "b": backbone.copy()}
    return heads, truths, backbone


def test_head_vs_backbone_known_answers():
    from workbench.evaluate.report import head_vs_backbone

    heads, truths, backbone = _heads_case()
    table = head_vs_backbone(heads, truths, ["a", "b"], backbone, n_permutations=50, seed=0)
    assert list(table.index) == ["a", "b"]
    assert list(table.columns) == ["head", "backbone (whole abstract)", "gain", "p-value", "own head best"]
    a, b = table.loc["a"], table.loc["b"]
    # A head equal to its truth: perfect, well above the backbone, the smallest p-value 50 permutations allow.
    assert a["head"] == pytest.approx(100.0)
    assert a["gain"] > 0 and a["gain"] == pytest.approx(a["head"] - a["backbone (whole abstract)"])
    assert a["p-value"] == pytest.approx(1 / 51)
    # A head equal to the backbone: no gain, never significant.
    assert b["gain"] == pytest.approx(0.0, abs=1e-9)
    assert b["head"] == pytest.approx(b["backbone (whole abstract)"])
    assert b["p-value"] >= 0.5
    # Head a is perfect on truth a; on truth b, head b (the backbone, which mixes in y) beats head a (= truth a).
    assert table["own head best"].dtype == bool
    assert bool(a["own head best"]) and bool(b["own head best"])
    # The head column is Table 2's number: the mean per-document Spearman x100.
    assert b["head"] == pytest.approx(100 * np.nanmean(ev.rowwise_spearman(heads["b"], truths["b"])))


def test_head_vs_backbone_own_head_not_best_and_missing_truth():
    from workbench.evaluate.report import head_vs_backbone

    heads, truths, backbone = _heads_case()
    heads = {"a": heads["a"], "b": truths["a"].copy()}  # head b follows aspect a, not b
    table = head_vs_backbone(heads, {"a": truths["a"]}, ["a", "b"], backbone, n_permutations=20, seed=0)
    assert list(table.index) == ["a"]  # no truth for b: no row
    assert bool(table.at["a", "own head best"])  # a tie with head b still counts as best
    rng = np.random.default_rng(0)
    heads = {"a": _noisy(rng, truths["a"], 0.5), "b": truths["a"].copy()}
    table = head_vs_backbone(heads, truths, ["a", "b"], backbone, n_permutations=20, seed=0)
    assert not bool(table.at["a", "own head best"])  # head b is the better head for aspect a


def test_head_backbone_intervals_and_plot():
    import matplotlib

    matplotlib.use("Agg")
    from workbench.evaluate.report import head_backbone_intervals, head_vs_backbone, plot_head_vs_backbone

    heads, truths, backbone = _heads_case()
    intervals = head_backbone_intervals(heads, truths, ["a", "b"], backbone, seed=0)
    assert len(intervals) == 4 and set(intervals["embedding"]) == {"head", "backbone"}
    table = head_vs_backbone(heads, truths, ["a", "b"], backbone, n_permutations=10, seed=0)
    for _, row in intervals.iterrows():
        column = "head" if row["embedding"] == "head" else "backbone (whole abstract)"
        assert row["mean"] == pytest.approx(table.at[row["truth"], column])
        assert row["low"] <= row["mean"] + 1e-9 and row["mean"] <= row["high"] + 1e-9
    ax = plot_head_vs_backbone(intervals, "minilm")
    assert len(ax.patches) == 4


def test_backbone_of_reads_the_unified_config(tmp_path):
    from workbench.evaluate.report import backbone_of

    folder = RunDir(tmp_path).unified_model
    folder.mkdir()
    with pytest.raises(FileNotFoundError):
        backbone_of(tmp_path)
    (folder / "workbench_config.json").write_text(json.dumps({"format": "workbench-pooled-encoder",
                                                              "base_model": "minilm"}))
    assert backbone_of(tmp_path) == "minilm"
    (folder / "workbench_config.json").write_text(json.dumps({"format": "workbench-aspect-encoder",
                                                              "base_model": "mpnet", "dim": 8}))
    assert backbone_of(str(tmp_path)) == "mpnet"
    (folder / "workbench_config.json").write_text(json.dumps({"format": "workbench-aspect-encoder"}))
    with pytest.raises(ValueError, match="base_model"):
        backbone_of(tmp_path)


def test_truth_suffix_names_the_encoder():
    from workbench.evaluate.report import with_truth_suffix

    table = pd.DataFrame({"challenge": [1.0], "approach": [2.0]}, index=["unified:challenge"])
    assert list(with_truth_suffix(table, "minilm").columns) == ["challenge @minilm", "approach @minilm"]


def test_truths_by_encoder_main_and_other_encoders(monkeypatch):
    from types import SimpleNamespace

    from workbench.evaluate import report

    seen = []

    def fake_encode(model, texts, **kwargs):  # a different, deterministic "encoder" per name
        seen.append(model)
        rng = np.random.default_rng(len(model))
        table = {t: rng.standard_normal(5) for t in sorted(set(texts))}
        return np.stack([table[t] for t in texts])

    monkeypatch.setattr(report, "encode_texts", fake_encode)
    docs = pd.DataFrame({"doc_id": [f"d{i}" for i in range(6)], "summary_x": [f"x{i}" for i in range(6)],
                         "summary_y": [f"y{i}" for i in range(5)] + [" "],  # one summary missing: no truth
                         "labels": ["p", "p", "q", "q", "r", None]})
    by = report.truths_by_encoder(SimpleNamespace(docs=docs), ["x", "y"], ["mpnet", "minilm"])
    assert list(by) == ["mpnet", "minilm"]
    assert set(by["mpnet"]) == {"x", "labels"} and set(by["minilm"]) == {"x"}  # labels only with the main one
    assert seen == ["mpnet", "minilm"]
    assert not np.allclose(by["mpnet"]["x"], by["minilm"]["x"], equal_nan=True)
    assert np.isnan(np.diag(by["minilm"]["x"])).all()
    with pytest.raises(ValueError):
        report.truths_by_encoder(SimpleNamespace(docs=docs), ["x"], [])


def test_encode_texts_encodes_each_text_once_and_matches_the_encoder(tmp_path, monkeypatch):
    """Stage 06 meets one summary in the truths, Table 1 and the reference rows: one encoder pass, kept in the run."""
    from workbench.evaluate import report
    from workbench.embed.encoders import AspectEncoder
    from workbench.embed.features import FrozenBackbone

    calls = []
    embed = FrozenBackbone.embed

    def counting(self, texts, **kwargs):
        calls.append(len(texts))
        return embed(self, texts, **kwargs)

    monkeypatch.setattr(FrozenBackbone, "embed", counting)
    monkeypatch.setattr(report, "TEXT_CACHES", {})
    texts = ["A parser for noisy tweets.", "Machine translation of low-resource languages.", "A parser for noisy tweets."]
    first = report.encode_texts("minilm", texts, run_dir=tmp_path)
    assert calls == [2]  # the repeated text once
    again = report.encode_texts("minilm", texts[::-1], run_dir=tmp_path)
    assert calls == [2]
    np.testing.assert_allclose(again, first[::-1])
    direct = AspectEncoder.from_base("minilm", ["base"], pooling="mean").encode_pooled(texts, max_length=256)
    np.testing.assert_allclose(first, direct, atol=1e-5)
    monkeypatch.setattr(report, "TEXT_CACHES", {})  # a new session reads the run's shards
    np.testing.assert_allclose(report.encode_texts("minilm", texts, run_dir=tmp_path), first)
    assert calls == [2]


def test_table3_compares_the_reconstructed_papers_with_the_matching_embedding_of_the_same_papers():
    """The reconstructed columns cover a few papers; their 'same papers' columns are the matching ones on those."""
    from workbench.evaluate.report import decoding_table

    class Decoder:  # the decoding.Decoder interface
        aspect, reports_unconditioned, names_sources = "a", False, False

        calls = 0

        def statements(self, embeddings, exclude=None, **_):
            return [{"text": c[0], "doc_id": None, "cosine": float("nan")} for c in self.describe(embeddings)]

        def perplexities(self, requests, batch_size=8):  # a stand-in: the mean first coordinate of the rows
            Decoder.calls += 1
            return {n: (99.0 if e is None else float(np.mean(np.atleast_2d(e)[:, 0]))) for n, (e, _, _) in requests.items()}

        def describe(self, embeddings, exclude=None, **_):
            return [[["Parsing noisy tweets.", "Translating speech.", "Summaries of news."][int(np.argmax(e))]]
                    for e in np.atleast_2d(embeddings)]

    emb = np.eye(3)[[0, 1, 2, 0]] + 0.1
    refs = [["Parsing tweets."], ["Speech translation."], ["News summaries."], ["Parsing user text."]]
    rebuilt = (np.eye(3)[[1, 2]] + 0.1, [2, 3])  # papers 2 and 3, reconstructed wrongly
    table, examples = decoding_table({"a": Decoder()}, {"a": emb}, {"a": refs}, reconstructed={"a": rebuilt},
                                     bertscore_model="minilm")
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    row = table.loc["a"]
    assert row["ppl matching, same papers"] == pytest.approx(unit[[2, 3], 0].mean())
    assert row["bertscore matching, same papers"] == pytest.approx(examples["a"]["bertscore"].to_numpy()[[2, 3]].mean())
    assert row["bertscore matching, same papers"] > row["bertscore reconstructed"]  # wrong papers decode worse
    assert row["reconstructed documents"] == 2 and str(table["documents"].dtype) == "Int64"
    assert Decoder.calls == 1  # one LM pass: the same papers' matching prompts are the matching rows' own


def test_table1_reading_says_where_an_aspect_model_does_not_retrieve_best():
    table = pd.DataFrame({"challenge model": [0.860, 0.90], "approach model": [0.884, 0.92], "base encoder": [0.85, 0.8]},
                         index=["challenge", "approach"])
    lines = ev.diagonal_reading(table, pairs={"challenge": 100, "approach": 90}).splitlines()
    assert "approach model retrieves better than its own model over 100 pairs (0.884 against 0.860)" in lines[0]
    assert "not specific" in lines[0] and "base encoder 0.850" in lines[0] and "tie" not in lines[0]
    assert "its own model retrieves best over 90 pairs (0.920; next the challenge model, 0.900)" in lines[1]
    # a gap under 0.02 is a tie, whichever way it goes
    close = ev.diagonal_reading(table.assign(**{"approach model": [0.865, 0.92]})).splitlines()[0]
    assert "retrieves better" in close and "a tie on this many pairs" in close and "not specific" not in close
