"""Stage 03 with marks, at function level on planted vectors (no encoder): the taught head in the unified model's
checkpoint, reloaded as it was saved, and the verdict the marks give.

The corpus is `test_teach.corpus`'s: 8-dimensional unit sentence vectors, the aspect file reading aspect a along
e0 and b along e1.
"""

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import torch

from workbench.core.rundir import RunDir
from workbench.core.vectors import unit_rows
from workbench.embed.features import position_features
from workbench.embed.floor import floor_bias
from workbench.embed.guard import load_guard
from workbench.embed.heads import PooledAspectModel
from workbench.embed.mixture import PositionMixture
from workbench.teach.loop import TeachLoop
from workbench.teach.marks import Marks
from workbench.teach.saved import place_taught
from workbench.teach.stage import read_marks, teach_heads, write_verdicts
from workbench.teach.verdict import BETTER, UNSURE, cross_check, more_needed, said, verdict_lines

from test_teach import ASPECTS, H, corpus, floor


def taught_loop(papers=10, blend=0.5):
    """A loop whose marks say that each paper's sentence 2 states a (one the floor does not read as a)."""
    features, ids = corpus(papers=papers)
    base = floor()  # a zero-shot head needs its softmax regime's bias (`floor.floor_bias`)
    biases = {a: floor_bias(features, q) for a, q in zip(ASPECTS, base.scorer.queries)}
    loop = TeachLoop(features, replace(base, blends={a: blend for a in ASPECTS}, biases=biases), ids)
    for i in range(papers):
        for k in range(4):
            loop.answer(ids[i], "a" if k == 2 else "b" if k == 0 else "none",
                        sentence=features.sentence_texts[i][k])
    loop.refit()
    return loop, features


def test_the_taught_head_in_a_checkpoint_embeds_as_the_loop_does_and_reloads_from_safetensors(tmp_path):
    round_trip(*taught_loop(), tmp_path)


def test_a_taught_head_its_marks_trust_in_part_embeds_as_the_loop_does_and_reloads(tmp_path):
    loop, features = taught_loop()
    loop.scorer.trust = {a: 0.4 for a in loop.scorer.coef}  # 0.4 of the regression's weights, 0.6 the floor's
    assert loop.taught().blends != taught_loop()[0].taught().blends
    round_trip(loop, features, tmp_path)


def test_the_taught_head_over_a_position_mixture_floor_reloads_as_the_loop_embeds(tmp_path):
    features, ids = corpus(papers=10)
    base = floor()
    density = np.array([[3.0, 1.5, 1.0, 0.5, 0.2], [0.2, 0.5, 1.0, 1.5, 3.0]])  # a early, b late
    mixed = replace(base, scorer=PositionMixture(base.scorer, np.log(density)), blends={a: 0.5 for a in ASPECTS})
    loop = TeachLoop(features, mixed, ids)
    for i in range(10):
        for k in range(4):
            loop.answer(ids[i], "a" if k == 2 else "b" if k == 0 else "none", sentence=features.sentence_texts[i][k])
    loop.refit()
    assert loop.floor.mixed and set(loop.scorer.coef) == set(ASPECTS)
    round_trip(loop, features, tmp_path)


def round_trip(loop, features, tmp_path):
    """The loop's taught heads in a unified model embed as the loop does, and reload from safetensors alike."""
    model = PooledAspectModel("stand-in", ASPECTS, hidden=H, pooling="mean")
    for a in ASPECTS:
        place_taught(model.heads[a], loop.floor, loop.taught(), a)
    with torch.no_grad():
        out = {a: torch.nn.functional.normalize(v[0], dim=-1).numpy() for a, v in
               model.forward_features(features).items()}
    expected = loop.embeddings()
    for a in ASPECTS:
        np.testing.assert_allclose(out[a], expected[a], atol=2e-3)
    model.save_pretrained(tmp_path / "unified_model")
    assert not list(tmp_path.rglob("*.pkl")) and not list(tmp_path.rglob("*.bin"))
    again = PooledAspectModel.from_pretrained(tmp_path / "unified_model", device="cpu")
    assert type(again.heads["a"].scorer).__name__ == "TaughtHeadScorer"
    with torch.no_grad():
        back = {a: torch.nn.functional.normalize(v[0], dim=-1).numpy() for a, v in
                again.forward_features(features).items()}
    for a in ASPECTS:
        np.testing.assert_allclose(back[a], out[a], atol=1e-6)


