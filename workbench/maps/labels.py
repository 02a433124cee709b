"""Stage 05: region labels that name what a region's papers share: terms many of them use, more than the map does.

A term labels a region when it occurs in at least `min_coverage` (25%) of the region's papers
(its coverage) and in a larger share of them than of all the map's papers (its lift, region
coverage over map coverage, at least `min_lift`). Among those, terms rank by coverage x lift:
a word a third of the region uses beats two rare ones ("spam, moocs": 15% and 5% of the region).
Where no term reaches `min_coverage` the label says so, "mixed (spam 15%)": the best term with
its share. Terms are words and contiguous two-word phrases without an English stop word, counted
once per paper; a phrase replaces its word where it covers `phrase_share` of the word's papers.

A label names its aspect ("approach: translation, bilingual") only where its terms come from
that aspect's text, the sentences of each paper that state the aspect or its summary
(`aspect_texts`), and then each term reaches `min_coverage` both there and in the abstracts. A
region whose aspect text gives no such term is labelled from its abstracts, without an aspect.
Labels differ from region to region (a tie takes the next term, then the region's number).

Words of research writing that name no topic ("propose", "results", "et al", GENERIC) are stop
words here. `term_labels` and `question_labels` label an `Explorer`'s map by its numbered regions
(`mapview.MapRegions`), or their sub-regions ("3.2").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..data.sentences import split_sentences
from ..generate.sentence_labels import SENTENCE_LABELS
from ..measures.health import corpus_sentence_aspects
from .mapview import region_order
from .readout import kind_words

MAX_CHARS = 60
# Words of research writing that name no topic: a region "shares" them only by chance. Treated as stop words.
GENERIC = frozenset("""
use uses used using propose proposes proposed present presents presented paper papers work works approach
approaches method methods challenge challenges outcome outcomes show shows showed shown result results based
new novel problem problems task tasks allow allows allowed better best demonstrate demonstrates demonstrated
achieve achieves achieved existing study studies performance improve improves improved improvement provide
provides provided different various effective effectively efficient important introduce introduces introduced
evaluate evaluated compared compare significantly significant large small high low able given way ways
et al state-of-the-art showing capable model models set sets elsevier springer ieee acm copyright rights reserved
""".split())
SUFFIXES = ("ations", "ation", "ings", "ing", "ers", "er", "ies", "es", "s", "ed")  # for `stem`
PIECE = re.compile(r"[^\W\d_][\w-]+|\d[\w-]*|\S")  # a word, a number, or any other single character


@dataclass(frozen=True)
class LabelRules:
    """What a region label must satisfy (see the module docstring)."""

    min_coverage: float = 0.25  # share of the region's papers a term must occur in
    min_lift: float = 1.5  # how many times the map's share of papers with the term the region's share must be
    min_papers: int = 2  # papers of the region a term must occur in (in a region of 4, one is not a share)
    min_terms: int = 2  # a label stops at this many terms once it differs from the others
    max_terms: int = 3
    max_chars: int = MAX_CHARS
    phrase_share: float = 0.6  # a phrase replaces its word where it covers this share of the word's papers


@dataclass
class RegionTerms:
    """One region's label: its terms, the share of the region's papers with each, and where they came from."""

    region: object  # its number (3) or, for a sub-region, its name ("3.2")
    size: int  # papers in the region
    terms: list[str] = field(default_factory=list)
    shares: list[float] = field(default_factory=list)  # coverage of each term in the texts it came from
    aspect: str | None = None  # the aspect whose texts gave the terms; None: the abstracts
    mixed: bool = False  # no term reached the coverage; terms[0] (if any) is the best one below it
    text: str = ""  # the label

    def detail(self) -> str:
        """One sentence a reader can check: each term with the share of the region's papers that have it."""
        where = f"{self.aspect} statements" if self.aspect else "abstracts"
        shares = ", ".join(f"{t} {s:.0%}" for t, s in zip(self.terms, self.shares))
        if self.mixed:
            best = f"; the most shared distinctive term: {shares}" if self.terms else ""
            return f"no distinctive term is in a quarter of its {self.size} papers' {where}{best}"
        return f"{shares} of its {self.size} papers' {where}"


