"""Supervision from the aspect file on a corpus without human summaries: the zero-shot floor, the stage-03 guard.

The synthetic corpus (scripts/synthetic_corpus.py) with its summary and highlight columns dropped,
as a user's own export would be, and data/clinical-study-aspects.yaml, written from the aspects'
meaning: nothing may pass by keyword match, so the first test checks that no word naming one of
the generator's values is in that file. Rankings are checked with scipy's Spearman, not the
package's.
"""

import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from synthetic_corpus import ASPECTS, DRUGS, DRUGS_B, NUISANCE, WORDINGS, WORDINGS_B, synthetic_frame  # noqa: E402
from workbench.core.rundir import RunDir  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.corpus import Corpus  # noqa: E402
from workbench.embed import aspectfile  # noqa: E402
from workbench.measures.evaluation import label_similarity  # noqa: E402
from workbench.evaluate.report import ground_truths  # noqa: E402

ASPECT_FILE = ROOT / "data" / "clinical-study-aspects.yaml"
STOP = {"with", "from", "that", "their", "over", "into", "this", "time", "study", "studies", "point", "single"}


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 4 and w not in STOP}


def value_words() -> dict[str, str]:
    """{word: value} for every word that names one value of a factor (it is in that value's wordings only), in
    either generator (style "a" and the second one, "b")."""
    out = {}
    for wordings_of in (WORDINGS, WORDINGS_B):
        for factor, values in wordings_of.items():
            per_value = {v: set().union(*(words(w) for w in wordings)) for v, wordings in values.items()}
            for v, ws in per_value.items():
                others = set().union(*(o for u, o in per_value.items() if u != v))
                out.update({w: f"{factor}={v}" for w in ws - others})
    out.update({d.lower(): f"{NUISANCE}={d}" for d in DRUGS + DRUGS_B})
    return out


def user_corpus(seed: int, n: int) -> Corpus:
    """The synthetic test papers as a user would have them: no summary_* or highlights_* columns."""
    frame = synthetic_frame(n_train=0, n_val=0, n_test=n, seed=seed)
    return Corpus(frame.drop(columns=[c for c in frame if c.startswith(("summary_", "highlights_"))
                                      or c == "sentences"]))


def row_spearman(sim: np.ndarray, truth: np.ndarray) -> float:
    """Mean over papers of the Spearman x100 between a paper's similarities and the truth's, itself left out."""
    keep = ~np.eye(len(sim), dtype=bool)
    return 100 * float(np.mean([spearmanr(sim[i][keep[i]], truth[i][keep[i]]).statistic for i in range(len(sim))]))


def per_paper_spearman(emb: np.ndarray, values) -> float:
    values = np.asarray(values, dtype=object)
    return row_spearman(emb @ emb.T, (values[:, None] == values[None, :]).astype(float))


def test_the_aspect_file_names_no_value_of_the_generator():
    """What the file says about the aspects (their descriptions, include and exclude items, examples; not the
    aspects' names, which are the generator's factor names, nor the prompt template) has no value word."""
    data = yaml.safe_load(ASPECT_FILE.read_text())
    said = [data.get("domain", ""), data.get("description", "")]
    said += [x for a in data["aspects"] for key in ("description", "include", "exclude", "examples")
             for x in _strings(a.get(key, ""))]
    text = " ".join(said)
    found = {w: value_words()[w] for w in words(text) & set(value_words())}
    assert not found, f"the aspect file would pass by keyword match: {found}"
    assert len(value_words()) > 40  # the check is really looking (asthma, placebo, toddlers, ... are in the list)


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_scores_and_floor_against_a_direct_computation():
    """Bag-of-words stand-in vectors: the query, the sentence weights and the pooled vector by hand."""
    from workbench.embed.features import DocumentFeatures

    aspects = load_aspects(ASPECT_FILE)
    rng = np.random.default_rng(0)
    table = {}

    def embed(texts):
        for t in texts:
            table.setdefault(t, rng.normal(size=8))
        return np.stack([table[t] for t in texts])

    protos = aspectfile.aspect_prototypes(aspects, ASPECTS, embed)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    p = np.stack([unit(unit(embed(aspectfile.aspect_texts(aspects[a]))).mean(axis=0)) for a in ASPECTS])
    ex = unit(embed(list(aspects["disease"].exclude))).mean(axis=0)  # the mean of the unit exclude vectors
    query = p[0] - (p[1] + p[2]) / 2 - aspectfile.EXCLUDE_WEIGHT * ex
    np.testing.assert_allclose(protos.queries[0], query, atol=1e-5)
    sents = unit(rng.normal(size=(3, 8)))
    whole = unit(rng.normal(size=(1, 8)))
    feats = DocumentFeatures(whole.astype(np.float32), [sents.astype(np.float32)], [["a", "b", "c"]])
    w = np.exp(sents @ query / aspectfile.TEMPERATURE)
    w /= w.sum()
    expected = unit(0.5 * unit(w @ sents) + 0.5 * whole[0])
    np.testing.assert_allclose(aspectfile.zero_shot_embeddings(feats, protos)["disease"][0], expected, atol=1e-5)


def test_an_aspect_the_file_says_nothing_about_is_refused_by_name():
    aspects = load_aspects(ASPECT_FILE)
    empty = aspects["method"].__class__(**{**aspects["method"].__dict__, "description": "", "include": (),
                                           "examples": ()})
    broken = {"disease": aspects["disease"], "method": empty}
    with pytest.raises(ValueError, match=r"\['method'\].*empty description"):
        aspectfile.aspect_prototypes(broken, ["disease", "method"], lambda t: np.ones((len(t), 4)))


def test_label_columns_are_per_aspect_truths():
    frame = pd.DataFrame({"doc_id": list("abcd"), "title": "", "abstract": ["x."] * 4,
                          "label_disease": ["asthma", "asthma", "gout", None]})
    truths = ground_truths(Corpus(frame), ["disease", "method"])
    assert set(truths) == {"disease"}
    np.testing.assert_array_equal(np.nan_to_num(truths["disease"], nan=-1),
                                  np.nan_to_num(label_similarity(frame["label_disease"].tolist()), nan=-1))


