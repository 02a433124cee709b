"""What a few answers are worth when the workbench chooses the sentences: the teaching loop on CSAbstruct.

A simulated user drives `workbench.teach.loop.TeachLoop` as a person would: the workbench asks about sentences
of TRAIN papers only (its chooser, `workbench/teach/chooser.py`), the user answers each from the human roles
(challenge = background + objective, approach = method, outcome = result, none = other; a workbench sentence
states an aspect where it matches a human sentence of that role, `data.sentences.match_highlights`), and the
loop refits after each batch. "N marks per aspect" means at most N x (aspects + 1) answers in all, every answer
counted. The corpus the workbench reads is the whole CSAbstruct file without its roles (the floor and the
learner read no label); only the simulated user reads them. A user seed draws the half of the train papers
that user's corpus lets the workbench ask about, and seeds the chooser's draws.

Scored on the TEST papers (`--split dev` to choose constants: every constant of `workbench/teach/` was chosen
there) with the MiniLM truth exactly as `../shared/benchmarks/taught_marks.py` computes it: per paper and
aspect the unit mean of its human-marked sentences' vectors; mean per-paper Spearman x100 over the papers
that have the aspect; worst of the user seeds. Beside it, on the same seeds: MiniLM's whole abstract, stage
03's label-free floor (`floor.fit_floor` on the whole file), and `taught_marks.py`'s fixed recipe (N random
train sentences of each role group, balanced by the labels, a logistic regression on vector and position,
pooled by its probability), run here.

At each budget it also prints the verdict the marks give (`workbench.teach.verdict.cross_check` on each user
seed's marks) beside the labels' margin (the head less MiniLM's whole abstract on the scored papers), and the
same for heads built to lose (`built_to_lose`: the answers shuffled among the shown sentences, or inverted),
judged on the held-out papers' true marks. On ACLSum, whose bar asks it, each head is tested against MiniLM's
whole abstract on the human summaries (read by MiniLM and by each encoder of `--truths`) with appendix A.6's
cell-mixing permutation test (`--permutations`). `--pooling` also scores, per truth, other ways to pool what the
marks taught (the taught sentences with more or less of the whole abstract, the taught vector mixed with the
floor's or shrunk to it as marks come, per-paper shares): `pooling_variants`. Smoke mode reads hashed word
vectors (`_smoke.HashedBackbone`) in place of the encoders: no model to load.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/teach.py --cache /tmp/teach-cache [--split dev] [--marks 10 30]
        [--seeds 0 1 2] [--batch 10] [--truths minilm mpnet] [--aclsum SPEC] [--no-csabstruct] [--folds F]
        [--level L] [--permutations P] [--pooling] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

import csabstruct  # noqa: E402
from _machine import matmul_gflops  # noqa: E402
from _smoke import HashedBackbone, add_smoke  # noqa: E402
from families import CachedBackbone, pooled_truth, spearman_on  # noqa: E402
from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.core.vectors import unit_rows  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.sentences import match_highlights  # noqa: E402
from workbench.embed.aspectfile import aspect_prototypes  # noqa: E402
from workbench.embed.features import FeatureCache, FrozenBackbone  # noqa: E402
from workbench.embed.floor import fit_floor  # noqa: E402
from workbench.measures.evaluation import permutation_test, summary_similarity  # noqa: E402
from workbench.teach.learner import TAUGHT_BLEND, TRUST_YES  # noqa: E402
from workbench.teach.loop import TeachLoop  # noqa: E402
from workbench.teach.marks import Marks  # noqa: E402
from workbench.teach.verdict import BETTER, UNSURE, WORSE, cross_check  # noqa: E402

ASKABLE_SHARE = 0.5  # the share of the askable papers a user seed lets the workbench ask about
LOSERS = {"shuffled": "answers shuffled among the shown sentences",
          "inverted": "each answer turned to the aspects it does not name"}
KEPT = "the loop's head (its share: learner.TAUGHT_BLEND as far as the marks are trusted)"  # `pooling_variants`
VERDICT: dict = {}  # `cross_check`'s settings where --folds or --level override the shipped ones (choosing them)


@dataclass
class Family:
    """One corpus as the benchmark runs it: what the workbench reads, who answers, what is scored against what."""
    name: str
    doc_ids: list
    features: object         # the whole corpus's DocumentFeatures (no label read)
    floor: object            # stage 03's floor fitted to it
    askable: np.ndarray      # rows the workbench may ask about
    scored: np.ndarray       # rows scored
    answers: dict            # (doc_id, sentence index) -> the simulated user's answer
    truths: dict             # {truth: {aspect: (similarity over the scored papers, which have it)}}, the bars' first
    recipe_tables: tuple     # (askable table, scored table) for `recipe`: (X, owner, class, unit vectors)
    word_vectors: object = None
    significance: tuple = ()  # truths whose bar asks for appendix A.6's test against MiniLM's whole abstract


def user_answers(doc_ids, features, stated_texts) -> dict:
    """(doc_id, sentence index) -> the aspects a workbench sentence states (a human-marked sentence of the aspect
    matches it, `match_highlights`); none, the empty list. `stated_texts[a][i]`: paper i's human-marked sentences
    of a."""
    answers = {}
    for i, doc_id in enumerate(doc_ids):
        texts = features.sentence_texts[i]
        stated = {a: match_highlights(texts, human[i]) for a, human in stated_texts.items()}
        for k in range(len(texts)):
            answers[doc_id, k] = [a for a in stated if stated[a][k] >= 0.5]  # none: an empty list
    return answers


def sentence_table(sentences, vectors, classes) -> tuple:
    """The recipe's table of some papers: per sentence [vector, relative position, its square], the paper it is
    in, its class (an aspect's index, or the number of aspects: none) and its unit vector."""
    owner = np.repeat(np.arange(len(sentences)), [len(s) for s in sentences])
    position = np.concatenate([np.linspace(0, 1, len(s)) if len(s) > 1 else [0.5] for s in sentences])
    vectors = np.asarray(vectors, np.float32)
    return np.hstack([vectors, np.stack([position, position ** 2], 1)]), owner, np.asarray(classes), vectors


def csabstruct_family(cache, acl, docs: int | None, split: str, truth_caches: dict | None = None) -> Family:
    """CSAbstruct: the whole file the corpus, train papers askable, `split` papers scored (see the module doc);
    one truth per encoder of `truth_caches` ({name: FeatureCache}; MiniLM's, `cache`, always first)."""
    frame = csabstruct.load()
    if docs:
        frame = frame.groupby("split", sort=False).head(docs).reset_index(drop=True)
    aspects = list(acl.names)
    features = cache.documents(frame["abstract"].tolist())
    word_vectors = FeatureCache(None, CachedBackbone(cache)).word_vectors
    floor = fit_floor(features, aspect_prototypes(acl, aspects, cache.vectors), word_vectors)
    human = {a: [[s for s, r in zip(ss, rr) if r in csabstruct.ASPECT_ROLES[a]]
                 for ss, rr in zip(frame["sentences"], frame["roles"])] for a in aspects}
    askable, scored = np.flatnonzero(frame["split"] == "train"), np.flatnonzero(frame["split"] == split)

    def table(rows):  # taught_marks.py's: the human sentences and roles
        roles = np.array([r for i in rows for r in frame["roles"][i]])
        classes = np.full(len(roles), len(aspects))
        for a, aspect in enumerate(aspects):
            classes[np.isin(roles, csabstruct.ASPECT_ROLES[aspect])] = a
        sents = [frame["sentences"][i] for i in rows]
        return sentence_table(sents, cache.vectors([s for ss in sents for s in ss]), classes)
    truths = {f"the {name} truth (human-marked sentences pooled)":
              {a: pooled_truth(c, [human[a][i] for i in scored]) for a in aspects}
              for name, c in {"MiniLM": cache, **(truth_caches or {})}.items()}
    return Family("CSAbstruct", frame["doc_id"].tolist(), features, floor, askable, scored,
                  user_answers(frame["doc_id"], features, human), truths, (table(askable), table(scored)),
                  word_vectors)


def aclsum_family(cache, acl, spec: str, split: str = "test", truth_caches: dict | None = None) -> Family:
    """ACLSum as a user has it (`load_corpus`): every paper the corpus, train and validation papers askable, test
    papers scored against the human summaries (Table 2's truth: their cosine, read by MiniLM and by each encoder
    of `truth_caches`); a sentence states an aspect where it is in that aspect's highlights. `split`
    "validation": train papers askable, validation papers scored."""
    corpus = load_corpus(spec)
    docs = corpus.docs.reset_index(drop=True)
    aspects = list(acl.names)
    features = cache.documents(corpus.texts())
    word_vectors = FeatureCache(None, CachedBackbone(cache)).word_vectors
    floor = fit_floor(features, aspect_prototypes(acl, aspects, cache.vectors), word_vectors)
    listed = lambda v: [str(x) for x in v] if isinstance(v, (list, tuple, np.ndarray)) else []  # noqa: E731
    human = {a: [listed(v) for v in docs[f"highlights_{a}"]] for a in aspects}
    askable = np.flatnonzero(docs["split"].isin(["train", "validation"] if split == "test" else ["train"]))
    scored = np.flatnonzero(docs["split"] == split)
    answers = user_answers(docs["doc_id"], features, human)
    truths = {}
    for name, c in {"MiniLM": cache, **(truth_caches or {})}.items():
        summaries = truths[f"the human summaries ({name})"] = {}
        for a in aspects:
            texts = [docs[f"summary_{a}"][i] for i in scored]
            has = np.array([isinstance(t, str) and bool(t.strip()) for t in texts])
            v = np.full((len(scored), c.backbone.hidden_size), np.nan, np.float32)
            v[has] = c.vectors([t for t, h in zip(texts, has) if h])
            summaries[a] = (np.nan_to_num(summary_similarity(v)), has)
    # Beside it, what the user answers from: the abstract's sentences that match a highlight, pooled.
    marked = {a: pooled_truth(cache, [[t for k, t in enumerate(features.sentence_texts[i])
                                      if a in answers[docs["doc_id"][i], k]] for i in scored]) for a in aspects}
    truths["the abstract's highlighted sentences pooled (MiniLM), what the user answers from"] = marked

    def table(rows):  # the workbench's sentences, classed by the highlights (the first aspect a sentence states)
        said = [answers[docs["doc_id"][i], k] for i in rows for k in range(len(features.sentence_texts[i]))]
        classes = [aspects.index(a[0]) if a else len(aspects) for a in said]
        vectors = [v for i in rows for v in features.sentences[i]]
        return sentence_table([features.sentence_texts[i] for i in rows], vectors, classes)
    return Family("ACLSum", docs["doc_id"].tolist(), features, floor, askable, scored, answers, truths,
                  (table(askable), table(scored)), word_vectors, tuple(t for t in truths if "summaries" in t))


def significance(emb: dict, whole: np.ndarray, truths: dict, permutations: int, seed: int) -> dict:
    """{(truth, aspect): (head less MiniLM's whole abstract x100, p)}: appendix A.6's cell-mixing permutation
    test (`evaluation.permutation_test`) of each head's similarities against the whole abstract's, on the
    scored papers that have the truth."""
    cos = lambda v: unit_rows(np.asarray(v, np.float64)) @ unit_rows(np.asarray(v, np.float64)).T  # noqa: E731
    out = {}
    for t, truth in truths.items():
        for a, (sim, has) in truth.items():
            test = permutation_test(cos(emb[a][has]), cos(whole[has]), sim[np.ix_(has, has)], permutations, seed)
            out[t, a] = (100 * test["observed_difference"], test["p_value"])
    return out


def built_to_lose(loop: TeachLoop, seed: int, how: str = "shuffled") -> tuple[dict, dict]:
    """A head built to lose, taught wrong answers about the sentences the loop showed: its answers shuffled among
    them ("shuffled"), or each answer turned to the aspects it does not name ("inverted": a sentence marked
    approach now states challenge and outcome, one marked none states all three). The verdict judges it on the
    held-out papers' TRUE marks (`cross_check(..., judge=)`). Returns (its embeddings, that verdict); the loop is
    left as it was."""
    true = loop.marks
    shown = true.current()
    if how == "shuffled":
        answers = np.random.default_rng(seed).permutation([m.answer for m in shown])
    else:
        answers = [[a for a in loop.aspects if not m.states(a)] or "none" for m in shown]
    wrong = Marks()
    wrong.add_many([(m.doc_id, m.sentence, a) for m, a in zip(shown, answers)])
    try:
        loop.marks = wrong
        loop.refit()
        return loop.embeddings(), cross_check(loop, judge=true, **VERDICT)
    finally:
        loop.marks = true
        loop.refit()


def teach(loop: TeachLoop, answers: dict, budgets: list[int], batch: int, verdicts: dict | None = None,
          losing: dict | None = None, pooled: dict | None = None) -> dict:
    """Drive the loop until each budget of answers (in all) is spent; {budget: the embeddings then}. `verdicts`,
    where given, gets {budget: the marks' verdict then} (`teach.verdict.cross_check`); `losing`, {how: {}} each
    {} given {budget: (the embeddings, the verdict) of a head built to lose so then} (`built_to_lose`); `pooled`,
    {budget: (the taught sentences alone, no whole abstract; each paper's summed probabilities)} (`pooling_study`)."""
    out, given = {}, 0
    for budget in sorted(budgets):
        while given < budget:
            questions = loop.next_questions(min(batch, budget - given))
            if not questions:
                break
            for q in questions:
                loop.answer(q, answers[q.doc_id, q.index])
            given += len(questions)
            loop.refit()
        out[budget] = loop.embeddings()
        if pooled is not None:
            taught = loop.taught()
            p = loop.scorer.read(loop.inputs)
            mass = {a: np.bincount(loop.doc, weights=p[:, j], minlength=len(loop.doc_ids))
                    for j, a in enumerate(loop.aspects)}
            pooled[budget] = (replace(taught, blends={a: 1.0 for a in loop.aspects}).embeddings(
                loop.features, loop.word_vectors), mass, dict(taught.blends))
        if verdicts is not None:
            verdicts[budget] = cross_check(loop, **VERDICT)
        for how, lost in (losing or {}).items():
            lost[budget] = built_to_lose(loop, budget, how)
    return out


def recipe(tables: tuple, n: int, seed: int, aspects) -> dict[str, np.ndarray]:
    """`taught_marks.py`'s fixed recipe: n random sentences of each class from the askable table, a logistic
    regression, each scored paper's sentences pooled by its probability; {aspect: [scored papers, H]}."""
    from sklearn.linear_model import LogisticRegression

    (X, _, y, _), (X_scored, owner, _, S) = tables
    rng = np.random.default_rng(seed)
    shown = np.concatenate([rng.choice(np.flatnonzero(y == c), min(n, int((y == c).sum())), replace=False)
                            for c in range(len(aspects) + 1)])
    logp = LogisticRegression(max_iter=3000).fit(X[shown], y[shown]).predict_log_proba(X_scored)
    out = {}
    for a, aspect in enumerate(aspects):
        pooled = []
        for j in range(owner.max() + 1):
            r = owner == j
            w = np.exp(logp[r, a] - logp[r, a].max()) if r.any() else np.zeros(0)
            pooled.append((w / w.sum()) @ S[r] if r.any() else np.zeros(S.shape[1]))
        out[aspect] = np.stack(pooled)
    return out


def row(name: str, scores: dict, aspects, floor: dict | None = None) -> str:
    cells = [f"{scores[a]:.1f}" + (f" ({scores[a] - floor[a]:+.1f})" if floor else "") for a in aspects]
    mean = np.mean([scores[a] for a in aspects])
    extra = f" ({mean - np.mean([floor[a] for a in aspects]):+.1f})" if floor else ""
    return f"| {name} | " + " | ".join(cells) + f" | {mean:.1f}{extra} |"


def run_family(family: Family, aspects, args) -> list[tuple]:
    """Teach, score and print one family's tables (see the module doc), one per truth; returns its bars
    (`family_bars`)."""
    t0 = time.perf_counter()
    scored = family.scored
    score = lambda emb: {(t, a): spearman_on(emb[a], *truth[a])  # noqa: E731
                         for t, truth in family.truths.items() for a in aspects}
    whole = score({a: unit_rows(family.features.whole[scored]) for a in aspects})
    floor = score({a: v[scored] for a, v in family.floor.embeddings(family.features, family.word_vectors).items()})
    budgets = [m * (len(aspects) + 1) for m in args.marks]
    taught, random_marks, shown, verdicts = {m: [] for m in args.marks}, {m: [] for m in args.marks}, {}, {}
    losers = {how: {} for how in LOSERS}  # {how: {marks per aspect: [(scores, verdict) per user seed]}}
    tested = {t: family.truths[t] for t in family.significance}
    whole_scored = unit_rows(family.features.whole[scored])
    signif, studied = {m: [] for m in args.marks}, {}  # {marks per aspect: [A.6, pooling study] per user seed}
    for seed in args.seeds:
        rng = np.random.default_rng(seed)
        askable = [family.doc_ids[i] for i in
                   rng.choice(family.askable, max(1, int(len(family.askable) * ASKABLE_SHARE)), replace=False)]
        t1 = time.perf_counter()
        loop = TeachLoop(family.features, family.floor, family.doc_ids, askable=askable,
                         word_vectors=family.word_vectors, seed=seed)
        said, lost, pooled = {}, {how: {} for how in LOSERS}, ({} if args.pooling else None)
        for budget, emb in teach(loop, family.answers, budgets, args.batch, said, lost, pooled).items():
            m = budget // (len(aspects) + 1)
            taught[m].append(score({a: v[scored] for a, v in emb.items()}))
            if pooled is not None:  # its KEPT row is the loop's own head, recomputed: check it
                studied.setdefault(m, []).append(pooling_study(family, pooled[budget], m, score))
                kept = studied[m][-1][KEPT]
                assert np.allclose([kept[k] for k in kept], [taught[m][-1][k] for k in kept], atol=1e-3,
                                   equal_nan=True), "the pooling study does not rebuild the loop's head"
            if tested:
                signif[m].append(significance({a: v[scored] for a, v in emb.items()}, whole_scored, tested,
                                              args.permutations, seed))
            verdicts.setdefault(m, []).append((taught[m][-1], said[budget]))
            for how, heads in lost.items():
                losers[how].setdefault(m, []).append((score({a: v[scored] for a, v in heads[budget][0].items()}),
                                                      heads[budget][1]))
        shown[seed] = (loop.status(), time.perf_counter() - t1)
        for m in args.marks:
            random_marks[m].append(score(recipe(family.recipe_tables, m, seed, aspects)))
    worst = lambda runs, t: {a: min(r[t, a] for r in runs) for a in aspects}  # noqa: E731
    of = lambda scores, t: {a: scores[t, a] for a in aspects}  # noqa: E731
    print(f"\n## {family.name}: {len(family.doc_ids)} papers the corpus, {len(family.askable)} askable (a half "
          f"per seed), {len(scored)} scored; floor: {family.floor.scorer.description}")
    for t in family.truths:
        print(f"\nMean per-paper Spearman x100 against {t}, worst of user seeds "
              f"{', '.join(map(str, args.seeds))}; in brackets the difference from the floor.\n")
        print("| embedding | " + " | ".join(aspects) + " | mean |")
        print("|---|" + "---:|" * (len(aspects) + 1))
        print(row("MiniLM whole abstract", of(whole, t), aspects))
        print(row("stage 03's label-free floor", of(floor, t), aspects))
        for m in args.marks:
            print(row(f"{m} random balanced marks per aspect (taught_marks.py's recipe)",
                      worst(random_marks[m], t), aspects, of(floor, t)))
            print(row(f"{m} marks per aspect, the workbench asking (teach loop)", worst(taught[m], t), aspects,
                      of(floor, t)))
    if tested:
        print_significance(signif, aspects, args.permutations)
    if studied:
        print_pooling_study(studied, floor, family.truths, aspects)
    print_verdicts(verdicts, whole, next(iter(family.truths)), aspects)
    for how, words in LOSERS.items():
        print_verdicts(losers[how], whole, next(iter(family.truths)), aspects,
                       f"A head built to lose ({words}), judged on held-out TRUE marks")
    print()
    for seed, (status, seconds) in shown.items():
        print(f"user seed {seed}: {seconds:.0f} s; " + "; ".join(
            f"{a} {s['yes']} yes / {s['no']} no, sure of {100 * s['sure']:.0f}%" for a, s in status.items()))
    for m, truth in ((m, truth) for truth in family.truths for m in args.marks):
        t, r, f = worst(taught[m], truth), worst(random_marks[m], truth), of(floor, truth)
        print(f"at {m} marks ({truth}): heads above the floor by "
              + ", ".join(f"{t[a] - f[a]:+.1f}" for a in aspects)
              + f"; mean over aspects above the random-marks recipe by {np.mean([t[a] - r[a] for a in aspects]):+.1f}")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return family_bars(family, {m: {t: worst(taught[m], t) for t in family.truths} for m in args.marks},
                       {m: {t: worst(random_marks[m], t) for t in family.truths} for m in args.marks},
                       {t: of(floor, t) for t in family.truths}, aspects)


def family_bars(family: Family, taught: dict, random_marks: dict, floor: dict, aspects) -> list[tuple]:
    """(bar, met, figures) of the teaching bars on one family: `taught` and `random_marks` {marks: {truth: {aspect:
    worst score over the user seeds}}}, `floor` {truth: {aspect: score}}. The bars read CSAbstruct's truths and
    ACLSum's summaries (not what the user answers from)."""
    low, top, out = min(taught), max(taught), []
    truths = list(family.significance) or list(family.truths)
    gap = lambda m, t: {a: taught[m][t][a] - floor[t][a] for a in aspects}  # noqa: E731
    said = lambda g: ", ".join(f"{a} {v:+.1f}" for a, v in g.items())  # noqa: E731
    for t in truths:
        out.append((f"{family.name}, {t}: at {low} marks no head more than 1 below the floor",
                    min(gap(low, t).values()) >= -1, "head less floor, worst seed: " + said(gap(low, t))))
    if family.significance:  # ACLSum: each head at or above the floor
        for t in truths:
            out.append((f"{family.name}, {t}: at {top} marks each head at or above the floor",
                        min(gap(top, t).values()) >= 0, "head less floor, worst seed: " + said(gap(top, t))))
        return out
    for t in truths:
        out.append((f"{family.name}, {t}: at {top} marks each head at least 2 above the floor",
                    min(gap(top, t).values()) >= 2, "head less floor, worst seed: " + said(gap(top, t))))
    first = truths[0]
    mean, recipe_mean = (np.mean([r[top][first][a] for a in aspects]) for r in (taught, random_marks))
    out.append((f"{family.name}, {first}: at {top} marks the mean at least 1 above the random-marks recipe",
                mean - recipe_mean >= 1, f"{mean:.1f} against {recipe_mean:.1f}"))
    return out


def pooling_variants(taught: np.ndarray, floor: np.ndarray, whole: np.ndarray, mass: np.ndarray,
                     marks: int, blend: float = TAUGHT_BLEND) -> dict[str, np.ndarray]:
    """{name: [n, H]} the pooling alternatives `--pooling` compares (chosen on the dev papers): `taught` the taught
    sentences alone (unit rows; pooled as far as the marks are trusted, `learner.trust`), `floor` the floor's
    vectors, `whole` the whole abstract's, `mass` each paper's summed probability of stating the aspect, `marks`
    the marks per aspect, `blend` the sentences' share the loop gives the aspect."""
    u = lambda v: unit_rows(np.asarray(v, np.float64))  # noqa: E731
    kept = u(blend * taught + (1 - blend) * whole)  # what the loop embeds
    out = {KEPT: kept}
    out.update({f"sentences' share {b}": u(b * taught + (1 - b) * whole)
                for b in sorted({1.0, TAUGHT_BLEND, 0.7, 0.5}, reverse=True)})
    out.update({f"mixed with the floor's vector, taught share {w}": u(w * kept + (1 - w) * floor)
                for w in (0.7, 0.5, 0.3)})
    out.update({f"shrunk to the floor, taught share n / (n + {n0})": u(marks / (marks + n0) * kept
                                                                       + n0 / (marks + n0) * floor)
                for n0 in (3, 10, 30)})
    share = (mass / (mass + 0.5))[:, None]  # a paper whose sentences hardly state the aspect keeps its whole
    out["per paper, sentences' share m / (m + 0.5)"] = u(share * taught + (1 - share) * whole)
    out["per paper, taught share m / (m + 1) against the floor's vector"] = u(
        (mass / (mass + 1))[:, None] * kept + (1 / (mass + 1))[:, None] * floor)
    return out


def pooling_study(family: Family, pooled: tuple, marks: int, score) -> dict:
    """{variant: scores} of one user seed's taught pooling at one budget (`pooling_variants`)."""
    sentences, mass, blends = pooled
    floor = family.floor.embeddings(family.features, family.word_vectors)
    whole = unit_rows(family.features.whole[family.scored])
    rows = family.scored
    heads = {a: pooling_variants(sentences[a][rows], floor[a][rows], whole, mass[a][rows], marks, blends[a])
             for a in sentences}
    return {name: score({a: heads[a][name] for a in heads}) for name in next(iter(heads.values()))}


def print_pooling_study(studied: dict, floor: dict, truths: dict, aspects) -> None:
    """Per pooling variant, budget and truth: each head's worst (over the user seeds) less the floor."""
    print("\nPooling alternatives (`--pooling`): per truth and marks per aspect, each head's worst over the user "
          "seeds less the floor\n")
    names = list(studied[min(studied)][0])
    print("| pooling | " + " | ".join(f"{m} marks, {t}" for m in sorted(studied) for t in truths) + " |")
    print("|---|" + "---|" * (len(studied) * len(truths)))
    for name in names:
        cells = []
        for m in sorted(studied):
            for t in truths:
                cells.append(" / ".join(f"{min(r[name][t, a] for r in studied[m]) - floor[t, a]:+.1f}"
                                        for a in aspects))
        print(f"| {name} | " + " | ".join(cells) + " |")


def print_significance(signif: dict, aspects, permutations: int) -> None:
    """Per truth and budget, each head's worst (smallest) gain over MiniLM's whole abstract over the user seeds
    and its worst (largest) A.6 p-value."""
    print(f"\nAppendix A.6 against MiniLM's whole abstract ({permutations} permutations): per aspect, the smallest "
          "gain over the user seeds and the largest p\n")
    print("| truth | marks per aspect | " + " | ".join(aspects) + " |")
    print("|---|---:|" + "---|" * len(aspects))
    for m, runs in sorted(signif.items()):
        for t in sorted({t for t, _ in runs[0]}):
            cells = [f"{min(r[t, a][0] for r in runs):+.1f} (p {max(r[t, a][1] for r in runs):.3f})" for a in aspects]
            print(f"| {t} | {m} | " + " | ".join(cells) + " |")


def print_verdicts(verdicts: dict, whole: dict, truth: str, aspects,
                   title: str = "The marks' verdict against the labels'") -> None:
    """The marks' verdict (held-out marks of the askable papers) beside the labels' (the scored papers' truth):
    per budget and aspect, each user seed's labels' margin (taught head less MiniLM's whole abstract) and the
    verdict, its interval and how many more papers it asks for."""
    print(f"\n{title} ({truth}; per user seed: labels' margin, verdict [interval])\n")
    print("| marks per aspect | " + " | ".join(aspects) + " |")
    print("|---:|" + "---|" * len(aspects))
    for m, runs in sorted(verdicts.items()):
        cells = []
        for a in aspects:
            said = []
            for scores, check in runs:
                c = check[a]
                more = f", {c['more']} more" if c.get("more") else ""
                said.append(f"{scores[truth, a] - whole[truth, a]:+.1f}: {c['outcome']} {c.get('interval')}{more}")
            cells.append("; ".join(said))
        print(f"| {m} | " + " | ".join(cells) + " |")
    for m, runs in sorted(verdicts.items()):
        margins = [{a: scores[truth, a] - whole[truth, a] for a in aspects} for scores, _ in runs]
        said = [{a: check[a]["outcome"] for a in aspects} for _, check in runs]
        against = sum(1 for mg, sd in zip(margins, said) for a in aspects
                      if (sd[a] == BETTER and mg[a] < 0) or (sd[a] == WORSE and mg[a] > 0))
        clear = [sum(sd[a] != UNSURE for a in aspects if mg[a] >= 5) for mg, sd in zip(margins, said)]
        told = [sum(mg[a] >= 5 for a in aspects) for mg in margins]
        print(f"at {m} marks: {against} verdicts against the labels' sign; per user seed, aspects given a verdict "
              "where the labels' margin is 5 or more: " + ", ".join(f"{c} of {t}" for c, t in zip(clear, told))
              + "; outcomes: " + ", ".join("/".join(sd[a] for a in aspects) for sd in said))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None, help="folder of encoder vectors kept between runs")
    parser.add_argument("--split", default="test", choices=["dev", "test"],
                        help="the papers scored: test, or CSAbstruct's dev and ACLSum's validation papers")
    parser.add_argument("--marks", type=int, nargs="+", default=[10, 30], help="marks per aspect")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="user seeds (worst reported)")
    parser.add_argument("--batch", type=int, default=10, help="questions asked between two refits")
    parser.add_argument("--csab-docs", type=int, default=None, help="CSAbstruct papers per split (default: all)")
    parser.add_argument("--aclsum", default="aclsum", help="the ACLSum corpus (a load_corpus spec; '' to skip)")
    parser.add_argument("--truths", nargs="+", default=["minilm"],
                        help="encoders pooling CSAbstruct's truths (minilm mpnet: both; the bars use the first)")
    parser.add_argument("--folds", type=int, default=None, help="the verdict's folds (default: verdict.FOLDS)")
    parser.add_argument("--level", type=float, default=None, help="the verdict's interval (default: verdict.LEVEL)")
    parser.add_argument("--permutations", type=int, default=1000,
                        help="appendix A.6's permutations (ACLSum's summaries truths against MiniLM's whole abstract)")
    parser.add_argument("--pooling", action="store_true",
                        help="also compare pooling alternatives (taught with the floor, per-paper blends; dev)")
    parser.add_argument("--csabstruct", action=argparse.BooleanOptionalAction, default=True,
                        help="run CSAbstruct (--no-csabstruct: ACLSum alone)")
    add_smoke(parser, argv, csab_docs=4, aclsum="aclsum:train[:2],test[:3]", marks=[1, 2], seeds=[0], batch=4,
              permutations=10)
    args = parser.parse_args(argv)
    VERDICT.update({k: v for k, v in (("folds", args.folds), ("level", args.level)) if v is not None})
    start = time.perf_counter()
    folder = None if args.cache else tempfile.TemporaryDirectory(prefix="teach-")
    # Smoke mode reads hashed word vectors, in memory, for the encoders' (no model to load: seconds, not tens).
    where = (lambda name: None) if args.smoke else (lambda name: Path(args.cache or folder.name) / name)
    backbone = (lambda name: HashedBackbone()) if args.smoke else FrozenBackbone
    cache = FeatureCache(where("minilm"), backbone("minilm"))
    print(f"# Teaching loop (CSAbstruct {args.split} papers scored)\n\nmatrix product: "
          f"{matmul_gflops(1 if args.smoke else 5):.0f} "
          f"GFLOP/s (1600 x 768 @ 768 x 3072 fp32, torch); load {os.getloadavg()[0]:.1f}")
    acl = load_aspects("acl")
    truth_caches = {name: FeatureCache(where(name), backbone(name))
                    for name in args.truths if name != "minilm"}
    families = [csabstruct_family(cache, acl, args.csab_docs, args.split, truth_caches)] if args.csabstruct else []
    if args.aclsum:
        families.append(aclsum_family(cache, acl, args.aclsum, "validation" if args.split == "dev" else "test",
                                      truth_caches))
    bars = []
    for family in families:
        bars += run_family(family, list(acl.names), args)
    print(f"\n## The bars ({args.split} papers; learner.TRUST_YES {TRUST_YES})\n")
    for bar, met, figures in bars:
        print(f"- {bar}: {'met' if met else 'NOT MET'} ({figures})")
    print(f"\n{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
