"""Which steps of stage 03's aspect-file floor hold on text the project did not write: an ablation across families.

Stage 03's floor (`workbench.embed.aspectfile`, built step by step as `benchmarks/aspect_file.py`'s
`floor_heads` builds it) was developed on the project's own synthetic corpora. This script measures
each of its steps, and label-free candidates, on three families of corpora, choosing on one split
of a family and reporting on another:

* **CSAbstruct** (`scripts/csabstruct.py`, 2,155 real computer-science abstracts, every sentence's
  role labelled by a person) with the `acl` preset, run as a user would: the whole file is the corpus
  every corpus-fitted step reads (no label), dev papers choose, test papers report. Truth: per paper
  and aspect the mean of the unit vectors of its human-marked sentences (challenge ~ background +
  objective, approach ~ method, outcome ~ result), pooled by MiniLM and, separately, by mpnet;
* **ACLSum as a user has it** (`load_corpus("aclsum")`, all 250 papers the corpus; its summaries and
  highlights read by nothing but the truths) with `acl`: validation papers choose, test papers report.
  Truth: the `highlights_<aspect>` sentences pooled the same way; Table 2's human-summary truth (the
  summaries' cosine, MiniLM and mpnet) is printed beside it in the bars;
* **synthetic**, generators a and b (`scripts/synthetic_corpus.py`, summaries and highlights dropped)
  with `data/clinical-study-aspects.yaml`, each corpus its own fit: the first seed chooses, the others
  report (worst seed). Truth: "same value" of the aspect's factor; the drug is a nuisance.

Metric: mean per-paper Spearman x100 of an embedding's cosine similarities against the truth's
(`evaluation.rowwise_spearman`), over the papers that have the aspect; a family's figure is the mean
over its heads and truth encoders (synthetic: heads and generators, worst seed). Rows: MiniLM's whole
abstract, position pooling (first 40% of the sentences challenge, last 25% outcome, the rest
approach; real families only), the prototype probe (the lean floor: prototype = MiniLM's unit mean of
the preset's description, include items and examples; sentence score = cosine less the mean over
aspects; softmax over the abstract's sentences at t = 0.05; no blend, no training), today's floor
(`aspect_file.floor_heads`'s "phrases": stage 03's; checked equal), today's floor with each step
removed and the lean floor with each step added.

Steps: `scale` (today's query, prototype less the mean of the *other* aspects': a 1.5x sharper
softmax with three aspects), `exclude` (less `EXCLUDE_WEIGHT` x the mean of the exclude items),
`calibrate` (self-training), `boilerplate` (near-copied sentences left out), `blend` (with the whole
abstract, 1 - s / 2), `phrases` (sentences read through their phrases, `word_shares`), `centring`
(of the phrases, part of `phrases`), `prior` (the position prior, `aspectfile.position_prior`) and
`mixture` (`mixture.py`: each sentence's posterior over the aspects, its scores plus each aspect's
density over PRIOR_BINS bins of relative position read by EM from the corpus, pooled per aspect; in its
place in the weights where no aspect's phrases' share is above 0, as stage 03 takes it) with its `sharpness`
(part of `mixture`: its emissions' exponent read from the corpus, else 1). Label-free candidates: `centred`
(each aspect's vectors less their corpus mean) and `sentence_blend` (the blend takes the mean of the abstract's
sentence vectors in place of its one pass; it acts only with `blend`). A baseline beside them: the mean of the
abstract's sentence vectors, no aspect file.

Then leave one family out, twice: from the lean floor (forward) and from today's floor (backward),
the two other families' choosing splits pick the temperature, keep each step that, switched alone,
adds to the mean on both (on each where it acts: a gated step that stays off changes nothing), and pick
the constants; the held-out family's reporting split says what each step adds there, and a step holds
where it is kept in every fold and adds on every held-out family where it acts. Last, the sentence marks
against the human ones (micro precision, recall, F1) on the real families and issue 39's bars.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/families.py --cache /tmp/fc [--seeds 0 1 2 3] [--synthetic-docs 150]
        [--csab-docs N] [--aclsum SPEC] [--permutations 200] [--truths minilm mpnet] [--smoke]

--cache: a folder of encoder vectors kept between runs (one subfolder per encoder); default a temporary
folder. --smoke (or WORKBENCH_BENCH_SMOKE=1): 4 CSAbstruct papers per split, 10 ACLSum papers, 10
synthetic papers and two seeds per generator, 10 permutations, one truth encoder, and hashed word vectors
(`_smoke.HashedBackbone`) in place of every encoder: each code path, no model to load.
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
from aspect_file import ASPECT_FILE, ceiling, floor_heads, same_value  # noqa: E402
from synthetic_corpus import ASPECTS as SYN_ASPECTS, NUISANCE, synthetic_frame  # noqa: E402
from workbench.core.vectors import unit_rows  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.corpus import load_corpus  # noqa: E402
from workbench.data.sentences import match_highlights  # noqa: E402
from workbench.embed.aspectfile import (EXCLUDE_WEIGHT, TEMPERATURE, AspectPrototypes,  # noqa: E402
                                        aspect_directions, aspect_prototypes, calibrate, corpus_blends,
                                        corpus_word_shares, kept_sentence_rows, marked_means, pooled_words,
                                        sentence_marks, sentence_weights, stating_sentences,
                                        with_position_prior)
from workbench.embed.boilerplate import find_boilerplate  # noqa: E402
from workbench.embed.features import FeatureCache, FrozenBackbone, blend_documents, position_features  # noqa: E402
from workbench.embed.mixture import POSITION_BINS, fit_mixture  # noqa: E402
from workbench.embed.phrases import stating  # noqa: E402
from workbench.measures.evaluation import permutation_test, rowwise_spearman, summary_similarity  # noqa: E402

PRIOR_BINS = POSITION_BINS  # relative-position bins of the mixture's position densities (stage 03's)
TEMPERATURES = (0.03, 0.05, 0.08, 0.12, 0.2)  # the lean floor's softmax temperatures a fold chooses from
MIXTURE_BINS = (3, 5, 10)  # the mixture's bins a fold chooses from, where it keeps the mixture
POSITION = (0.4, 0.75)  # position rule: challenge before 40% of the abstract, outcome from 75%
TRUTH_ENCODERS = ("minilm", "mpnet")  # the encoders pooling the truths (main sets it from --truths)


@dataclass(frozen=True)
class Floor:
    """One floor: which steps it takes (see the module doc) and its constants."""
    scale: bool = False
    exclude: bool = False
    calibrate: bool = False
    boilerplate: bool = False
    blend: bool = False
    phrases: bool = False
    centring: bool = True   # only read with phrases
    sharpness: bool = False  # only read with mixture: its emissions' sharpness read from the corpus (else 1)
    prior: bool = False
    mixture: bool = False
    centred: bool = False
    sentence_blend: bool = False  # only acts with blend: the sentences' mean in place of the whole abstract's pass
    temperature: float = TEMPERATURE
    prior_bins: int = PRIOR_BINS

    def with_step(self, step: str, on: bool = True) -> "Floor":
        return replace(self, **{step: on})


LEAN = Floor()
TODAY = Floor(scale=True, exclude=True, calibrate=True, boilerplate=True, blend=True, phrases=True, mixture=True,
              sharpness=True)
STEPS = ("scale", "exclude", "calibrate", "boilerplate", "prior", "blend", "phrases", "centring", "mixture",
         "sharpness")
PARTS = {"centring": "phrases", "sharpness": "mixture"}  # a step that is part of another, read only with it
NEW_STEPS = ("centred", "sentence_blend")
ACTS_ONLY_WITH = {"sentence_blend": "blend"}  # a candidate that changes nothing without that step
SILENT = 1e-9  # a step's gain this small: the step did not act on that family (its gate was off)
WHOLE, POSITIONAL = "MiniLM whole abstract", "position pooling"
SENTENCE_MEAN = "mean of the sentences"  # each abstract's unit sentence vectors averaged, no aspect file


def name_of(spec) -> str:
    """A row's name: a baseline's, or the floor's steps and constants."""
    if isinstance(spec, str):
        return spec
    if spec == LEAN:
        return "prototype probe (lean floor)"
    if spec == TODAY:
        return "today's floor (stage 03)"
    if {s: getattr(spec, s) for s in STEPS} == {s: getattr(TODAY, s) for s in STEPS}:
        words = "today's floor"
    else:
        words = "lean" + "".join(f" + {s}" for s in STEPS if s not in PARTS and getattr(spec, s))
    words += " (phrases not centred)" if spec.phrases and not spec.centring else ""
    words += " + sharpness" if spec.mixture and spec.sharpness and words != "today's floor" else ""
    words += "".join(f" + {s}" for s in NEW_STEPS if getattr(spec, s))
    consts = [f"t {spec.temperature:g}"] if spec.temperature != TEMPERATURE else []
    if spec.mixture and spec.prior_bins != PRIOR_BINS:
        consts.append(f"{spec.prior_bins} bins" if spec.prior_bins > 1 else "no position")
    return words + (f" ({', '.join(consts)})" if consts else "")