@pytest.mark.slow
def test_the_floor_follows_each_aspect_more_than_the_whole_abstract():
    """MiniLM on 60 synthetic papers: per aspect, the floor ranks its own factor better than MiniLM's whole
    abstract and follows the nuisance (the drug) less."""
    from workbench.embed.features import FeatureCache, FrozenBackbone

    corpus = user_corpus(seed=1, n=60)
    cache = FeatureCache(None, FrozenBackbone("minilm"))
    feats = cache.documents(corpus.texts())
    floor = aspectfile.zero_shot_embeddings(feats, aspectfile.aspect_prototypes(
        load_aspects(ASPECT_FILE), ASPECTS, cache.vectors))
    whole = feats.whole / np.linalg.norm(feats.whole, axis=1, keepdims=True)
    docs = corpus.docs
    for a in ASPECTS:
        assert per_paper_spearman(floor[a], docs[a]) > per_paper_spearman(whole, docs[a]), a
        assert per_paper_spearman(floor[a], docs[NUISANCE]) < per_paper_spearman(whole, docs[NUISANCE]), a


def test_a_calibrated_scorer_is_sklearns_classifiers_and_a_head_holds_it_exactly():
    """Two rounds by hand with sklearn on stand-in vectors: the scorer's weights are the second round's
    classifiers, and a SentencePoolingHead with its query and bias returns the same pooled vectors."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from workbench.embed.features import DocumentFeatures
    from workbench.embed.floor import floor_state
    from workbench.embed.heads import SentencePoolingHead

    rng = np.random.default_rng(5)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    topics = unit(rng.normal(size=(3, 16)))  # each document: one sentence near each aspect, one filler
    sents = [unit(np.stack([topics[0], topics[1], topics[2], np.zeros(16)]) + 0.6 * rng.normal(size=(4, 16)))
             for _ in range(40)]
    feats = DocumentFeatures(unit(rng.normal(size=(40, 16))).astype(np.float32),
                             [x.astype(np.float32) for x in sents], [["s"] * 4] * 40)
    protos = aspectfile.AspectPrototypes(["a", "b", "c"], topics.astype(np.float32), topics.astype(np.float32))
    scorer = aspectfile.calibrate(feats, protos, rounds=2)
    assert isinstance(scorer, aspectfile.CalibratedScorer)

    S = unit(np.concatenate(sents)).astype(np.float32)
    W = np.concatenate([np.stack([w[a] for a in "abc"], 1) for w in aspectfile.sentence_weights(feats, protos)])
    for _ in range(2):
        fits = [LogisticRegression().fit(S, ((W[:, j] >= 0.5) & (W.argmax(1) == j)).astype(int)) for j in range(3)]
        P = np.stack([f.predict_proba(S)[:, 1] for f in fits], 1).reshape(40, 4, 3)
        W = (P / P.sum(axis=1, keepdims=True)).reshape(160, 3)
    np.testing.assert_allclose(scorer.weights, np.stack([f.coef_[0] for f in fits]), rtol=1e-4, atol=1e-5)
    pooled = aspectfile.zero_shot_embeddings(feats, scorer)
    head = SentencePoolingHead(16)
    head.load_state_dict(floor_state(head, scorer.weights[1], float(scorer.biases[1]), temperature=1.0))
    with torch.no_grad():
        out, _, _ = head(*feats.padded())
    np.testing.assert_allclose(unit(out.detach().numpy()), pooled["b"], atol=1e-5)


def _two_aspect_features(shared: bool, n: int = 80, seed: int = 8):
    """Documents of two sentences, one per aspect: each aspect's value picks its sentence's direction; with
    `shared`, both sentences take the same value (the aspects carry one structure), else independent ones."""
    from workbench.embed.features import DocumentFeatures

    rng = np.random.default_rng(seed)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    axes, values = unit(rng.normal(size=(2, 32))), unit(rng.normal(size=(6, 32)))
    va = rng.integers(6, size=n)
    vb = va if shared else rng.integers(6, size=n)
    sents = [unit(np.stack([2 * axes[0] + values[va[i]], 2 * axes[1] + values[vb[i]]])
                  + 0.05 * rng.normal(size=(2, 32))).astype(np.float32) for i in range(n)]
    whole = unit(np.stack([s.sum(axis=0) for s in sents])).astype(np.float32)
    protos = aspectfile.AspectPrototypes(["a", "b"], axes.astype(np.float32), axes.astype(np.float32))
    return DocumentFeatures(whole, sents, [["s", "t"]] * n), protos


def test_the_corpus_blend_reads_how_much_the_aspects_share():
    """Independent aspects: the sentences' share near 1 (the whole abstract would only mix the other aspect in);
    one shared structure: near 1/2. s is the debiased CKA of health.linear_cka between the pooled sentences."""
    from workbench.measures.health import linear_cka

    for shared, lo, hi in ((False, 0.9, 1.0), (True, 0.5, 0.6)):
        feats, protos = _two_aspect_features(shared)
        blends = aspectfile.corpus_blends(feats, protos)
        pooled = aspectfile.zero_shot_embeddings(feats, protos, blend=1.0)
        s = max(0.0, linear_cka(pooled["a"], pooled["b"]))
        assert blends == pytest.approx({"a": 1 - s / 2, "b": 1 - s / 2}, abs=1e-3)
        assert lo <= blends["a"] <= hi, (shared, blends)
    few = aspectfile.corpus_blends(_two_aspect_features(False, n=10)[0], protos)
    assert few == {"a": aspectfile.BLEND, "b": aspectfile.BLEND}  # too few papers to read it from


def test_a_head_holds_a_blend_other_than_half():
    import torch
    from workbench.embed.floor import floor_state
    from workbench.embed.heads import SentencePoolingHead

    feats, protos = _two_aspect_features(False, n=12)
    expected = aspectfile.zero_shot_embeddings(feats, protos, blend={"a": 0.9, "b": 1.0})
    for j, (a, blend) in enumerate((("a", 0.9), ("b", 1.0))):
        head = SentencePoolingHead(32)
        head.load_state_dict(floor_state(head, protos.queries[j], -40.0, blend=blend))
        with torch.no_grad():
            out, _, _ = head(*feats.padded())
        out = out.numpy() / np.linalg.norm(out.numpy(), axis=1, keepdims=True)
        np.testing.assert_allclose(out, expected[a], atol=1e-4)


def _with_boilerplate(n: int = 60, seed: int = 9):
    """Stand-in documents of four sentences: one of three recurring sentences (each in about a third of the
    papers, up to noise below the NEAR cosine's), a sentence repeated in two papers only, and two unique ones."""
    from workbench.embed.features import DocumentFeatures

    rng = np.random.default_rng(seed)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    recurring, pair = unit(rng.normal(size=(3, 24))), unit(rng.normal(size=(n // 2, 24)))
    sents = [unit(np.stack([recurring[i % 3] + 0.02 * rng.normal(size=24), pair[i // 2], *rng.normal(size=(2, 24))]))
             .astype(np.float32) for i in range(n)]
    return DocumentFeatures(unit(rng.normal(size=(n, 24))).astype(np.float32), sents, [["s"] * 4] * n)


def test_boilerplate_is_what_recurs_across_papers_by_brute_force():
    from workbench.embed import boilerplate

    feats = _with_boilerplate()
    found = boilerplate.find_boilerplate(feats)
    assert len(found) == 3  # one vector per recurring sentence; the pairs recur in too few papers
    S = np.concatenate(feats.sentences)
    owner = np.repeat(np.arange(len(feats.sentences)), 4)
    need = max(boilerplate.MIN_PAPERS, int(np.ceil(boilerplate.SHARE * (len(feats.sentences) - 1))))
    brute = [len({owner[j] for j in range(len(S)) if owner[j] != owner[i] and S[i] @ S[j] >= boilerplate.NEAR})
             >= need for i in range(len(S))]
    covered = (S @ found.T).max(axis=1) >= boilerplate.NEAR
    np.testing.assert_array_equal(covered, brute)
    assert boilerplate.keep_mask(feats.sentences[0], found).tolist() == [False, True, True, True]
    assert boilerplate.keep_mask(feats.sentences[0][:1], found).tolist() == [True]  # nothing else: kept
    assert boilerplate.keep_mask(feats.sentences[0], None).all()


def test_a_head_leaves_boilerplate_out_as_the_aspect_file_does_and_keeps_it_in_its_checkpoint(tmp_path):
    import torch
    from workbench.embed import boilerplate
    from workbench.embed.floor import floor_state
    from workbench.embed.heads import PooledAspectModel

    feats = _with_boilerplate()
    found = boilerplate.find_boilerplate(feats)
    rng = np.random.default_rng(2)
    query = (feats.sentences[0][0] + 0.3 * rng.normal(size=24)).astype(np.float32)  # it likes the recurring one
    protos = aspectfile.AspectPrototypes(["a"], query[None], query[None])
    expected = aspectfile.zero_shot_embeddings(feats, protos, blend=0.8, boilerplate=found)["a"]
    assert not np.allclose(expected, aspectfile.zero_shot_embeddings(feats, protos, blend=0.8)["a"], atol=1e-3)
    model = PooledAspectModel("minilm", ["a"], hidden=24, pool=True)
    model.heads["a"].load_state_dict(floor_state(model.heads["a"], query, -40.0, blend=0.8, boilerplate=found))
    model.save_pretrained(tmp_path / "m")
    loaded = PooledAspectModel.from_pretrained(tmp_path / "m", device="cpu")
    np.testing.assert_allclose(loaded.heads["a"].pooling.boilerplate.numpy(), found)
    with torch.no_grad():
        out = loaded.forward_features(feats)["a"][0].numpy()
    np.testing.assert_allclose(out / np.linalg.norm(out, axis=1, keepdims=True), expected, atol=1e-4)
    # A checkpoint written before heads held boilerplate loads, with none.
    from safetensors.torch import load_file, save_file

    state = {k: v for k, v in load_file(str(tmp_path / "m" / "model.safetensors")).items()
             if not k.endswith("boilerplate")}
    save_file(state, str(tmp_path / "m" / "model.safetensors"), metadata={"format": "pt"})
    assert PooledAspectModel.from_pretrained(tmp_path / "m", device="cpu").heads["a"].pooling.boilerplate.shape == (0, 24)


def test_calibration_is_refused_where_an_aspect_has_too_few_marked_sentences():
    from workbench.embed.features import DocumentFeatures

    rng = np.random.default_rng(6)
    sents = [rng.normal(size=(3, 8)).astype(np.float32) for _ in range(3)]  # 9 sentences: at most 3 marked each
    feats = DocumentFeatures(rng.normal(size=(3, 8)).astype(np.float32), sents, [["s"] * 3] * 3)
    q = rng.normal(size=(2, 8)).astype(np.float32)
    assert aspectfile.calibrate(feats, aspectfile.AspectPrototypes(["a", "b"], q, q)) is None


@pytest.mark.slow
def test_calibrated_heads_follow_each_aspect_more_on_both_generators():
    """MiniLM, 150 papers of each synthetic generator (the second one never tuned on): calibrated to the
    corpus, the aspect file's head ranks disease and population higher than its zero-shot scores do, and
    method no lower (its gain, 2 to 5 points at 150 papers, is within noise at 100); stage 03's floor
    then ranks method higher still and follows the drug less, each head its own factor more than the drug."""
    from workbench.embed.boilerplate import find_boilerplate
    from workbench.embed.features import FeatureCache, FrozenBackbone

    cache = FeatureCache(None, FrozenBackbone("minilm"))
    protos = aspectfile.aspect_prototypes(load_aspects(ASPECT_FILE), ASPECTS, cache.vectors)
    for style in ("a", "b"):
        frame = synthetic_frame(n_train=0, n_val=0, n_test=150, seed=7, style=style)
        feats = cache.documents(frame["abstract"].tolist())
        zero = aspectfile.zero_shot_embeddings(feats, protos)
        calibrated = aspectfile.zero_shot_embeddings(feats, aspectfile.calibrate(feats, protos))
        for a in ASPECTS:
            gain = per_paper_spearman(calibrated[a], frame[a]) - per_paper_spearman(zero[a], frame[a])
            assert gain > (1.0 if a != "method" else -1.0), (style, a, gain)
        # Stage 03's floor: boilerplate left out, blended as the corpus says. Method and the drug moved most
        # (benchmarks/aspect_file.py: method 25 -> 54% of the ceiling on generator a, the drug 27-34 -> 5-12).
        boiler = find_boilerplate(feats)
        scorer = aspectfile.calibrate(feats, protos, boilerplate=boiler)
        floor = aspectfile.zero_shot_embeddings(feats, scorer, blend=aspectfile.corpus_blends(feats, scorer,
                                                                                           boilerplate=boiler),
                                                boilerplate=boiler)
        method = per_paper_spearman(floor["method"], frame["method"]) - per_paper_spearman(calibrated["method"],
                                                                                          frame["method"])
        assert method > 5.0, (style, method)
        for a in ASPECTS:
            assert per_paper_spearman(floor[a], frame[NUISANCE]) < per_paper_spearman(calibrated[a], frame[NUISANCE]) - 5
            assert per_paper_spearman(floor[a], frame[a]) > per_paper_spearman(floor[a], frame[NUISANCE]), (style, a)


def frozen_run(folder, corpus: Corpus, names, train: int = 20):
    """(a run directory whose unified model is untrained frozen MiniLM heads, the model loaded): the corpus's first
    `train` papers are stage 02's training split, the rest its validation split."""
    from workbench.embed.checkpoints import load_model
    from workbench.embed.heads import PooledAspectModel

    run = RunDir(folder)
    run.write_split(corpus.ids[:train], corpus.ids[train:])
    PooledAspectModel("minilm", names, hidden=384, pool=True).save_pretrained(
        run.unified_model, extra={"stage": "distill", "mode": "frozen"})
    return run, load_model(run.unified_model, run_dir=run)


@pytest.fixture(scope="module")
def guarded_run(tmp_path_factory):
    """A run whose unified model has one head that follows the wrong aspect (method reads disease sentences)."""
    from workbench.embed.floor import floor_bias, floor_state

    frame = synthetic_frame(n_train=0, n_val=0, n_test=70, seed=0)
    corpus = Corpus(frame.drop(columns=[c for c in frame if c.startswith(("summary_", "highlights_"))
                                        or c == "sentences"]))
    run, model = frozen_run(tmp_path_factory.mktemp("guard"), corpus, ASPECTS, train=30)
    aspects = load_aspects(ASPECT_FILE)
    protos = aspectfile.aspect_prototypes(aspects, ASPECTS, model.cache.vectors)
    feats = model.features(corpus.subset(ids=corpus.ids[30:]).texts())
    model.heads["method"].load_state_dict(floor_state(model.heads["method"], protos.queries[0],
                                                      floor_bias(feats, protos.queries[0])))
    model.save_pretrained(run.unified_model)
    return run, corpus, aspects


@pytest.mark.slow
def test_the_guard_replaces_a_head_that_follows_another_aspect(guarded_run, capsys):
    from workbench.embed.checkpoints import load_model
    from workbench.embed.guard import check_heads, load_guard

    run, corpus, aspects = guarded_run
    before = load_model(run.unified_model, run_dir=run).encode(corpus.texts()[:5])["method"]
    report = check_heads(run, corpus, aspects, ASPECTS, n_pairs=20)
    assert report["checked"] and report["marks"].startswith("the aspect file")
    assert set(report["blends"]) == set(ASPECTS) and all(0.5 <= b <= 1 for b in report["blends"].values())
    method = report["aspects"]["method"]
    assert method["kept"] == "aspect file" and method["head"] < method["base"] < method["aspect file"]
    assert "less selectively than the encoder" in method["verdict"] and "method" in capsys.readouterr().out
    # The swapped sentences came from the aspect file that built the floor: the verdict cannot confirm itself.
    assert method["verified"] is False and method["verdict"].startswith("unverified") and "label_method" in \
        method["verdict"]
    assert load_guard(run) == json.loads(json.dumps(report))  # what stage 06 reads
    after = load_model(run.unified_model, run_dir=run)
    assert after.extra["guard"]["method"] == "aspect file"
    assert not np.allclose(after.encode(corpus.texts()[:5])["method"], before)  # the saved head changed
    # The synthetic aspects vary independently, so the floor pools each sentence's words towards its aspect,
    # and the shipped head keeps doing so.
    assert all(0.3 <= s <= aspectfile.WORD_SHARE for s in report["word_shares"].values()), report["word_shares"]
    head = after.heads["method"]
    assert head.pools_words() and float(head.pooling.word_share) == pytest.approx(report["word_shares"]["method"])
    assert float(head.pooling.word_mean.norm()) > 0.1  # centred on the corpus's mean of the pooled words


@pytest.mark.slow
def test_the_guard_says_why_it_did_not_check(guarded_run, tmp_path):
    from workbench.embed.guard import check_heads

    run, corpus, aspects = guarded_run
    copy = RunDir(tmp_path / "copy")
    shutil.copytree(run, copy)
    empty = aspects["method"].__class__(**{**aspects["method"].__dict__, "description": "", "include": (),
                                           "examples": ()})
    broken = {"disease": aspects["disease"], "method": empty, "population": aspects["population"]}
    report = check_heads(copy, corpus, broken, ASPECTS, n_pairs=5)
    assert report == {"checked": False, "reason": report["reason"]} and "method" in report["reason"]


def test_label_scores_against_scipy():
    from workbench.embed.guard import label_scores

    rng = np.random.default_rng(3)
    v = rng.normal(size=(9, 4))
    labels = ["a", "b", "a", "c", None, "b", "a", "c", "b"]
    got = label_scores({"x": v}, labels)["x"]
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    sim = unit @ unit.T
    rows = []
    for i in range(9):
        if labels[i] is None:
            continue
        js = [j for j in range(9) if j != i and labels[j] is not None]
        rows.append(spearmanr(sim[i, js], [labels[i] == labels[j] for j in js])[0])
    assert got == pytest.approx(100 * np.nanmean(rows))


@pytest.mark.slow
def test_swapped_descriptions_are_caught_by_label_columns_and_the_base_is_kept(tmp_path, capsys):
    """An aspect file whose disease and method descriptions are swapped: heads built from it follow the
    wrong aspect. The swap probe cannot see it (its sentences come from the same file); the user's label
    columns can, and the heads fall back to the encoder's whole abstract."""
    from workbench.embed.checkpoints import load_model
    from workbench.embed.floor import floor_bias, floor_state
    from workbench.embed.guard import check_heads, load_guard

    corpus = user_corpus(seed=4, n=60)
    corpus = Corpus(corpus.docs.assign(**{f"label_{a}": corpus.docs[a] for a in ASPECTS}))
    right = load_aspects(ASPECT_FILE)
    fields = ("description", "include", "examples")
    swapped = {**{a: right[a] for a in ASPECTS},
               "disease": right["disease"].__class__(**{**right["disease"].__dict__,
                                                        **{f: getattr(right["method"], f) for f in fields}}),
               "method": right["method"].__class__(**{**right["method"].__dict__,
                                                      **{f: getattr(right["disease"], f) for f in fields}})}
    run, model = frozen_run(tmp_path, corpus, ASPECTS)
    protos = aspectfile.aspect_prototypes(swapped, ASPECTS, model.cache.vectors)
    feats = model.features(corpus.subset(ids=corpus.ids[20:]).texts())
    for j, a in enumerate(ASPECTS):  # what supervision from the swapped file teaches: its own zero-shot head
        model.heads[a].load_state_dict(floor_state(model.heads[a], protos.queries[j],
                                                   floor_bias(feats, protos.queries[j])))
    model.save_pretrained(run.unified_model)

    report = check_heads(run, corpus, swapped, ASPECTS, n_pairs=20)
    assert report["checked"] and set(report["labels"]) == set(ASPECTS)
    for a in ("disease", "method"):
        row = report["aspects"][a]
        assert row["checked by"] == f"label_{a}" and row["kept"] == "base" and row["verified"] is True, row
        assert row["labels"]["head"] < row["labels"]["base"] - 1
        assert "less than the encoder" in row["verdict"] and "description" in row["verdict"]
    assert "disease" in capsys.readouterr().out
    assert load_guard(run)["aspects"]["disease"]["kept"] == "base"  # what stage 06 prints
    after = load_model(run.unified_model, run_dir=run)
    texts = corpus.texts()[:6]
    np.testing.assert_allclose(after.encode(texts)["disease"], after.base_vectors(texts), atol=1e-5)
    # With the right file no head falls back to the base: each is kept, or replaced by the aspect file's head
    # calibrated to the corpus (`aspectfile.calibrate`) where that follows the labels more.
    run2 = RunDir(tmp_path / "right")
    shutil.copytree(run, run2)
    protos = aspectfile.aspect_prototypes(right, ASPECTS, model.cache.vectors)
    for j, a in enumerate(ASPECTS):
        model.heads[a].load_state_dict(floor_state(model.heads[a], protos.queries[j],
                                                   floor_bias(feats, protos.queries[j])))
    model.save_pretrained(run2.unified_model)
    kept = check_heads(run2, corpus, right, ASPECTS, n_pairs=20)
    assert all(kept["aspects"][a]["kept"] in ("head", "aspect file") for a in ASPECTS), kept["aspects"]
    for a in ASPECTS:  # the calibrated head is at least as good as the zero-shot one against the labels here
        row = kept["aspects"][a]["labels"]
        assert row["aspect file"] >= row["head"] - 1.0, (a, row)


@pytest.mark.slow
def test_on_generator_c_the_probe_speaks_of_selectivity_and_the_labels_decide_every_aspect(tmp_path):
    """Generator c (`scripts/generator_c.py`, the `medicine` preset's aspects; never used to choose a step),
    as a user has it: no highlights. The swap probe's marks then come from the aspect file, and it cannot tell
    a head that ranks papers by an aspect from one that only reads the aspect's sentences (`benchmarks/check.py`:
    at 150 papers the floor is 16 times as selective as the base on disease, whose labels rank the base higher). So
    its verdicts are unverified and never say that a head follows an aspect more than the encoder. With the
    user's label columns every aspect gets a verdict from them, and what is kept is never below another
    column by more than the margin, by labels the test scores itself."""
    import generator_c as gc

    from workbench.embed.floor import fit_floor
    from workbench.embed.guard import LABEL_MARGIN, check_heads

    frame = gc.generator_c_frame(60, 2)
    names = list(gc.ASPECTS)
    corpus = Corpus(frame[["doc_id", "title", "abstract"]])
    medicine = load_aspects("medicine")
    run, model = frozen_run(tmp_path / "plain", corpus, names)
    floor = fit_floor(model.features(corpus.texts()), aspectfile.aspect_prototypes(medicine, names, model.cache.vectors),
                      model.cache.word_vectors)
    for a in names:  # the head supervision from the preset alone would give
        model.heads[a].load_state_dict(floor.head_state(model.heads[a], a))
    model.save_pretrained(run.unified_model)
    labelled = RunDir(tmp_path / "labelled")
    shutil.copytree(run, labelled)

    plain = check_heads(run, corpus, medicine, names, n_pairs=10, apply=False)
    assert plain["checked"] and plain["marks"].startswith("the aspect file") and plain["labels"] == []
    for a, row in plain["aspects"].items():
        assert row["verified"] is False and row["verdict"].startswith(("unverified", "not checked")), row
        assert "follows" not in row["verdict"] and ("selectively" in row["verdict"] or "not checked" in row["verdict"])

    with_labels = Corpus(corpus.docs.assign(**{f"label_{a}": frame[a].to_numpy() for a in names}))
    report = check_heads(labelled, with_labels, medicine, names, n_pairs=10, apply=False)
    assert set(report["labels"]) == set(names)
    held = with_labels.subset(ids=report["paper_ids"])
    base = model.base_vectors(held.texts())
    for a in names:
        row = report["aspects"][a]
        assert row["verified"] is True and row["checked by"] == f"label_{a}", row
        own = per_paper_spearman(base / np.linalg.norm(base, axis=1, keepdims=True), held.docs[f"label_{a}"])
        assert row["labels"]["base"] == pytest.approx(own, abs=1e-6)  # the labels' figure, computed here too
        assert row["labels"][row["kept"]] >= max(row["labels"].values()) - LABEL_MARGIN, (a, row)


def human_truth(cache, groups) -> tuple[np.ndarray, np.ndarray]:
    """(the cosine similarities of each paper's human-marked sentences pooled by MiniLM, which papers have any)."""
    pooled = np.zeros((len(groups), 384), np.float32)
    cache.vectors([s for g in groups for s in g])  # the sentences not yet cached, encoded in one go
    for i, g in enumerate(groups):
        if g:
            v = cache.vectors(list(g)).mean(axis=0)
            pooled[i] = v / np.linalg.norm(v)
    return pooled @ pooled.T, np.array([bool(g) for g in groups])


def truth_spearman(emb: np.ndarray, truth: np.ndarray, has: np.ndarray) -> float:
    """Mean per-paper Spearman x100 of the cosine similarities against the truth's, over the papers that have it."""
    idx = np.flatnonzero(has)
    emb = emb[idx] / np.linalg.norm(emb[idx], axis=1, keepdims=True)
    return row_spearman(emb @ emb.T, truth[np.ix_(idx, idx)])


def real_corpus(family: str, n: int) -> Corpus:
    """n test papers of a real family with its human-marked sentences as `highlights_<aspect>` columns."""
    if family == "aclsum":
        from workbench.data.corpus import load_corpus

        return load_corpus(f"aclsum:test[:{n}]")
    import csabstruct

    frame = csabstruct.load("test").head(n)
    docs = pd.DataFrame({"doc_id": frame["doc_id"], "title": "", "abstract": frame["abstract"]})
    for a, roles in csabstruct.ASPECT_ROLES.items():
        docs[f"highlights_{a}"] = [[s for s, r in zip(ss, rr) if r in roles]
                                   for ss, rr in zip(frame["sentences"], frame["roles"])]
    return Corpus(docs.reset_index(drop=True))


@pytest.mark.slow
@pytest.mark.parametrize("family", ["csabstruct", "aclsum"])
def test_on_real_text_what_the_check_keeps_is_never_below_the_encoder_by_the_human_sentences(tmp_path, family):
    """The real families (CSAbstruct, ACLSum: sentences people marked), `acl` preset. The heads are the aspect
    file's, but approach's reads challenge's sentences. With the human marks as the swap probe's evidence every
    verdict is verified, the wrong head is replaced, and whatever is kept ranks papers at least as the encoder's
    whole abstract does, by the human-marked sentences' similarities (scored here with scipy). Without them (the
    user's export) the marks come from the aspect file and every verdict says it is unverified."""
    from workbench.embed.checkpoints import load_model
    from workbench.embed.floor import fit_floor
    from workbench.embed.guard import INDEPENDENT_MARKS, check_heads

    corpus, acl = real_corpus(family, 56), load_aspects("acl")  # 36 papers checked: each margin 6 or more
    names = list(acl.names)
    run, model = frozen_run(tmp_path / "marked", corpus, names)
    floor = fit_floor(model.features(corpus.texts()), aspectfile.aspect_prototypes(acl, names, model.cache.vectors),
                      model.cache.word_vectors)
    for a in names:
        floor.place(model.heads[a], "challenge" if a == "approach" else a)
    model.save_pretrained(run.unified_model)
    plain = RunDir(tmp_path / "plain")
    shutil.copytree(run, plain)

    report = check_heads(run, corpus, acl, names, n_pairs=20)
    assert report["checked"] and report["marks"] == INDEPENDENT_MARKS
    held = corpus.subset(ids=report["paper_ids"])
    texts = held.texts()
    trained, kept = model.encode(texts), load_model(run.unified_model, run_dir=run).encode(texts)
    base = model.base_vectors(texts)
    for a in names:
        row = report["aspects"][a]
        truth, has = human_truth(model.cache, [list(v) for v in held.docs[f"highlights_{a}"]])
        scores = {name: truth_spearman(v, truth, has) for name, v in
                  (("trained", trained[a]), ("kept", kept[a]), ("base", base))}
        assert row["verified"] is True, row
        assert scores["kept"] >= scores["base"], (a, row["kept"], scores)
        if row["kept"] == "head":
            assert "more selectively than the encoder" in row["verdict"] and scores["trained"] > scores["base"]
    assert report["aspects"]["approach"]["kept"] != "head"

    users = Corpus(corpus.docs.drop(columns=[f"highlights_{a}" for a in names]))
    unmarked = check_heads(plain, users, acl, names, n_pairs=20, apply=False)
    assert unmarked["marks"].startswith("the aspect file")
    assert all(row["verified"] is False and row["verdict"].startswith(("unverified", "not checked"))
               for row in unmarked["aspects"].values()), unmarked["aspects"]


# ------------------------------------------------------------------------------------------ bad input

def test_one_sentence_and_empty_abstracts_keep_their_whole_vector():
    from workbench.embed.features import DocumentFeatures

    aspects = load_aspects(ASPECT_FILE)
    rng = np.random.default_rng(1)
    protos = aspectfile.aspect_prototypes(aspects, ASPECTS, lambda t: rng.normal(size=(len(t), 6)))
    whole = rng.normal(size=(2, 6)).astype(np.float32)
    whole /= np.linalg.norm(whole, axis=1, keepdims=True)
    feats = DocumentFeatures(whole, [whole[:1].copy(), np.zeros((0, 6), np.float32)], [["One sentence."], []])
    floor = aspectfile.zero_shot_embeddings(feats, protos)
    for a in ASPECTS:
        np.testing.assert_allclose(floor[a], whole, atol=1e-6)  # the one sentence is the abstract; none: whole
    assert aspectfile.sentence_marks(feats, protos)[1] == {a: [] for a in ASPECTS}


def test_sentence_marks_are_the_sentences_stating_each_aspect():
    from workbench.embed.features import DocumentFeatures

    # Without highlights the swap probe swaps the sentences the aspect file says state an aspect: those holding
    # at least 0.3 of its weight in their abstract, and always the one holding the most, recomputed here.
    rng = np.random.default_rng(2)
    protos = aspectfile.aspect_prototypes(load_aspects(ASPECT_FILE), ASPECTS, lambda t: rng.normal(size=(len(t), 8)))
    sentences = [rng.normal(size=(n, 8)).astype(np.float32) for n in (5, 3, 1)]
    feats = DocumentFeatures(np.stack([s.mean(0) for s in sentences]), sentences,
                             [[f"s{k}" for k in range(len(s))] for s in sentences])
    marks = aspectfile.sentence_marks(feats, protos)
    for doc, weights in zip(marks, aspectfile.sentence_weights(feats, protos)):
        for a in ASPECTS:
            share = np.asarray(weights[a], np.float64) / np.sum(weights[a])
            expected = [float(x >= 0.3 or x == share.max()) for x in share]
            assert doc[a] == expected and sum(doc[a]) >= 1


@pytest.mark.slow
@pytest.mark.parametrize("case", ["an aspect no abstract states", "five abstracts"])
def test_the_guard_finishes_on_odd_input(case, tmp_path, capsys):
    from workbench.embed.guard import check_heads
    from workbench.embed.heads import PooledAspectModel

    aspects = load_aspects(ASPECT_FILE)
    names = list(ASPECTS)
    if case == "an aspect no abstract states":
        funding = aspects["method"].__class__(**{**aspects["method"].__dict__, "name": "funding",
                                                 "description": "Who paid for the research and on what terms.",
                                                 "include": ("the sponsor", "the grant"), "examples": ()})
        aspects = {**{a: aspects[a] for a in ASPECTS}, "funding": funding}
        names.append("funding")
        corpus, val = user_corpus(seed=2, n=30), slice(10, 30)
    else:
        corpus, val = user_corpus(seed=2, n=5), slice(2, 5)
    run = RunDir(tmp_path)
    run.write_split(corpus.ids[:val.start], corpus.ids[val])
    PooledAspectModel("minilm", names, hidden=384, pool=True).save_pretrained(run.unified_model)
    report = check_heads(run, corpus, aspects, names, n_pairs=5)
    assert (run.unified_model / "guard.json").is_file()
    if report["checked"]:
        assert set(report["aspects"]) == set(names) and all(r["verdict"] for r in report["aspects"].values())
    else:
        assert report["reason"] and "not checked" in capsys.readouterr().out


@pytest.mark.slow
def test_a_head_the_probe_could_not_check_is_named_in_a_notice(tmp_path, capsys, monkeypatch):
    import workbench.embed.guard as guard
    from workbench.embed.heads import PooledAspectModel

    # Only disease had sentences to swap (as on ACLSum without highlights, before the stating sentences were
    # swapped): method and population are shipped as trained, and the user reads that, by name.
    monkeypatch.setattr(guard, "hard_negative_probe", lambda *args, **kwargs: {
        "matrix": {"disease": {"disease": 0.8, "floor:disease": 0.9, "base": 0.4}}, "n_pairs": {"disease": 3}})
    corpus = user_corpus(seed=2, n=12)
    run = RunDir(tmp_path)
    run.write_split(corpus.ids[:6], corpus.ids[6:])
    PooledAspectModel("minilm", list(ASPECTS), hidden=384, pool=True).save_pretrained(run.unified_model)
    report = guard.check_heads(run, corpus, load_aspects(ASPECT_FILE), list(ASPECTS), n_pairs=5)
    out = capsys.readouterr().out
    assert report["checked"] and report["replaced"] == []
    for a in ASPECTS:
        assert report["aspects"][a]["kept"] == "head" and report["aspects"][a]["verdict"].startswith("not checked")
        assert f"{a}: the trained head is kept unchecked" in out and "nan" not in report["aspects"][a]["verdict"]


# ------------------------------------------------------------------------------------------ grounded views

def test_llm_answers_must_find_their_abstract_and_not_copy_it(tmp_path, monkeypatch):
    """Bag-of-words stand-in encoder: a specific answer is kept, a generic one and a copied sentence go."""
    from stand_ins import BagOfWords
    from workbench.embed import grounding
    from workbench.generate.summaries import summary_store

    frame = synthetic_frame(n_train=0, n_val=0, n_test=40, seed=4)
    corpus = Corpus(frame[["doc_id", "title", "abstract"]])
    first, sentence = frame.iloc[0], frame.iloc[0]["sentences"][0]
    store = summary_store(tmp_path)
    said = first["sentences"]  # a paraphrase stands in for the LLM: words of two of the paper's sentences
    specific = " ".join(said[0].rstrip(".").split()[-5:] + said[1].rstrip(".").split()[-5:]) + "."
    answers = {"specific": "The paper concerns " + specific,
               "generic": "This is a summary of the method of the study.", "copy": sentence}
    for n, (kind, text) in enumerate(answers.items()):
        store.append([{"doc_id": first["doc_id"], "aspect": "disease", "key": "disease", "sample": n,
                       "status": "ok", "text": text, "raw": json.dumps({"sentence": text}), "model": "fake",
                       "prompt_hash": "h"}])
    monkeypatch.setattr(grounding, "FrozenBackbone", lambda name: BagOfWords())
    views = grounding.grounded_views(["disease"], tmp_path, corpus, include_human=False)
    kept = views["disease"].views.get(first["doc_id"], [])
    assert answers["specific"] in kept and answers["generic"] not in kept and sentence not in kept
    table = grounding.grounding_table(tmp_path)
    assert table.loc["disease", ["llm views", "kept", "generic", "copy"]].to_dict() == \
        {"llm views": 3, "kept": 1, "generic": 1, "copy": 1}
    # The shown filter counts apart, over the same three answers, and shows no more than trains.
    shown = table.loc["disease", ["shown", *(f"not shown: {why}" for why in grounding.REASONS)]]
    assert shown.sum() == 3 and shown["shown"] <= 1 and shown["not shown: copy"] == 1


def test_the_training_views_are_judged_by_the_grounding_rule_alone(tmp_path, monkeypatch):
    """Stage 02's training views are the grounding check's (own abstract in the top share, no copy of its own
    sentences), whatever the shown filter leaves out: the kept set equals that of the rule written out here, on
    answers of every kind the shown filter drops (cut, looping, announcing, copying another abstract, generic)."""
    import math

    from stand_ins import BagOfWords
    from workbench.core.vectors import unit_rows
    from workbench.embed import grounding
    from workbench.embed.features import FeatureCache
    from workbench.generate.summaries import summary_store
    from workbench.generate.views import collect_views

    frame = synthetic_frame(n_train=0, n_val=0, n_test=40, seed=5)
    corpus = Corpus(frame[["doc_id", "title", "abstract"]])
    rows = []
    for i, paper in frame.head(20).iterrows():
        said, other = paper["sentences"], frame.iloc[(i + 7) % len(frame)]["sentences"]
        texts = [" ".join(said[0].rstrip(".").split()[-5:] + said[1].rstrip(".").split()[-5:]) + ".",
                 " ".join(said[0].split()[:-1]), "Our main findings are:", said[0] + " " + other[0],
                 " ".join(said[1].rstrip(".").split()[-4:] * 2) + ".", "This is a very interesting paper.", said[0]]
        rows += [{"doc_id": paper["doc_id"], "aspect": "disease", "key": "disease", "sample": n, "status": "ok",
                  "text": text, "raw": json.dumps({"sentence": text}), "model": "fake", "prompt_hash": "h"}
                 for n, text in enumerate(texts)]
    summary_store(tmp_path).append(rows)
    encoder = BagOfWords()
    monkeypatch.setattr(grounding, "FrozenBackbone", lambda name: encoder)
    kept = grounding.grounded_views(["disease"], tmp_path, corpus, include_human=False)["disease"]

    # The rule, as written before the shown filter existed.
    views = collect_views(["disease"], tmp_path, corpus, include_human=False)["disease"]
    docs = FeatureCache.for_run(tmp_path, encoder).documents(corpus.texts())
    abstracts, row = unit_rows(docs.whole), {d: i for i, d in enumerate(map(str, corpus.ids))}
    top = max(grounding.TOP_MIN, math.ceil(grounding.TOP_SHARE * len(row)))
    expected = set()
    for d, texts in views.views.items():
        for text in texts:
            vec = unit_rows(encoder.embed([text]))[0]
            sim = abstracts @ vec
            copied = float((unit_rows(docs.sentences[row[d]]) @ vec).max()) >= grounding.COPY_COSINE
            if not copied and int((sim > sim[row[d]]).sum()) < top:
                expected.add((d, text))
    got = {(d, t) for d, texts in kept.views.items() for t in texts}
    assert got == expected and 0 < len(got) < 140
    report = json.loads((tmp_path / "grounding.json").read_text())["aspects"]["disease"]
    assert report["kept"] == len(got) and report["shown"]["kept"] < len(got)  # the shown filter drops some kept
    assert report["shown"]["cut"] and report["shown"]["announces"] and report["shown"]["repeats"]


def test_human_views_alone_are_not_judged_and_nothing_is_encoded(tmp_path, monkeypatch):
    """Grounding judges LLM answers only: with the corpus's human views alone (a launcher's run with no stage 01)
    every view is kept as it is, and not one text of the corpus is encoded for a verdict nobody needs."""
    from stand_ins import BagOfWords
    from workbench.embed import grounding

    from workbench.generate.views import collect_views

    encoder = BagOfWords()
    frame = synthetic_frame(n_train=12, n_val=4, n_test=4, seed=4)
    corpus = Corpus(frame.drop(columns=["sentences"]))
    monkeypatch.setattr(grounding, "FrozenBackbone", lambda name: encoder)
    views = grounding.grounded_views(["disease"], tmp_path, corpus)
    assert views["disease"].views == collect_views(["disease"], tmp_path, corpus)["disease"].views
    assert len(views["disease"].views) == 16 and encoder.texts == 0
    assert set(grounding.grounding_table(tmp_path).loc["disease"]) == {0}


def test_the_guard_table_shows_each_aspect_file_head_s_blend():
    from workbench.embed.guard import guard_table

    row = {"head": 1.2, "aspect file": 2.0, "base": 0.9, "kept": "aspect file", "verdict": "..."}
    table = guard_table({"aspects": {"disease": row, "method": row}, "blends": {"disease": 0.98, "method": 0.6},
                         "word_shares": {"disease": 0.64, "method": 0.0}})
    assert table.loc["disease", "aspect file: sentences' share"] == 0.98
    assert table["aspect file: phrases' share"].tolist() == [0.64, 0.0]
    assert table.loc["method", "selectivity: aspect file"] == 2.0 and table.loc["method", "kept"] == "aspect file"
    older = guard_table({"aspects": {"disease": row}}).columns  # reports written before blends and words
    assert "aspect file: sentences' share" not in older and "aspect file: phrases' share" not in older
    assert "aspect file: where it sits" not in table.columns  # no position mixture taken
    mixed = guard_table({"aspects": {"disease": row}, "position_mixture": {"disease": [1.96, 1.0, 0.04]},
                         "mixture_sharpness": 0.65})
    assert mixed.loc["disease", "aspect file: where it sits"] == "2.0 1.0 0.0"
    assert mixed.loc["disease", "aspect file: sharpness"] == 0.65
    assert "aspect file: sharpness" not in guard_table({"aspects": {"disease": row}, "mixture_sharpness": None}).columns


def test_the_words_share_reads_how_much_the_aspects_share():
    # Independent aspects: each aspect is one phrase of a sentence, which replaces the sentence; one shared
    # structure (s about 0.8 here, ACLSum 0.58 to 0.76): none. Too few papers: none.
    assert aspectfile.corpus_word_shares(*_two_aspect_features(False)) == {"a": 1.0, "b": 1.0}
    assert aspectfile.corpus_word_shares(*_two_aspect_features(True)) == {"a": 0.0, "b": 0.0}
    assert aspectfile.corpus_word_shares(*_two_aspect_features(False, n=10)) == {"a": 0.0, "b": 0.0}
    assert aspectfile.word_shares({"a": 0.1, "b": 0.25, "c": 0.6}) == {"a": 1.0, "b": 0.75, "c": 0.0}


@pytest.mark.slow
def test_a_head_that_pools_phrases_is_the_aspect_files_computation_and_keeps_it_in_its_checkpoint(tmp_path):
    """Weights from the sentences, pooled vectors from the sentences with a share taken from their phrases:
    the head (torch, through the model's cache) against aspectfile's numpy computation, then saved and loaded,
    frequency table included."""
    import torch
    from safetensors.torch import load_file, save_file
    from workbench.embed.floor import PhraseReading, floor_state
    from workbench.embed.heads import PooledAspectModel

    texts = ["We enrolled elderly patients with kidney disease. The trial assigned them by lot. Further work is needed.",
             "Pregnant women with asthma took part. We observed them for two years.",
             "Night-shift nurses with migraine were surveyed once. Their accounts were coded."]
    model = PooledAspectModel("minilm", ["population"], hidden=384, pool=True)
    feats = model.features(texts)
    query = model.backbone().embed(["who took part: their age, job or life stage"])[0]
    protos = aspectfile.AspectPrototypes(["population"], query[None], query[None])
    table = {"we enrolled elderly patients": 0.5, "pregnant women": 0.5}  # pieces a corpus repeats weigh less
    words = aspectfile.word_pooled_sentences(feats, protos, model.cache.word_vectors, {"population": 0.7},
                                             frequencies=table)
    expected = aspectfile.zero_shot_embeddings(feats, protos, blend=0.9, sentences=words)["population"]
    plain = aspectfile.zero_shot_embeddings(feats, protos, blend=0.9)["population"]
    assert np.abs(expected - plain).max() > 0.01  # the phrases change the vectors
    untabled = aspectfile.word_pooled_sentences(feats, protos, model.cache.word_vectors, {"population": 0.7},
                                                frequencies={})
    assert max(np.abs(a - b).max() for a, b in zip(words["population"], untabled["population"])) > 0.01
    # What the phrases are centred on: their mean over the sentences that state the aspect.
    marks = aspectfile.stating_sentences(feats, protos)
    assert 0 < marks["population"].sum() < len(marks["population"])
    mean = aspectfile.corpus_word_means(feats, ["population"], query[None], {"population": 0.7},
                                        model.cache.word_vectors, table, marks)["population"]
    model.phrase_frequencies = table
    model.heads["population"].load_state_dict(floor_state(model.heads["population"], query, -40.0,
                                                          temperature=aspectfile.TEMPERATURE, blend=0.9,
                                                          phrases=PhraseReading(0.7, mean=mean)))
    model.save_pretrained(tmp_path / "m")
    loaded = PooledAspectModel.from_pretrained(tmp_path / "m", device="cpu")
    assert loaded.heads["population"].pools_words() and loaded.phrase_frequencies == table
    np.testing.assert_allclose(loaded.encode(texts)["population"], expected, atol=1e-4)
    # A checkpoint written before heads could pool words loads, pooling the sentences as they are.
    state = {k: v for k, v in load_file(str(tmp_path / "m" / "model.safetensors")).items()
             if not k.endswith(("words", "word_share", "word_mean"))}
    save_file(state, str(tmp_path / "m" / "model.safetensors"), metadata={"format": "pt"})
    old = PooledAspectModel.from_pretrained(tmp_path / "m", device="cpu")
    assert not old.heads["population"].pools_words()
    with torch.no_grad():
        np.testing.assert_allclose(old.encode(texts)["population"], plain, atol=1e-4)