def test_a_refit_in_the_pane_puts_the_taught_heads_in_the_model_it_reads_with():
    """`place_taught_heads`: after a refit the in-memory model's heads are the taught ones (its margins read marks)
    and embed as the loop does; an aspect the loop was not asked about keeps its head."""
    from workbench.decode.aspect_margin import reads_marks
    from workbench.teach.saved import place_taught_heads

    loop, features = taught_loop()
    model = PooledAspectModel("stand-in", ASPECTS, hidden=H, pooling="mean")
    for a in ASPECTS:
        loop.floor.place(model.heads[a], a)
    before = {k: v.clone() for k, v in model.heads["b"].state_dict().items()}
    assert not any(reads_marks(model, a) for a in ASPECTS)
    assert place_taught_heads(model, loop, ["a"]) == ["a"]
    assert reads_marks(model, "a") and not reads_marks(model, "b")
    assert all(torch.equal(v, model.heads["b"].state_dict()[k]) for k, v in before.items())
    with torch.no_grad():
        out = torch.nn.functional.normalize(model.forward_features(features)["a"][0], dim=-1).numpy()
    np.testing.assert_allclose(out, loop.embeddings()["a"], atol=2e-3)


def planted(papers=30, seed=0):
    """Papers whose sentence 2 states a, a direction of its own in each paper, and whose other sentences hold
    much of the whole abstract: the marks can teach what the whole abstract blurs."""
    features, ids = corpus(papers=papers, seed=seed)
    rng = np.random.default_rng(seed + 1)
    for i, S in enumerate(features.sentences):
        S[2] = unit_rows(rng.normal(size=(1, H)).astype(np.float32))[0]
        features.whole[i] = unit_rows(S[[0, 1, 3, 4]].mean(0, keepdims=True) + 0.1 * S[2])[0]
    return features, ids


def marked_loop(features, ids, n, answer=lambda i, k: "a" if k == 2 else "none"):
    loop = TeachLoop(features, floor(), ids)
    for i in range(n):
        for k in range(5):
            loop.answer(ids[i], answer(i, k), sentence=features.sentence_texts[i][k])
    loop.refit()
    return loop


def test_marks_verify_a_head_that_reads_its_aspect_better_than_the_whole_abstract():
    features, ids = planted()
    checks = cross_check(marked_loop(features, ids, 30))
    a = checks["a"]
    assert a["outcome"] == BETTER and a["kept"] == "taught" and a["papers"] == 30 and a["interval"][0] > 0
    assert a["scores"]["taught"] > a["scores"]["base"]
    assert checks["b"]["outcome"] == UNSURE  # nothing marked as b: no truth to check it on
    text = said("a", a)
    assert text.startswith("a: checked on 30 of the papers you marked") and "better than the whole abstract" in text


def test_with_too_few_marked_papers_the_verdict_says_so_and_how_many_more_would_tell():
    features, ids = planted()
    checks = cross_check(marked_loop(features, ids, 3))
    assert checks["a"]["outcome"] == UNSURE and checks["a"]["more"] >= 1 and checks["a"]["kept"] == "taught"
    assert f"about {checks['a']['more']} more papers" in said("a", checks["a"])
    assert more_needed(10, 2.0, -2.0, 6.0) == 30  # half-width 4 over a mean of 2: 4 x the papers


