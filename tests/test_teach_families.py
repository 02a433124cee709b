"""The marks' verdict on each family the teaching bars name, at smoke size: CSAbstruct, ACLSum, generators a, b, c.

Per family, a few dozen papers read through a bag-of-words stand-in encoder (`stand_ins.BagOfWords`, no model),
stage 03's label-free floor fitted to them as stage 03 fits it, and a simulated user who answers every sentence of
the first papers from the family's own labels (CSAbstruct's roles, ACLSum's highlights, the generators' stating
sentences), as `benchmarks/teach.py` and `benchmarks/teach_generators.py` do at full size. Two things each test
could see fail:

* the honest user's marks: on the aspects the labels clearly decide (the head above the whole abstract by 5 or
  more on the unmarked papers, truth: their stating sentences pooled) the verdict (`cross_check`) is never
  "worse", and "better" on at least one;
* a head built to lose (each answer turned to the aspects it does not name), judged on the true marks: never
  called better than the whole abstract where the labels put it below, and called worse on at least one.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.core.vectors import unit_rows
from workbench.data.aspects import load_aspects
from workbench.data.sentences import match_highlights
from workbench.embed.aspectfile import aspect_prototypes
from workbench.embed.features import FeatureCache
from workbench.embed.floor import fit_floor
from workbench.measures.evaluation import rowwise_spearman
from workbench.teach.loop import TeachLoop
from workbench.teach.marks import Marks
from workbench.teach.verdict import BETTER, WORSE, cross_check

from stand_ins import BagOfWords

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
MARKED = 24  # papers whose every sentence the user answers; the others are scored by the labels


def csabstruct_family(n=40):
    import csabstruct

    frame = csabstruct.load("train").head(n)
    aspects = list(load_aspects("acl").names)
    stated = {a: [[s for s, r in zip(ss, rr) if r in csabstruct.ASPECT_ROLES[a]]
                  for ss, rr in zip(frame["sentences"], frame["roles"])] for a in aspects}
    return frame["abstract"].tolist(), stated, "acl", aspects


def aclsum_family(n=40):
    from workbench.data.corpus import load_corpus

    docs = load_corpus(f"aclsum:train[:{n}]").docs.reset_index(drop=True)
    aspects = list(load_aspects("acl").names)
    listed = lambda v: [str(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else []  # noqa: E731
    stated = {a: [listed(v) for v in docs[f"highlights_{a}"]] for a in aspects}
    return docs["abstract"].tolist(), stated, "acl", aspects


def generator_family(style, n=40):
    if style == "c":
        import generator_c

        frame, aspect_file, aspects = generator_c.generator_c_frame(n, 1), "medicine", list(generator_c.ASPECTS)
    else:
        from synthetic_corpus import ASPECTS, synthetic_frame

        frame = synthetic_frame(n_train=0, n_val=0, n_test=n, seed=1, style=style)
        aspect_file, aspects = str(ROOT / "data" / "clinical-study-aspects.yaml"), list(ASPECTS)
    stated = {a: [list(v) for v in frame[f"highlights_{a}"]] for a in aspects}
    return frame["abstract"].tolist(), stated, aspect_file, aspects


FAMILIES = {"CSAbstruct": csabstruct_family, "ACLSum": aclsum_family, "generator a": lambda: generator_family("a"),
            "generator b": lambda: generator_family("b"), "generator c": lambda: generator_family("c")}


def taught(texts, stated, aspect_file, aspects):
    """(loop taught the user's answers on the first MARKED papers, its true marks, inverted marks, features)."""
    cache = FeatureCache(None, BagOfWords())
    features = cache.documents(texts)
    floor = fit_floor(features, aspect_prototypes(load_aspects(aspect_file), aspects, cache.vectors),
                      cache.word_vectors)
    ids = [f"p{i}" for i in range(len(texts))]
    true, inverted = Marks(), Marks()
    for i in range(MARKED):
        sents = features.sentence_texts[i]
        said = {a: match_highlights(sents, stated[a][i]) for a in aspects}
        for k, s in enumerate(sents):
            answer = [a for a in aspects if said[a][k] >= 0.5]
            true.add(ids[i], s, answer or "none")
            inverted.add(ids[i], s, [a for a in aspects if a not in answer] or "none")
    loop = TeachLoop(features, floor, ids, marks=true, askable=ids[:MARKED], word_vectors=cache.word_vectors)
    return loop, true, inverted, features


def labels_margin(loop, features, stated, aspects) -> dict[str, float]:
    """{aspect: the taught head less the whole abstract on the unmarked papers with a stating sentence, per-paper
    Spearman x100 against their stating sentences pooled (the bag-of-words vectors)}."""
    emb = loop.embeddings()
    out = {}
    for a in aspects:
        rows, truth = [], []
        for i in range(MARKED, len(features.sentence_texts)):
            hit = np.asarray(match_highlights(features.sentence_texts[i], stated[a][i])) >= 0.5
            if hit.any():
                rows.append(i)
                truth.append(unit_rows(np.asarray(features.sentences[i], np.float32)[hit].mean(0, keepdims=True))[0])
        if len(rows) < 4:
            continue
        t = unit_rows(np.stack(truth))
        score = lambda v: 100 * float(np.nanmean(rowwise_spearman(v @ v.T, t @ t.T)))  # noqa: E731
        out[a] = score(unit_rows(emb[a][rows])) - score(unit_rows(features.whole[rows]))
    return out


@pytest.mark.slow  # 1 to 2 s each: a floor fitted to 40 papers, two loops and three verdicts
@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_marks_verdict_follows_the_labels_and_never_praises_a_head_built_to_lose(name):
    texts, stated, aspect_file, aspects = FAMILIES[name]()
    loop, true, inverted, features = taught(texts, stated, aspect_file, aspects)
    checks = cross_check(loop)
    margin = labels_margin(loop, features, stated, aspects)
    clear = [a for a, m in margin.items() if m >= 5]
    assert clear, margin  # the honest head wins clearly somewhere: a case the verdict must not get wrong
    assert all(checks[a]["outcome"] != WORSE for a in clear), (margin, checks)
    assert any(checks[a]["outcome"] == BETTER for a in clear), (margin, checks)
    loop.marks = inverted
    loop.refit()
    lost = cross_check(loop, judge=true)
    lost_margin = labels_margin(loop, features, stated, aspects)
    for a, m in lost_margin.items():
        if m < 0:
            assert lost[a]["outcome"] != BETTER, (a, m, lost[a])
    assert any(lost[a]["outcome"] == WORSE for a, m in lost_margin.items() if m < 0), (lost_margin, lost)
