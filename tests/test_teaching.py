"""The teaching widget's logic without a browser: which sentence it shows, what each key does, refit, CSV, escaping.

It runs the real `TeachLoop` on test_teach.py's planted 8-dimensional corpus (aspects "a" and "b"), so the keys
1 a, 2 b, 3 none, 4 several, 5 skip. The browser's side (typing into the key box in JupyterLab) is in
test_jupyterlab.py's pane test.
"""

import base64
import re

import numpy as np
import pytest

pytest.importorskip("ipywidgets")

from test_teach import corpus, floor  # noqa: E402

from workbench.maps.teaching import TeachPanel, abstract_html, key_actions  # noqa: E402
from workbench.maps.tsne import AspectMap  # noqa: E402
from workbench.teach.loop import TeachLoop  # noqa: E402
from workbench.teach.marks import Marks  # noqa: E402


OPENED: list[Marks] = []  # the panels' marks, each the writer of its run's file once it has stored a mark


@pytest.fixture(autouse=True)
def _release_the_marks():
    """Each test's panels release their marks' writer lock when it ends (a kernel keeps it while it runs)."""
    yield
    while OPENED:
        OPENED.pop().close()


def panel(run_dir, refits=None):
    features, ids = corpus()
    titles = {d: f"<script>alert('{d}')</script> Title {d}" for d in ids}
    on_refit = None if refits is None else refits.append

    def loop():
        OPENED.append(Marks.of_run(run_dir))
        return TeachLoop(features, floor(), ids, marks=OPENED[-1])

    return TeachPanel(loop, ["a", "b"], titles, on_refit).start()


def answers(run_dir):
    return {(m.doc_id, m.sentence): m.answer for m in Marks.of_run(run_dir).current()}


def test_keys_answer_the_sentence_shown_and_the_marks_are_on_disk(tmp_path):
    assert key_actions(["a", "b"]) == {"1": "a", "2": "b", "3": "none", "4": "several", "5": "skip"}
    p = panel(tmp_path)
    shown = []
    for keys in ["1", "2", "3", "5", "4", "14", "4124"]:  # "4": several begun, "14" picks a and keeps it
        q = p.question
        assert q.sentence in re.sub("<[^>]+>", "", p.paper.value)  # the sentence asked about is on screen
        assert re.search(r"<mark[^>]*><b>" + re.escape(q.sentence), p.paper.value)  # and highlighted
        p.key_box.value = keys  # what the browser sends as the box changes
        assert p.key_box.value == ""  # emptied for the next key
        if keys != "4":
            shown.append((q.doc_id, q.sentence))
    p.loop.marks.close()
    kept = answers(tmp_path)
    assert [kept[s] for s in shown] == ["a", "b", "none", "skip", "a", "a+b"]
    assert p.new_marks == 5  # a skip teaches nothing
    assert "&lt;script&gt;" in p.paper.value and "<script>" not in p.paper.value


def test_a_refit_hands_the_taught_embeddings_on_and_the_status_says_so(tmp_path):
    refits = []
    p = panel(tmp_path, refits)
    assert "not taught yet" in p.status.value
    for _ in range(6):
        p.press("1" if "sentence 0" in p.question.sentence else "3")
    out = p.refit()
    assert refits == [out] and set(out) <= {"a", "b"} and out
    assert all(v.shape == (12, 8) for v in out.values())
    assert "taught and sure of" in p.status.value and p.new_marks == 0
    assert "Refit: heads taught" in p.message.value


def test_marks_travel_as_csv_and_survive_a_restart(tmp_path):
    p = panel(tmp_path / "run")
    p.press("1")
    p.press("3")
    link = re.search(r"base64,([A-Za-z0-9+/=]+)", p.export.value).group(1)
    text = base64.b64decode(link).decode("utf-8")
    assert text.startswith("doc_id,sentence,aspect,source") and text.count("\n") == 3
    shared = tmp_path / "colleague.csv"
    shared.write_text("doc_id,sentence,aspect\np11,paper 11 sentence 4.,b\n")
    assert p.import_csv(shared) == 1 and "Imported 1" in p.message.value
    (tmp_path / "bad.csv").write_text("id,text\n1,x\n")
    assert p.import_csv(tmp_path / "bad.csv") == 0 and "Import failed" in p.message.value
    p.loop.marks.close()
    again = panel(tmp_path / "run")  # a kernel restart: a new loop on the same run directory
    assert "b: 1 sentences marked as stating it" in again.status.value
    assert len(again.loop.marks) == 3


def test_escaping_and_a_refit_moves_a_map_through_the_warm_path():
    html = abstract_html("<b>x</b>", ["<img src=x onerror=alert(1)>", "plain"], 0)
    assert "<img" not in html and "&lt;img" in html and "&lt;b&gt;x" in html
    rng = np.random.default_rng(0)
    emb = {a: rng.normal(size=(60, 8)) for a in ("a", "b")}
    old = AspectMap.fit(emb, None, perplexity=5.0, method="exact", n_iter=50)
    frames = []
    new = old.with_embeddings({"a": rng.normal(size=(60, 8))}, n_iter=30, on_frame=frames.append)
    assert not np.allclose(new.coords, old.coords) and np.allclose(new.embeddings["b"], old.embeddings["b"])
    assert new.weights == old.weights


def test_the_verdict_shows_before_teaching_starts_and_after_a_refit(tmp_path):
    from workbench.maps.teaching import verdict_for

    verdict = verdict_for(tmp_path)  # no stage 03 yet: nothing checked, said in words
    features, ids = corpus()
    p = TeachPanel(lambda: TeachLoop(features, floor(), ids, marks=Marks.of_run(tmp_path)), ["a", "b"],
                   {d: d for d in ids}, verdict=lambda: verdict() or ["a: <not checked>"])
    assert "Verdict" in p.paper.value and "&lt;not checked&gt;" in p.paper.value  # escaped, before any start
    p.start()
    p.refit()
    assert "Verdict" in p.status.value


def test_an_imported_csv_says_how_many_marks_are_not_sentences_of_this_corpus(tmp_path):
    p = panel(tmp_path)
    (tmp_path / "team.csv").write_text("doc_id,sentence,aspect\np1,paper 1 sentence 2.,a\n"
                                       "p1,A sentence edited since.,b\nq9,Another corpus's paper.,none\n")
    assert p.import_csv(tmp_path / "team.csv") == 3
    assert "Imported 3" in p.message.value and "2 of them are not sentences" in p.message.value
    (tmp_path / "typo.csv").write_text("doc_id,sentence,aspect\np1,paper 1 sentence 3.,c\n")
    assert p.import_csv(tmp_path / "typo.csv") == 0
    assert "Import failed" in p.message.value and "line 2: &#x27;c&#x27;" in p.message.value