class CachedBackbone:
    """A backbone whose texts go through a disk `FeatureCache` (phrases included), for `FeatureCache.word_vectors`."""

    def __init__(self, cache: FeatureCache):
        self.cache = cache
        self.hidden_size = cache.backbone.hidden_size
        self.key = cache.backbone.key

    def embed(self, texts, batch_size: int = 32, progress: bool = False) -> np.ndarray:
        return self.cache.vectors(list(texts))


class Builder:
    """Every floor of one corpus (its `features`, the aspect file's `raw` prototypes), each step read from the corpus
    itself and kept, so that floors sharing a step fit it once."""

    def __init__(self, features, raw: AspectPrototypes, cache: FeatureCache):
        self.features, self.raw, self.aspects = features, raw, list(raw.aspects)
        self.phrase_cache = FeatureCache(None, CachedBackbone(cache))  # pooled phrases in memory, phrases on disk
        self.words = self.phrase_cache.word_vectors
        self.memo: dict = {}
        self.n = len(features)

    def _get(self, key, make):
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    def prototypes(self, f: Floor) -> AspectPrototypes:
        """The aspect file's queries: prototype less the mean of all aspects' (lean) or of the others' (scale),
        less EXCLUDE_WEIGHT x the mean of the exclude items (exclude)."""
        def make():
            P, n = self.raw.prototypes, len(self.aspects)
            centre = (P.sum(0, keepdims=True) - P) / max(n - 1, 1) if f.scale else P.mean(0, keepdims=True)
            excluded = self.raw.excluded if f.exclude else np.zeros_like(self.raw.excluded)
            return AspectPrototypes(self.aspects, P, (P - centre - EXCLUDE_WEIGHT * excluded).astype(np.float32),
                                    excluded.astype(np.float32))
        return self._get(("protos", f.scale, f.exclude), make)

    def boiler(self, f: Floor):
        return self._get("boiler", lambda: find_boilerplate(self.features)) if f.boilerplate else None

    def scorer(self, f: Floor):
        """The aspect file's scorer: calibrated (calibrate), with the position prior (prior, `aspectfile.position_prior`
        as stage 03 fits it)."""
        protos = self.prototypes(f)
        scorer = protos if not f.calibrate else \
            self._get(("calibrated", f.scale, f.exclude, f.boilerplate),
                      lambda: calibrate(self.features, protos, boilerplate=self.boiler(f)) or protos)
        if not f.prior:
            return scorer
        return self._get(("prior", f.scale, f.exclude, f.calibrate, f.boilerplate, f.temperature),
                         lambda: with_position_prior(self.features, scorer, f.temperature, self.boiler(f)))

    def blends(self, f: Floor) -> dict:
        if not f.blend:
            return {a: 1.0 for a in self.aspects}
        return self._get(("blend", f.scale, f.exclude, f.calibrate, f.boilerplate, f.prior, f.temperature),
                         lambda: corpus_blends(self.features, self.scorer(f), boilerplate=self.boiler(f)))

    def shares(self, f: Floor) -> dict:
        return self._get(("shares", f.scale, f.exclude, f.calibrate, f.boilerplate, f.prior, f.temperature),
                         lambda: corpus_word_shares(self.features, self.scorer(f), boilerplate=self.boiler(f)))

    def sentences(self, f: Floor):
        """{aspect: per document its sentences' vectors} read through their phrases, as
        `aspectfile.word_pooled_sentences` makes them (its parts; `centring` off: not centred), or None."""
        if not f.phrases:
            return None

        def make():
            scorer, shares, boiler = self.scorer(f), self.shares(f), self.boiler(f)
            directions = aspect_directions(scorer, self.prototypes(f))
            marks = stating_sentences(self.features, scorer, boiler)
            words = pooled_words(self.features, self.aspects, directions, shares, self.words, None, marks)
            means = marked_means(words, marks) if f.centring else {}
            return {a: blend_documents(self.features, w, shares[a], means.get(a), marks[a]) for a, w in words.items()}
        return self._get(("phrases", f.scale, f.exclude, f.calibrate, f.boilerplate, f.prior, f.temperature,
                          f.centring), make)

    def mixture(self, f: Floor):
        """Stage 03's position mixture of this floor (`mixture.fit_mixture`, of its scorer without the prior), where
        stage 03 takes it (no aspect's phrases' share above 0) and it can be fitted; else None."""
        if not f.mixture or any(v > 0 for v in self.shares(f).values()):
            return None
        return self._get(("mixture", f.scale, f.exclude, f.calibrate, f.boilerplate, f.temperature, f.prior_bins,
                          f.sharpness),
                         lambda: fit_mixture(self.features, self.scorer(replace(f, prior=False)), f.temperature,
                                             self.boiler(f), f.prior_bins, sharpness=None if f.sharpness else 1.0))

    def pooling_scorer(self, f: Floor):
        """The scorer whose weights pool the sentences: the mixture where the floor takes it, else `scorer`."""
        return self.mixture(f) or self.scorer(f)

    def weights(self, f: Floor) -> list[dict]:
        """Per document {aspect: pooling weights over its sentences} (`sentence_weights` of `pooling_scorer`)."""
        mixed = self.mixture(f) is not None
        return self._get(("weights", f.scale, f.exclude, f.calibrate, f.boilerplate, f.prior and not mixed,
                          f.temperature, mixed and f.prior_bins, mixed and f.sharpness),
                         lambda: sentence_weights(self.features, self.pooling_scorer(f), f.temperature,
                                                  self.boiler(f)))

    def sentence_mean(self) -> np.ndarray:
        """[N, H] unit rows: the mean of each abstract's unit sentence vectors (its whole vector where it has none)."""
        return self._get("sentence mean", lambda: unit_rows(np.stack([
            unit_rows(np.asarray(s, np.float32)).mean(axis=0) if len(s) else self.features.whole[i]
            for i, s in enumerate(self.features.sentences)])))

    def embed(self, spec) -> dict[str, np.ndarray]:
        """{aspect: [N, H] unit rows} of a floor or a baseline (WHOLE, POSITIONAL, SENTENCE_MEAN) over the whole
        corpus."""
        return self._get(("embed", spec), lambda: self._embed(spec))

    def _embed(self, spec) -> dict[str, np.ndarray]:
        if spec == WHOLE:
            return {a: unit_rows(self.features.whole) for a in self.aspects}
        if spec == POSITIONAL:
            return position_pooling(self.features, self.aspects)
        if spec == SENTENCE_MEAN:
            return {a: self.sentence_mean() for a in self.aspects}
        whole = self.sentence_mean() if spec.sentence_blend else None
        out = pool(self.features, self.weights(spec), self.blends(spec), self.sentences(spec), whole)
        if spec.centred:
            out = {a: unit_rows(v - v.mean(axis=0, keepdims=True)) for a, v in out.items()}
        return out