def test_a_head_taught_wrong_answers_is_not_called_better_than_the_whole_abstract():
    features, ids = planted()
    loop = marked_loop(features, ids, 30)
    wrong = np.random.default_rng(0)  # the answers shuffled among the shown sentences
    shown = [(ids[i], features.sentence_texts[i][k]) for i in range(30) for k in range(5)]
    true = loop.marks
    loop.marks = Marks()
    for (d, s), ans in zip(shown, wrong.permutation([m.answer for m in true.current()])):
        loop.marks.add(d, s, ans)
    loop.refit()
    assert cross_check(loop)["a"]["outcome"] != BETTER
    # Judged on the held-out papers' true marks (the benchmark's heads built to lose), it reads a worse head.
    wrong_head = cross_check(loop, judge=true)["a"]["scores"]
    loop.marks = true
    loop.refit()
    assert cross_check(loop, judge=true)["a"] == cross_check(loop)["a"]
    assert wrong_head["taught"] < cross_check(loop)["a"]["scores"]["taught"] - 5


def test_the_verdict_lines_say_each_aspect_in_plain_words_and_guard_json_keeps_its_keys(tmp_path):
    run = RunDir(tmp_path)
    run.guard.parent.mkdir(parents=True)
    report = {"checked": True, "marks": "the aspect file", "blends": {"a": 0.5}, "replaced": [],
              "aspects": {"a": {"head": 1.2, "kept": "head", "verified": False, "verdict": "unverified: ..."},
                          "b": {"kept": "head", "verified": False, "verdict": "unverified: ..."}}}
    features, ids = planted()
    checks = cross_check(marked_loop(features, ids, 30))
    write_verdicts(run, report, {"a": checks["a"]}, 150)
    guard = load_guard(run)
    assert guard["blends"] == {"a": 0.5} and guard["aspects"]["a"]["head"] == 1.2  # the guard's keys kept
    assert guard["aspects"]["a"]["verified"] is True and guard["aspects"]["a"]["kept"] == "taught"
    lines = verdict_lines(run)
    assert lines[0].startswith("a: checked on 30 of the papers you marked")
    assert lines[1] == "b: not checked against anything you gave; mark some sentences to check it"
    assert not any(w in " ".join(lines).lower() for w in ("selectivity", "swap"))
    assert verdict_lines(tmp_path / "none", ["a"]) == [lines[1].replace("b:", "a:")]


def test_without_marks_stage_03_changes_no_file(tmp_path):
    run = RunDir(tmp_path)
    run.guard.parent.mkdir(parents=True)
    run.guard.write_text('{"checked": true}')
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert teach_heads(run, SimpleNamespace(ids=["p0", "p1"]), None, ASPECTS) is None
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p.name != "marks.jsonl"} == before


def test_a_marks_csv_given_to_stage_03_joins_the_run_s_marks(tmp_path):
    team = Marks()
    team.add("p1", "The method works.", "a")
    team.to_csv(tmp_path / "team.csv")
    read_marks(tmp_path / "run", tmp_path / "team.csv").close()
    assert [m.answer for m in Marks.of_run(tmp_path / "run").current()] == ["a"]


def test_the_map_page_says_the_verdicts_under_the_weights_escaped():
    from workbench.maps.page import verdicts_html

    html = verdicts_html(["a: checked on 30 of the papers you marked <b>", "b: not checked"])
    assert "&lt;b&gt;" in html and "b: not checked" in html and verdicts_html(None) == ""


def test_a_partly_trusted_head_s_pooling_weights_sum_to_one_and_mix_the_floor_s_as_the_loop_does():
    loop, features = taught_loop()
    loop.scorer.trust = {a: 0.4 for a in loop.scorer.coef}
    model = PooledAspectModel("stand-in", ASPECTS, hidden=H, pooling="mean")
    place_taught(model.heads["a"], loop.floor, loop.taught(), "a")
    S = torch.as_tensor(np.stack(features.sentences[:3]), dtype=torch.float32)
    positions = torch.as_tensor(np.stack([position_features(len(s)) for s in features.sentences[:3]]),
                                dtype=torch.float32)
    mask = torch.ones(S.shape[:2])
    with torch.no_grad():
        w = model.heads["a"].pooling.weights(model.heads["a"].scores(S, positions, mask), mask).numpy()
    np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-5)
    for i in range(3):
        expected = loop.scorer.pool_weights(features.sentences[i], position_features(len(features.sentences[i])))
        np.testing.assert_allclose(w[i], expected[:, 0], atol=2e-3)