@functools.lru_cache(maxsize=1)
def stop_words() -> frozenset:
    """English stop words (scikit-learn's) and GENERIC: words no label names."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # lazy: scikit-learn

    return frozenset(ENGLISH_STOP_WORDS) | GENERIC


def stem(word: str) -> str:
    """A crude stem, enough to tell that two words of a label are one: "parsing", "parser" -> "pars";
    "images" -> "imag"; "entities" -> "entity"."""
    for suffix in SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[:-len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def paper_terms(text) -> list[str]:
    """A text's terms, once each: its words and two-word phrases (contiguous, neither word a stop word).

    A word is a letter and one or more letters, digits, "_" or "-"; anything else between two words (a
    sign, a number, a one-letter word) ends a phrase, so no phrase runs across "; " or "(".
    """
    if not isinstance(text, str):
        return []
    stop = stop_words()
    pieces = PIECE.findall(text.lower())
    keep = [len(w) > 1 and not w[0].isdigit() and w not in stop for w in pieces]
    terms = {w for w, k in zip(pieces, keep) if k}
    terms.update(f"{a} {b}" for a, b, ka, kb in zip(pieces, pieces[1:], keep, keep[1:]) if ka and kb)
    return list(terms)


def term_matrix(texts: Sequence, vocabulary=None):
    """(binary sparse [papers, terms], terms): which paper has which term (`paper_terms`)."""
    from sklearn.feature_extraction.text import CountVectorizer

    texts = [t if isinstance(t, str) else "" for t in texts]
    vectorizer = CountVectorizer(analyzer=paper_terms, binary=True, vocabulary=vocabulary,
                                 min_df=1 if vocabulary is not None or len(texts) < 40 else 2)
    try:
        return vectorizer.fit_transform(texts).tocsc(), list(vectorizer.get_feature_names_out())
    except ValueError:  # no text has a term
        return None, []


def coverage(matrix, regions: np.ndarray, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """(share of each region's papers with each term [regions, terms], share of all papers with it [terms])."""
    member = np.stack([regions == g for g in ids]).astype(np.float64)
    sizes = member.sum(axis=1, keepdims=True)
    return np.asarray(matrix.T.dot(member.T)).T / np.maximum(sizes, 1.0), np.asarray(matrix.mean(axis=0)).ravel()


def _phrases(terms: list[str]) -> dict[str, list[int]]:
    """{word: indices of the phrases holding it}."""
    out: dict[str, list[int]] = {}
    for m, t in enumerate(terms):
        if " " in t:
            for word in t.split():
                out.setdefault(word, []).append(m)
    return out


def _pick(cover: np.ndarray, lift: np.ndarray, ok: np.ndarray, terms: list[str], phrases: dict, prefix: str,
          taken: set, rules: LabelRules) -> list[int]:
    """Indices of the terms of one label: the qualifying (`ok`) terms by coverage x lift, a phrase for its word
    where it covers most of the word's papers, no word twice, up to max_terms, stopping at min_terms once unique."""
    score = np.where(ok, cover * lift, -np.inf)
    chosen: list[int] = []
    for j in np.argsort(-score, kind="stable"):
        if not ok[j]:
            break
        options = [j]
        if " " not in terms[j]:  # "machine translation" says more than "translation" where most papers say both
            near = [m for m in phrases.get(terms[j], ()) if ok[m] and cover[m] >= rules.phrase_share * cover[j]]
            options = [max(near, key=lambda m: cover[m]), j] if near else options
        used = {stem(w) for c in chosen for w in terms[c].split()}  # not "parsing, parser" nor "image, images"
        options = [o for o in options if not {stem(w) for w in terms[o].split()} & used]
        if not options or len(prefix + ", ".join(terms[c] for c in chosen + options[:1])) > rules.max_chars:
            continue
        chosen.append(options[0])
        label = prefix + ", ".join(terms[c] for c in chosen)
        if len(chosen) >= rules.max_terms or (len(chosen) >= rules.min_terms and label not in taken):
            break
    return chosen


@dataclass
class _Source:
    """The texts one kind of label comes from, as coverage per region, lift, and which terms qualify."""

    cover: np.ndarray  # [regions, terms]
    lift: np.ndarray  # [regions, terms]
    ok: np.ndarray  # [regions, terms]: the term may stand in the label


def _source(matrix, regions, ids, rules: LabelRules, also: np.ndarray | None = None) -> _Source:
    """Coverage, lift and the qualifying terms of `matrix`; `also`: coverage the terms must reach as well."""
    cover, overall = coverage(matrix, regions, ids)
    lift = cover / np.maximum(overall, 1e-12)
    sizes = np.array([(regions == g).sum() for g in ids], dtype=np.float64)[:, None]
    ok = (cover >= rules.min_coverage) & (lift >= rules.min_lift) & (cover * sizes >= rules.min_papers - 1e-9)
    if also is not None:
        ok &= also >= rules.min_coverage
    return _Source(cover, lift, ok)


@dataclass
class TermIndex:
    """Which paper has which term, built once per corpus and aspect and reused for every map's regions."""

    terms: list[str]
    base: object  # binary sparse [papers, terms] of the abstracts (or, without them, of the texts)
    own: object = None  # the same for the texts of `own_aspect`, where labels may name that aspect
    aspect: str | None = None  # the aspect a label from `base` names (None where base holds the abstracts)
    phrases: dict = field(default_factory=dict)  # {word: indices of the phrases holding it}
    own_aspect: str | None = None


def term_index(texts: Sequence, aspect: str | None = None, abstracts: Sequence | None = None) -> TermIndex:
    """The `TermIndex` of `describe_regions`' texts, aspect and abstracts."""
    base, terms = term_matrix(abstracts if abstracts is not None else texts)
    stated = abstracts is not None and aspect is not None and any(isinstance(t, str) and t.strip() for t in texts)
    own = term_matrix(texts, vocabulary=terms)[0] if terms and stated else None
    return TermIndex(terms, base, own, aspect if abstracts is None else None, _phrases(terms),
                     aspect if own is not None else None)


def describe_regions(texts: Sequence, regions: Sequence, aspect: str | None = None,
                     abstracts: Sequence | None = None, rules: LabelRules = LabelRules()) -> dict:
    """{region: RegionTerms} for papers in `regions` (one id per paper: ints, or names such as "3.2").

    texts: each paper's text of `aspect` (None or "" where it has none), or, without an aspect, its own
    text. abstracts: each paper's abstract; with them, a term of an aspect label must reach the coverage in
    both, and a region the aspect texts cannot label is labelled from its abstracts, without the aspect.
    """
    return label_regions(term_index(texts, aspect, abstracts), regions, rules)


def label_regions(index: TermIndex, regions: Sequence, rules: LabelRules = LabelRules()) -> dict:
    """{region: RegionTerms} of one map's regions from a `TermIndex` (see `describe_regions`)."""
    regions = np.asarray(regions)
    ids = region_order(regions)
    terms, sources = index.terms, []
    if terms:
        base = _source(index.base, regions, ids, rules)
        if index.own is not None:
            sources.append((index.own_aspect, _source(index.own, regions, ids, rules, also=base.cover)))
        sources.append((index.aspect, base))
    out, taken = {}, set()
    for row, g in enumerate(ids):
        region = RegionTerms(g, int((regions == g).sum()), aspect=index.aspect)
        for name, src in sources:
            prefix = f"{name}: " if name else ""
            chosen = _pick(src.cover[row], src.lift[row], src.ok[row], terms, index.phrases, prefix, taken, rules)
            if chosen:
                region.terms, region.shares = [terms[c] for c in chosen], [float(src.cover[row, c]) for c in chosen]
                region.aspect, region.text = name, prefix + ", ".join(region.terms)
                break
        if not region.text:
            _mixed(region, sources[-1][1] if sources else None, row, terms, rules)
        if region.text in taken:  # still the same as another region's: say which region it is
            region.text = f"{region.text} (region {g})"[:rules.max_chars]
        taken.add(region.text)
        out[g] = region
    return out


def _mixed(region: RegionTerms, src: _Source | None, row: int, terms: list[str], rules: LabelRules) -> None:
    """Label a region no term covers: "mixed", with its best distinctive term and that term's share."""
    region.mixed = True
    prefix = f"{region.aspect}: " if region.aspect else ""
    region.text = prefix + "mixed"
    if src is None:
        return
    score = np.where(src.lift[row] >= rules.min_lift, src.cover[row] * src.lift[row], -np.inf)
    best = int(np.argmax(score)) if len(score) else -1
    if best >= 0 and np.isfinite(score[best]) and src.cover[row, best] > 0:
        region.terms, region.shares = [terms[best]], [float(src.cover[row, best])]
        text = f"{prefix}mixed ({terms[best]} {src.cover[row, best]:.0%})"
        region.text = text if len(text) <= rules.max_chars else region.text


def region_term_labels(texts: Sequence, regions: Sequence[int], aspect: str | None = None,
                       abstracts: Sequence | None = None, rules: LabelRules = LabelRules()) -> dict[int, str]:
    """{region: label} (see `describe_regions`)."""
    return {g: r.text for g, r in describe_regions(texts, regions, aspect, abstracts, rules).items()}


def aspect_texts(corpus, aspect: str, run_dir=None) -> list[str | None]:
    """Per paper, the text of `aspect` its labels may come from: the corpus's own summary of it (a person's,
    `summary_<aspect>`), else the abstract's sentences a person or stage 01 marked as stating it (highlights,
    LLM sentence labels), else None. LLM summaries are left out: they are not the paper's words."""
    docs = corpus.docs.reset_index(drop=True)
    column = f"summary_{aspect}"
    own = [v if isinstance(v, str) and v.strip() else None for v in docs[column]] if column in docs else \
        [None] * len(docs)
    marked = f"highlights_{aspect}" in docs or (run_dir is not None and Path(run_dir, SENTENCE_LABELS).exists())
    if all(v is not None for v in own) or not marked:
        return own
    marks = corpus_sentence_aspects(corpus, [aspect], run_dir)
    out = []
    for text, abstract, m in zip(own, corpus.texts(), marks):
        stating = [s for s, x in zip(split_sentences(abstract), m.get(aspect, ())) if x >= 0.5]
        out.append(text if text is not None else (" ".join(stating) or None))
    return out


def paper_texts(corpus) -> list[str]:
    """Per paper, the text its coverage is counted on: its abstract, or its title where it has no abstract."""
    return [a if a.strip() else t for a, t in zip(corpus.texts(), corpus.titles())]


# --------------------------------------------------------------------------- an Explorer's region labels


def term_labels(explorer, k: int = 8, words: int = 10, aspect: str | None = None, fine: bool = False) -> list[tuple]:
    """`Explorer.region_labels(by="terms")`: [(x, y, label, detail, number), ...] of the map's regions in number
    order (`Explorer.region_numbers`), each term with its share in the detail, then the region's nearest
    statement where the run has decoders (regions, not sub-regions). The papers' terms are indexed once per
    aspect (`explorer.term_indexes`): they do not change with the map."""
    aspect = aspect or max(explorer.weights, key=explorer.weights.get)
    if aspect not in explorer.term_indexes:
        explorer.term_indexes[aspect] = term_index(aspect_texts(explorer.corpus, aspect, explorer.run_dir), aspect,
                                                   paper_texts(explorer.corpus))
    groups = explorer.region_numbers(k, fine)
    described = label_regions(explorer.term_indexes[aspect], groups)
    nearest = explorer.region_labels(k, words, aspect, by="statements") if explorer.decoders is not None \
        and not fine else []
    out = []
    for i, (g, region) in enumerate(described.items()):
        x, y = explorer.coords[groups == g].mean(axis=0)
        detail = region.detail() + (f". Nearest statement: {nearest[i][3]}" if i < len(nearest) else "")
        out.append((float(x), float(y), region.text, detail, str(g)))
    return out


def question_labels(explorer, k: int = 8, words: int = 10, aspect: str | None = None, top: int = 3,
                    fine: bool = False) -> list[tuple]:
    """`Explorer.region_labels(by="questions")`: the map's regions (as `term_labels`) labelled by the questions
    most of their papers answer "yes".

    In one aspect with question axes (default: the most heavily weighted one that has
    them); [] when none has. The short text is the top question, the full text up to `top`
    questions with the share of the region's papers answering "yes" (`QuestionAxes.region_questions`).
    """
    axes, weights = explorer.question_axes(), explorer.weights
    ranked = [a for a in sorted(weights, key=weights.get, reverse=True) if a in axes and weights[a] > 0]
    aspect = aspect or (ranked[0] if ranked else None)
    if aspect is None:
        return []
    if aspect not in axes:
        raise ValueError(f"no question axes for {aspect!r}; there are for {sorted(axes)}")
    groups = explorer.region_numbers(k, fine)
    out = []
    for g in region_order(groups):
        members = groups == g
        x, y = explorer.coords[members].mean(axis=0)
        found = axes[aspect].region_questions(explorer.embeddings[aspect][members], top)
        if found:
            w = found[0][0].split()
            short = " ".join(w[:words]) + ("…" if len(w) > words else "")
            detail = f"{aspect}: " + "; ".join(f"{q} ({share:.0%} of its papers: yes)" for q, share in found)
        else:
            short = detail = f"{aspect}: no question that most of its papers answer yes"
        out.append((float(x), float(y), short, detail, str(g)))
    return out


def statement_labels(explorer, k: int = 8, words: int = 10, aspect: str | None = None, fine: bool = False) -> list:
    """The k regions labelled by a decoded statement each (`Explorer.region_labels`, by="statements"): the
    statement of a paper in the region nearest the mean embedding of its papers in one aspect (default: the most
    heavily weighted one), cut to `words` words; the full text says what it is (`readout.kind_words`: the paper
    it is from and its source, or generated)."""
    if explorer.decoders is None:
        return []
    aspect = aspect or max(explorer.weights, key=explorer.weights.get)
    decoder = explorer.decoders[aspect]
    groups = explorer.region_numbers(k, fine)
    ids = explorer.meta["doc_id"].astype(str).to_numpy()
    out, texts = [], []
    for g in region_order(groups):
        members = groups == g
        centre = explorer.coords[members].mean(axis=0)
        mean = explorer.embeddings[aspect][members].mean(axis=0)
        settings = {**explorer.sampling, "max_new_tokens": 32}
        # Only the region's own papers may speak for it (the others are excluded), unless
        # none of them has a known statement.
        found = decoder.statements(mean, exclude=[list(ids[~members])], **settings)[0]
        if decoder.names_sources and found["cosine"] == float("-inf"):
            found = decoder.statements(mean, **settings)[0]
        # Said what it is, as the readout says it: a known statement of one named paper (and its source), or
        # generated text.
        kind = kind_words({"kind": found.get("kind"), "from paper": found.get("doc_id"), "source": found.get("source")},
                          explorer.titles)
        texts.append((centre, found["text"], f"{found['text']} ({kind})", g))
    split = [t.split() for _, t, _, _ in texts]
    # Soft-prompt decodings often open with the same boilerplate ("The main challenge of the
    # paper is that ..."); drop the words every label shares at the start so the labels show
    # what tells the regions apart.
    common = 0
    while len(split) > 1 and all(len(w) > common + 1 for w in split) and \
            len({w[common].lower() for w in split}) == 1:
        common += 1
    for ((x, y), _, detail, g), w in zip(texts, split):
        rest = w[common:]
        short = ("…" if common else "") + " ".join(rest[:words]) + ("…" if len(rest) > words else "")
        out.append((float(x), float(y), short, detail, str(g)))
    return out