def pool(features, weights, blends: dict, sentences=None, whole=None) -> dict[str, np.ndarray]:
    """`aspectfile.zero_shot_embeddings` with the weights given: the weighted mean of each abstract's sentence
    vectors (an aspect's own where `sentences` holds them), blended with the whole abstract (`blends`: the
    sentences' share; `whole`: what stands for the whole abstract, None: its one pass)."""
    whole = unit_rows(np.asarray(features.whole if whole is None else whole, dtype=np.float32))
    out = {a: whole.copy() for a in blends}
    for i, (sents, w) in enumerate(zip(features.sentences, weights)):
        if not len(sents):
            continue
        shared = unit_rows(np.asarray(sents, dtype=np.float32))
        for a in blends:
            s = sentences[a][i] if sentences is not None and a in sentences else shared
            out[a][i] = blends[a] * unit_rows((w[a] @ s)[None])[0] + (1 - blends[a]) * whole[i]
    return {a: unit_rows(v) for a, v in out.items()}


def mixture_posteriors(features, scorer, temperature: float = TEMPERATURE, boilerplate=None,
                       bins: int = PRIOR_BINS, sharpness: bool = False):
    """(the densities [A, bins], per document its posteriors [n, A]) of stage 03's position mixture
    (`mixture.fit_mixture`) of this scorer, whatever the gate; None where it cannot be fitted. Label-free."""
    mixture = fit_mixture(features, scorer, temperature, boilerplate, bins, sharpness=None if sharpness else 1.0)
    if mixture is None:
        return None
    return np.exp(mixture.log_density), kept_sentence_rows(features, mixture.posteriors, len(scorer.aspects),
                                                           boilerplate)


def position_pooling(features, aspects) -> dict[str, np.ndarray]:
    """The position rule's pooling: the mean of the first 40% of the sentences (challenge), the last 25% (outcome),
    the rest (approach); the whole abstract where a part is empty."""
    out = {a: unit_rows(np.asarray(features.whole, np.float32)) for a in aspects}
    for i, s in enumerate(features.sentences):
        if not len(s):
            continue
        masks = position_masks(len(s))
        for a in aspects:
            m = masks[a] if masks[a].any() else np.ones(len(s), bool)
            out[a][i] = unit_rows(unit_rows(np.asarray(s, np.float32))[m].mean(0)[None])[0]
    return out


def position_masks(n: int) -> dict[str, np.ndarray]:
    rel = (np.arange(n) + 0.5) / max(n, 1)
    challenge, outcome = rel < POSITION[0], rel >= POSITION[1]
    return {"challenge": challenge, "approach": ~(challenge | outcome), "outcome": outcome}


def spearman_on(emb: np.ndarray, truth: np.ndarray, has: np.ndarray) -> float:
    e = unit_rows(np.asarray(emb, np.float64)[has])
    return 100 * float(np.nanmean(rowwise_spearman(e @ e.T, truth[np.ix_(has, has)])))


def pooled_truth(cache: FeatureCache, groups: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """(cosine matrix of each paper's marked sentences' unit vectors averaged, which papers have any)."""
    has = np.array([bool(g) for g in groups])
    flat = [s for g in groups for s in g]
    vectors = unit_rows(cache.vectors(flat)) if flat else np.zeros((0, cache.backbone.hidden_size), np.float32)
    v = np.zeros((len(groups), vectors.shape[1]), np.float32)
    start = 0
    for i, g in enumerate(groups):
        if g:
            v[i] = vectors[start:start + len(g)].mean(0)
            start += len(g)
    v = unit_rows(v)
    return v @ v.T, has


# ---------------------------------------------------------------------------------------------- families

class RealFamily:
    """One real corpus, fitted once as a whole, judged on its choosing and reporting papers."""

    def __init__(self, name: str, texts, human: dict, splits: dict, aspect_set, caches: dict, summaries=None,
                 roles: dict | None = None):
        """`human`: {aspect: per paper the list of its human-marked sentence texts}; `splits`: {"choose": rows,
        "report": rows}; `summaries`: {aspect: per paper its human summary or None} (ACLSum); `roles`: {role: per
        paper the sentences people gave that role} (CSAbstruct), for `print_role_weights`."""
        self.name, self.aspects, self.splits, self.roles = name, list(aspect_set.names), splits, roles
        cache = caches["minilm"]
        self.features = cache.documents(list(texts))
        self.builder = Builder(self.features, aspect_prototypes(aspect_set, self.aspects, cache.vectors), cache)
        self.truths = {}
        self.marks = {}
        self.summary = {}
        for split, rows in splits.items():
            for enc in TRUTH_ENCODERS:
                for a in self.aspects:
                    self.truths[split, a, enc] = pooled_truth(caches[enc], [human[a][i] for i in rows])
            for a in self.aspects:
                self.marks[split, a] = [np.asarray(match_highlights(self.features.sentence_texts[i], human[a][i]))
                                        >= 0.5 if human[a][i] else np.zeros(len(self.features.sentence_texts[i]), bool)
                                        for i in rows]
            for a in self.aspects if summaries is not None else []:
                texts_a = [summaries[a][i] for i in rows]
                has = np.array([isinstance(t, str) and bool(t.strip()) for t in texts_a])
                for enc in TRUTH_ENCODERS:  # Table 2's truth: the summaries' cosine (`evaluation.summary_similarity`)
                    v = np.full((len(rows), caches[enc].backbone.hidden_size), np.nan, np.float32)
                    if has.any():
                        v[has] = caches[enc].vectors([t for t, h in zip(texts_a, has) if h])
                    self.summary[split, a, enc] = (np.nan_to_num(summary_similarity(v)), has)
        self.columns = [f"{a} {enc}" for a in self.aspects for enc in TRUTH_ENCODERS]

    def score(self, split: str, spec) -> dict[str, float]:
        emb, rows = self.builder.embed(spec), self.splits[split]
        return {f"{a} {enc}": spearman_on(emb[a][rows], *self.truths[split, a, enc])
                for a in self.aspects for enc in TRUTH_ENCODERS}

    def summary_scores(self, split: str, spec) -> dict[str, float]:
        """{"<aspect> <encoder>": Spearman x100 against the human summaries' similarities}."""
        emb, rows = self.builder.embed(spec), self.splits[split]
        return {f"{a} {enc}": spearman_on(emb[a][rows], *self.summary[split, a, enc])
                for a in self.aspects for enc in TRUTH_ENCODERS if (split, a, enc) in self.summary}

    @staticmethod
    def mean(scores: dict) -> float:
        return float(np.mean(list(scores.values())))


class SyntheticFamily:
    """Generators a and b, one corpus per (generator, seed), each fitted on itself; the first seed chooses."""

    def __init__(self, styles, seeds, docs: int, caches: dict):
        self.name, self.aspects, self.styles = "synthetic", list(SYN_ASPECTS), list(styles)
        self.splits = {"choose": [seeds[0]], "report": list(seeds[1:])}
        aspect_set = load_aspects(ASPECT_FILE)
        cache = caches["minilm"]
        self.corpora = {}
        for style in styles:
            for seed in seeds:
                frame = synthetic_frame(n_train=0, n_val=0, n_test=docs, seed=seed, style=style)
                frame = frame.drop(columns=[c for c in frame if c.startswith(("summary_", "highlights_"))
                                            or c == "sentences"])
                features = cache.documents(frame["abstract"].tolist())
                builder = Builder(features, aspect_prototypes(aspect_set, self.aspects, cache.vectors), cache)
                truths = {f: same_value(frame[f]) for f in self.aspects + [NUISANCE]}
                self.corpora[style, seed] = (builder, truths, {f: ceiling(frame[f], seed) for f in self.aspects})
        self.columns = [f"{s} {a}" for s in styles for a in self.aspects]
        self.memo: dict = {}

    def raw(self, split: str, spec) -> dict:
        """{(style, seed): {factor: spearman of the aspect's head on its own factor, and 'drug': the most any head
        follows the drug}}."""
        if (split, spec) not in self.memo:
            self.memo[split, spec] = self._raw(split, spec)
        return self.memo[split, spec]

    def _raw(self, split: str, spec) -> dict:
        out = {}
        for (style, seed), (builder, truths, _) in self.corpora.items():
            if seed not in self.splits[split]:
                continue
            emb = builder.embed(spec)
            everywhere = np.ones(len(truths[NUISANCE]), bool)
            row = {a: spearman_on(emb[a], truths[a], everywhere) for a in self.aspects}
            row[NUISANCE] = max(spearman_on(emb[a], truths[NUISANCE], everywhere) for a in self.aspects)
            out[style, seed] = row
        return out

    def score(self, split: str, spec) -> dict[str, float]:
        """{"<style> <aspect>": the worst seed's Spearman on its own factor} (one seed on the choosing split)."""
        raw = self.raw(split, spec)
        return {f"{s} {a}": min(r[a] for (st, _), r in raw.items() if st == s) for s in self.styles
                for a in self.aspects}

    def nuisance(self, split: str, spec) -> float:
        return max(r[NUISANCE] for r in self.raw(split, spec).values())

    def shares(self, split: str, spec) -> dict[str, float]:
        """{"<style> <aspect>": the worst seed's share of the ceiling, %}."""
        raw = self.raw(split, spec)
        return {f"{s} {a}": min(100 * r[a] / self.corpora[st, seed][2][a] for (st, seed), r in raw.items()
                                if st == s) for s in self.styles for a in self.aspects}

    mean = staticmethod(RealFamily.mean)


# ---------------------------------------------------------------------------------------------- tables

def ablation_rows(family) -> list:
    """The rows of a family's ablation table."""
    rows = [WHOLE] + ([POSITIONAL] if isinstance(family, RealFamily) else []) + [SENTENCE_MEAN, LEAN, TODAY]
    rows += [toggled(TODAY, s) for s in STEPS if s not in PARTS] + [replace(TODAY, **{s: False}) for s in PARTS]
    rows += [TODAY.with_step(s) for s in NEW_STEPS]
    rows += [replace(LEAN, temperature=t) for t in TEMPERATURES if t != LEAN.temperature]
    rows += [LEAN.with_step(s) for s in STEPS if s not in PARTS]
    rows += [LEAN.with_step(s) for s in NEW_STEPS if getattr(LEAN, ACTS_ONLY_WITH.get(s, s), True)]
    rows += [replace(LEAN, mixture=True, prior_bins=1), replace(LEAN, mixture=True, prior_bins=10),
             replace(LEAN, mixture=True, sharpness=True)]
    rows += [replace(LEAN, mixture=True, temperature=t) for t in TEMPERATURES if t != LEAN.temperature]
    return rows


def row_label(spec) -> str:
    if spec in (WHOLE, POSITIONAL, SENTENCE_MEAN, LEAN, TODAY):
        return f"**{name_of(spec)}**"
    for s in STEPS:
        if s not in PARTS and spec == toggled(TODAY, s):
            return f"today's {'+' if getattr(spec, s) else '-'} {s}"
    for part, whole in PARTS.items():
        if spec == replace(TODAY, **{part: False}):
            return f"today's - {part} (of the {whole})"
    return name_of(spec)


def print_table(family, split: str, rows, reference=LEAN) -> dict:
    """A markdown table of `rows` on a split: per column, the mean and its difference from `reference`."""
    scores = {spec: family.score(split, spec) for spec in rows}
    ref = family.mean(scores[reference]) if reference in scores else family.mean(family.score(split, reference))
    extra = " | drug (most) |" if isinstance(family, SyntheticFamily) else " |"
    print("| embedding | " + " | ".join(family.columns) + " | mean | vs lean" + extra)
    print("|---|" + "---:|" * (len(family.columns) + 2 + (isinstance(family, SyntheticFamily))))
    for spec in rows:
        s = scores[spec]
        m = family.mean(s)
        tail = f" | {family.nuisance(split, spec):.1f} |" if isinstance(family, SyntheticFamily) else " |"
        print(f"| {row_label(spec)} | " + " | ".join(f"{s[c]:.1f}" for c in family.columns)
              + f" | {m:.1f} | {m - ref:+.1f}" + tail)
    return scores


def micro_prf(pred, truth) -> tuple[float, float, float]:
    tp = fp = fn = 0
    for p, t in zip(pred, truth):
        p, t = np.asarray(p, bool), np.asarray(t, bool)
        tp += int((p & t).sum())
        fp += int((p & ~t).sum())
        fn += int((~p & t).sum())
    pr, rc = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
    return pr, rc, 2 * pr * rc / max(pr + rc, 1e-9)


def mark_sets(family: RealFamily, split: str, chosen: Floor) -> dict:
    """{method: {aspect: per paper its marked sentences}} on a split's papers."""
    b, rows, A = family.builder, family.splits[split], family.aspects
    feats = b.features.subset(rows)
    today = sentence_marks(feats, b.pooling_scorer(TODAY), boilerplate=b.boiler(TODAY))
    out = {"aspect file's marks (today's floor, stage 03)": {a: [np.asarray(d[a]) > 0 for d in today] for a in A}}
    lean_w = [b.weights(LEAN)[i] for i in rows]
    out["lean floor's stating sentences"] = {a: [stating(w[a]) for w in lean_w] for a in A}
    prior_f = replace(LEAN, prior=True)
    prior_w = [b.weights(prior_f)[i] for i in rows]
    out["lean + prior's stating sentences"] = {a: [stating(w[a]) for w in prior_w] for a in A}
    if chosen not in (LEAN, prior_f, TODAY):
        chosen_w = [b.weights(chosen)[i] for i in rows]
        out[f"{name_of(chosen)}'s stating sentences"] = {a: [stating(w[a]) for w in chosen_w] for a in A}
    n = [len(s) for s in feats.sentences]
    out["position rule"] = {a: [position_masks(k)[a] if a in position_masks(1) else np.zeros(k, bool) for k in n]
                            for a in A}
    protos = b.prototypes(LEAN)
    theta = b.scorer(prior_f).position
    theta = np.zeros((len(A), 3), np.float32) if theta is None else theta
    argmax, prior_argmax = {a: [] for a in A}, {a: [] for a in A}
    for s in feats.sentences:
        k = len(s)
        cos = unit_rows(np.asarray(s, np.float32)) @ protos.prototypes.T if k else np.zeros((0, len(A)))
        top = cos.argmax(1) if k else np.zeros(0, int)
        post = (protos.scores(s) / LEAN.temperature + position_features(k) @ theta.T).argmax(1) \
            if k else np.zeros(0, int)
        for j, a in enumerate(A):
            argmax[a].append(top == j)
            prior_argmax[a].append(post == j)
    out["prototype argmax"] = argmax
    out["prototype + prior argmax"] = prior_argmax
    for spec in dict.fromkeys([replace(LEAN, mixture=True), replace(LEAN, mixture=True, temperature=chosen.temperature,
                                                                    prior_bins=chosen.prior_bins)]):
        fitted = mixture_posteriors(b.features, b.scorer(spec), spec.temperature, b.boiler(spec), spec.prior_bins,
                                    spec.sharpness)
        if fitted is None:
            continue
        post = fitted[1]
        out[f"{name_of(spec)}: argmax of the posterior"] = {
            a: [(post[i].argmax(1) == j) if len(post[i]) else np.zeros(0, bool) for i in rows]
            for j, a in enumerate(A)}
    out["every sentence"] = {a: [np.ones(k, bool) for k in n] for a in A}
    return out


def print_role_weights(family: RealFamily, split: str, specs: dict) -> None:
    """Where each head puts its pooling weight, by the role people gave the sentence (`family.roles`), on a split's
    papers: per head the mean over papers of the weight's share on each role (sentences no role matched aside), beside
    the matched sentences' own shares."""
    rows, feats = family.splits[split], family.builder.features
    names = list(family.roles)
    role_of = []  # per paper, each of the workbench's sentences' role index (-1: none matched)
    for i in rows:
        which = np.full(len(feats.sentence_texts[i]), -1)
        for k, r in enumerate(names):
            if family.roles[r][i]:
                hit = np.asarray(match_highlights(feats.sentence_texts[i], family.roles[r][i])) >= 0.5
                which[hit & (which < 0)] = k
        role_of.append(which)
    shares = np.bincount(np.concatenate(role_of + [np.zeros(0, int)]) + 1, minlength=len(names) + 1)[1:]
    print("| pooling weight on | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    print("| the sentences' own shares | " + " | ".join(f"{v:.2f}" for v in shares / max(shares.sum(), 1)) + " |")
    for label, spec in specs.items():
        weights = family.builder.weights(spec)
        for a in family.aspects:
            total = np.zeros(len(names))
            for i, which in zip(rows, role_of):
                w = np.asarray(weights[i][a], np.float64)
                if w.sum() > 0:
                    total += [w[which == k].sum() / w.sum() for k in range(len(names))]
            print(f"| {label}, {a} | " + " | ".join(f"{v:.2f}" for v in total / len(rows)) + " |")


def weight_spread(family: RealFamily, spec: Floor) -> dict[str, float]:
    """{aspect: the mean over the corpus's abstracts (two sentences or more) of 1 / the sum of the squared shares of
    the head's pooling weights, as a share of the abstract's sentences}: 1 is the sentences' plain mean. No label."""
    return {a: float(np.mean([1 / np.sum((w[a] / w[a].sum()) ** 2) / len(w[a]) for w in family.builder.weights(spec)
                              if len(w[a]) > 1 and w[a].sum() > 0])) for a in family.aspects}


def print_marks(family: RealFamily, split: str, chosen: Floor) -> None:
    A = family.aspects
    print("| marks | " + " | ".join(f"{a} P / R / F1" for a in A) + " |")
    print("|---|" + "---:|" * len(A))
    for method, marks in mark_sets(family, split, chosen).items():
        cells = []
        for a in A:
            p, r, f = micro_prf(marks[a], family.marks[split, a])
            cells.append(f"{p:.2f} / {r:.2f} / **{f:.2f}**")
        print(f"| {method} | " + " | ".join(cells) + " |")


def step_names(spec: Floor) -> list[str]:
    """The steps a floor can take or leave: every step, a part (`PARTS`) only where the floor takes its whole."""
    return [s for s in STEPS + NEW_STEPS if s not in PARTS or getattr(spec, PARTS[s])]


def toggled(spec: Floor, step: str) -> Floor:
    """The floor with the step switched: taken away where it has it, added where it has not."""
    return spec.with_step(step, not getattr(spec, step))


def step_gain(family, split: str, spec: Floor, step: str) -> float:
    """What the step adds to the floor's mean: with it less without it (whichever the floor has)."""
    other = toggled(spec, step)
    with_, without = (spec, other) if getattr(spec, step) else (other, spec)
    return family.mean(family.score(split, with_)) - family.mean(family.score(split, without))


def adds(gains) -> bool:
    """Whether a step adds: on every family where it acts, and it acts somewhere. A step gated by what it reads
    from the corpus (phrases, mixture) changes nothing, to the last digit, where its gate is off."""
    acting = [g for g in gains if abs(g) > SILENT]
    return bool(acting) and all(g > 0 for g in acting)


def choose(families: list, start: Floor, split: str = "choose") -> tuple[Floor, dict]:
    """What the `families`' choosing splits pick, from `start` (the lean floor: forward; today's: backward): first
    the temperature (the largest summed mean), then every step is kept where it adds on every family given (from
    `start`, switched alone) and left out elsewhere, then
    the constants of the floor that gives (temperature; the prior's bins and estimates) by its summed mean."""
    total = lambda spec: sum(f.mean(f.score(split, spec)) for f in families)  # noqa: E731
    base = max((replace(start, temperature=t) for t in TEMPERATURES),
               key=lambda spec: (round(total(spec), 6), spec.temperature == start.temperature))
    deltas = {s: {f.name: step_gain(f, split, base, s) for f in families} for s in step_names(base)}
    passed = [s for s, d in deltas.items() if adds(d.values())]
    kept = replace(base, **{s: s in passed for s in deltas})
    grid = [replace(kept, temperature=x) for x in TEMPERATURES]
    if kept.mixture:
        grid = [replace(g, prior_bins=b) for g in grid for b in MIXTURE_BINS]
    kept = max(grid, key=lambda spec: (round(total(spec), 6), spec == kept))
    return kept, {"deltas": deltas}


def constants(spec: Floor) -> str:
    out = f"t {spec.temperature:g}" if not spec.calibrate else "(calibrated: no t)"
    if spec.mixture:
        out += f", mixture {spec.prior_bins} bins"
    return out


def leave_one_out(families: list, start: Floor, title: str) -> tuple[Floor, dict]:
    """Per held-out family: what the other two choose from `start`, and the held-out family's reporting figures;
    returns the floor of the steps that hold in every fold (kept by the choosing families and adding on the held-out
    one, each fold), with the constants every fold chose, and the verdicts."""
    print(f"\n## Leave one family out, {title}\n")
    print(f"From {name_of(start)}, chosen on the other two families' choosing splits: the temperature first (the "
          "largest summed mean), then each step kept where, switched alone, it adds to the mean on both (where it "
          "acts), then the constants; reported on the held-out family's reporting split (mean over its columns). Gains on the two "
          "choosing families in brackets.\n")
    print("| held out | constants | steps kept | steps left out | MiniLM whole | lean | chosen floor | today's floor |")
    print("|---|---|---|---|---:|---:|---:|---:|")
    verdicts = {}
    for held in families:
        others = [f for f in families if f is not held]
        chosen, info = choose(others, start)
        names = step_names(chosen)
        kept = [s for s in names if getattr(chosen, s)]
        left = [s for s in names if not getattr(chosen, s)]
        on_held = {s: step_gain(held, "report", chosen, s) for s in names}
        verdicts[held.name] = {"chosen": chosen, "kept": kept, "on_held": on_held, "deltas": info["deltas"]}
        fmt = lambda s: f"{s} (" + ", ".join(f"{v:+.1f}" for v in info["deltas"].get(s, {}).values()) + ")"  # noqa
        m = lambda spec: held.mean(held.score("report", spec))  # noqa: E731
        print(f"| {held.name} | {constants(chosen)} | {'; '.join(fmt(s) for s in kept) or 'none'} | "
              f"{'; '.join(fmt(s) for s in left) or 'none'} | {m(WHOLE):.1f} | {m(LEAN):.1f} | {m(chosen):.1f} | "
              f"{m(TODAY):.1f} |")
    print("\nWhat each step adds on each held-out family's reporting split, in that fold's chosen floor (with the step "
          "less without it), mean Spearman x100:\n")
    names = [f.name for f in families]
    print("| step | " + " | ".join(f"{n} held out" for n in names) + " | holds in every fold |")
    print("|---|" + "---|" * (len(names) + 1))
    holding = []
    for s in [x for x in STEPS + NEW_STEPS]:
        cells, holds = [], True
        for n in names:
            v = verdicts[n]
            d = v["on_held"].get(s)
            cells.append("n/a" if d is None else f"{'kept' if s in v['kept'] else 'left out'}, {d:+.2f}")
            holds &= d is not None and s in v["kept"]
        holds = holds and adds(v["on_held"][s] for v in verdicts.values())
        if holds:
            holding.append(s)
        print(f"| {s} | " + " | ".join(cells) + f" | {'yes' if holds else 'no'} |")
    final = replace(LEAN, **{s: s in holding for s in STEPS + NEW_STEPS if s not in PARTS})
    for part, whole in PARTS.items():
        if getattr(final, whole):
            final = replace(final, **{part: part in holding})
    for const in ("temperature", "prior_bins"):  # a constant every fold chose
        values = {getattr(v["chosen"], const) for v in verdicts.values()}
        if len(values) == 1:
            final = replace(final, **{const: values.pop()})
    print(f"\nThe floor of the steps that hold in every fold ({title}): **{name_of(final)}**")
    return final, verdicts


def load_families(args, caches) -> list:
    t0 = time.perf_counter()
    acl = load_aspects("acl")
    frame = csabstruct.load()
    if args.csab_docs:
        frame = frame.groupby("split", sort=False).head(args.csab_docs).reset_index(drop=True)
    human = {a: [[s for s, r in zip(ss, rr) if r in csabstruct.ASPECT_ROLES[a]]
                 for ss, rr in zip(frame["sentences"], frame["roles"])] for a in acl.names}
    rows = {"choose": np.flatnonzero(frame["split"] == "dev"), "report": np.flatnonzero(frame["split"] == "test")}
    roles = {r: [[s for s, x in zip(ss, rr) if x == r] for ss, rr in zip(frame["sentences"], frame["roles"])]
             for r in ("background", "objective", "method", "result", "other")}
    csab = RealFamily("CSAbstruct", frame["abstract"].tolist(), human, rows, acl, caches, roles=roles)
    print(f"CSAbstruct: {len(frame)} abstracts the corpus, {len(rows['choose'])} dev papers choose, "
          f"{len(rows['report'])} test papers report ({time.perf_counter() - t0:.0f} s)")
    t0 = time.perf_counter()
    corpus = load_corpus(args.aclsum)
    docs = corpus.docs.reset_index(drop=True)
    listed = lambda v: [str(s) for s in v] if isinstance(v, (list, tuple, np.ndarray)) else []  # noqa: E731
    human = {a: [listed(v) for v in docs[f"highlights_{a}"]] for a in acl.names}
    summaries = {a: docs[f"summary_{a}"].tolist() for a in acl.names}
    rows = {"choose": np.flatnonzero(docs["split"] == "validation"), "report": np.flatnonzero(docs["split"] == "test")}
    aclsum = RealFamily("ACLSum", corpus.texts(), human, rows, acl, caches, summaries)
    print(f"ACLSum ({args.aclsum}): {len(docs)} papers the corpus, {len(rows['choose'])} validation papers choose, "
          f"{len(rows['report'])} test papers report ({time.perf_counter() - t0:.0f} s)")
    t0 = time.perf_counter()
    synthetic = SyntheticFamily(args.styles, args.seeds, args.synthetic_docs, caches)
    print(f"synthetic: generators {', '.join(args.styles)}, {args.synthetic_docs} papers per corpus, seed "
          f"{args.seeds[0]} chooses, seeds {', '.join(map(str, args.seeds[1:]))} report (worst seed) "
          f"({time.perf_counter() - t0:.0f} s)")
    return [csab, aclsum, synthetic]


def check_against_floor_heads(family: RealFamily | SyntheticFamily) -> float:
    """The largest difference between this script's today's floor and `aspect_file.floor_heads`' "phrases" (stage 03's
    floor) on one corpus: the composition here must be the same floor."""
    builder = family.builder if isinstance(family, RealFamily) else next(iter(family.corpora.values()))[0]
    heads, _ = floor_heads(builder.features, builder.raw, builder.phrase_cache)
    mine = builder.embed(TODAY)
    return max(float(np.abs(heads["phrases"][a] - mine[a]).max()) for a in builder.aspects)


def main(argv=None) -> None:
    global TRUTH_ENCODERS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", default=None,
                        help="folder of encoder vectors kept between runs (default: a temporary one)")
    parser.add_argument("--csab-docs", type=int, default=None, help="CSAbstruct papers per split (default: all)")
    parser.add_argument("--aclsum", default="aclsum", help="the ACLSum corpus (a load_corpus spec)")
    parser.add_argument("--synthetic-docs", type=int, default=150, help="papers per synthetic corpus")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3],
                        help="synthetic seeds: the first chooses, the others report")
    parser.add_argument("--styles", nargs="+", default=["a", "b"])
    parser.add_argument("--permutations", type=int, default=200, help="A.6 permutations on ACLSum's test papers")
    parser.add_argument("--truths", nargs="+", default=list(TRUTH_ENCODERS),
                        help="the encoders that pool the human-marked sentences and read the summaries")
    add_smoke(parser, argv, csab_docs=4, aclsum="aclsum:train[:2],validation[:4],test[:4]", synthetic_docs=10,
              seeds=[0, 1], permutations=10, truths=["minilm"])
    args = parser.parse_args(argv)
    TRUTH_ENCODERS = tuple(args.truths)
    start = time.perf_counter()
    folder = None
    if args.cache is None:
        folder = tempfile.TemporaryDirectory(prefix="families-")  # removed when the script ends
    root = Path(args.cache or folder.name)
    # Smoke mode: hashed word vectors in place of the encoders (every code path, no model to load).
    encoder = (lambda name: HashedBackbone()) if args.smoke else FrozenBackbone
    caches = {enc: FeatureCache(root / enc, encoder(enc)) for enc in ("minilm",) + TRUTH_ENCODERS}
    print(f"# Aspect-file floors across families\n\nmatrix product: {matmul_gflops():.0f} GFLOP/s "
          "(1600 x 768 @ 768 x 3072 fp32, torch)\n")
    families = load_families(args, caches)
    print("\nToday's floor here against `aspect_file.floor_heads`' (largest difference of a coordinate): "
          + ", ".join(f"{f.name} {check_against_floor_heads(f):.1e}" for f in families[1:]))

    for family in families:
        print(f"\n## {family.name}: reporting split\n")
        if isinstance(family, SyntheticFamily):
            print("Worst of the reporting seeds, per generator and aspect, Spearman x100 against 'same value' of its "
                  "factor; drug: the most any head follows the nuisance.\n")
        else:
            print("Mean per-paper Spearman x100 against the human-marked sentences pooled by MiniLM and by mpnet.\n")
        print_table(family, "report", ablation_rows(family))
        print(f"\n{family.name}, choosing split (means only):\n")
        print("| embedding | mean | vs lean |")
        print("|---|---:|---:|")
        ref = family.mean(family.score("choose", LEAN))
        for spec in ablation_rows(family):
            m = family.mean(family.score("choose", spec))
            print(f"| {row_label(spec)} | {m:.1f} | {m - ref:+.1f} |")
        b = family.builder if isinstance(family, RealFamily) else next(iter(family.corpora.values()))[0]
        corpora = [(b, "")] if isinstance(family, RealFamily) else \
            [(c[0], f" (generator {k[0]}, seed {k[1]})") for k, c in family.corpora.items()
             if k[1] == family.splits["choose"][0]]
        for b, where in corpora:
            for name, spec in (("lean floor", replace(LEAN, prior=True)), ("today's floor", TODAY.with_step("prior"))):
                theta = b.scorer(spec).position
                print(f"\nposition prior read from the corpus{where} by the {name} (relative position, first, "
                      "last): " + ("none" if theta is None else "; ".join(
                          f"{a} " + " ".join(f"{x:+.2f}" for x in theta[j]) for j, a in enumerate(b.aspects))))
            mixture = b.mixture(TODAY)
            print(f"today's floor's position mixture, its densities over {PRIOR_BINS} bins: " + (
                "not taken" if mixture is None else "; ".join(
                    f"{a} " + " ".join(f"{r:.2f}" for r in np.exp(mixture.log_density[j]))
                    for j, a in enumerate(b.aspects))))
        print("today's floor's blends: " + ", ".join(f"{a} {v:.2f}" for a, v in b.blends(TODAY).items())
              + "; phrases' shares: " + ", ".join(f"{a} {v:.2f}" for a, v in b.shares(TODAY).items()))

    forward, _ = leave_one_out(families, LEAN, "forward: the lean floor with steps added")
    backward, _ = leave_one_out(families, TODAY, "backward: today's floor with steps taken away or added")
    csab, aclsum, synthetic = families
    for family in (csab, aclsum):
        print(f"\n## {family.name}: sentence marks against the human ones (reporting split, micro)\n")
        print_marks(family, "report", forward)
    print(f"\n## {csab.name}: where the heads put their weight, by the sentence's human role (reporting split)\n")
    print_role_weights(csab, "report", {"today's floor": TODAY, "prototype probe": LEAN})
    for family in (csab, aclsum):
        print(f"\n{family.name}, today's floor: each head's weights spread over (1 / the sum of their squared shares, "
              "a share of the abstract's sentences, mean over the corpus) "
              + ", ".join(f"{a} {v:.2f}" for a, v in weight_spread(family, TODAY).items()))
    heads = list(dict.fromkeys([LEAN, TODAY, forward, backward, replace(LEAN, prior=True),
                                replace(LEAN, mixture=True, temperature=0.12), TODAY.with_step("prior"),
                                TODAY.with_step("mixture", False), TODAY.with_step("sentence_blend")]))
    print_bars(csab, aclsum, synthetic, heads, args.permutations)
    print(f"\nmatrix product at the end: {matmul_gflops():.0f} GFLOP/s; {time.perf_counter() - start:.0f} s in all")


def print_bars(csab: RealFamily, aclsum: RealFamily, synthetic: SyntheticFamily, heads: list, permutations: int):
    """Issue 39's bars on each family's reporting split, for the floors in `heads`."""
    A = csab.aspects
    print("\n## Bars, CSAbstruct test papers\n")
    print("Per head, MiniLM / mpnet truth; a head passes where, with both truths, it is at least 5 points above "
          "MiniLM's whole abstract (+5), at or above the prototype probe (probe) and at or above position pooling "
          "(pos).\n")
    print("| floor | " + " | ".join(A) + " | heads passing all three |")
    print("|---|" + "---|" * (len(A) + 1))
    whole, probe, pos = (csab.score("report", x) for x in (WHOLE, LEAN, POSITIONAL))
    for spec in [WHOLE, POSITIONAL] + heads:
        sc = csab.score("report", spec)
        cells, passing = [], 0
        for a in A:
            cols = [f"{a} {e}" for e in TRUTH_ENCODERS]
            ok = {"+5": all(sc[c] >= whole[c] + 5 for c in cols), "probe": all(sc[c] >= probe[c] for c in cols),
                  "pos": all(sc[c] >= pos[c] for c in cols)}
            passing += all(ok.values())
            cells.append(" / ".join(f"{sc[c]:.1f}" for c in cols) + " (" +
                         ", ".join(k for k, v in ok.items() if v) + ")" if isinstance(spec, Floor) else
                         " / ".join(f"{sc[c]:.1f}" for c in cols))
        print(f"| {row_label(spec)} | " + " | ".join(cells) + f" | {passing if isinstance(spec, Floor) else ''} |")
    print("\n## Bars, ACLSum test papers\n")
    print("Gain over MiniLM's whole abstract on the head's own aspect, pooled highlights and Table 2's human "
          f"summaries, each read by MiniLM / mpnet; A.6 p-values ({permutations} permutations) in brackets. Bar: "
          "approach and outcome at least +3 with both encoders (p < 0.05), challenge no lower than today's.\n")
    print("| floor | truth | " + " | ".join(A) + " |")
    print("|---|---|" + "---|" * len(A))
    rows = aclsum.splits["report"]
    cos = lambda v: unit_rows(np.asarray(v, np.float64)) @ unit_rows(np.asarray(v, np.float64)).T  # noqa: E731
    base = aclsum.builder.embed(WHOLE)
    for spec in heads:
        emb = aclsum.builder.embed(spec)
        for truth, table in (("highlights", aclsum.truths), ("summaries", aclsum.summary)):
            cells = []
            for a in A:
                parts = []
                for enc in TRUTH_ENCODERS:
                    key = ("report", a, enc)
                    if key not in table:
                        parts.append("n/a")
                        continue
                    sim, has = table[key]
                    idx = rows[has]
                    t = permutation_test(cos(emb[a][idx]), cos(base[a][idx]), sim[np.ix_(has, has)], permutations, 0)
                    parts.append(f"{100 * t['observed_difference']:+.1f} ({t['p_value']:.3f})")
                cells.append(" / ".join(parts))
            print(f"| {row_label(spec)} | {truth} | " + " | ".join(cells) + " |")
    print("\n## Bars, synthetic (reporting seeds)\n")
    print("Share of the ceiling, worst reporting seed (%), and the difference from today's floor (bar: within 2 "
          "points); drug: the most any head follows the nuisance.\n")
    print("| floor | " + " | ".join(synthetic.columns) + " | drug |")
    print("|---|" + "---|" * (len(synthetic.columns) + 1))
    today = synthetic.shares("report", TODAY)
    for spec in [WHOLE] + heads:
        sh = synthetic.shares("report", spec)
        print(f"| {row_label(spec)} | "
              + " | ".join(f"{sh[c]:.1f} ({sh[c] - today[c]:+.1f})" for c in synthetic.columns)
              + f" | {synthetic.nuisance('report', spec):.1f} |")

if __name__ == "__main__":
    main()
