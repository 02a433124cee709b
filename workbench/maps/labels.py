"""Stage 05: short region labels, the key phrases that set a region's own statements apart (class-based TF-IDF).

A region of the map is described by the few terms its papers' statements of one aspect use
far more than the other regions' do, as BERTopic names topics: the statements of each region
form one document, term frequencies are normalised per region and weighted by

    idf(t) = log(1 + mean words per region / frequency of t over all regions)

(c-TF-IDF). A term used by more than half of the regions scores nothing: it names none of
them. Unigrams and bigrams, English stop words left out; a unigram inside a chosen bigram is
not repeated, and no word comes twice in a label. Each label names its aspect, holds at least `min_terms` terms when the
region has them, stays within `max_chars`, and differs from every other region's label (a
tie takes the next term).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

MAX_CHARS = 60
MIN_TERMS = 2
MAX_TERMS = 3
PHRASE_SHARE = 0.6  # a two-word phrase replaces its word when it scores at least this share of it


def class_tfidf(region_texts: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(scores [regions, terms], terms): c-TF-IDF of one document per region."""
    from sklearn.feature_extraction.text import CountVectorizer  # lazy: scikit-learn

    vectorizer = CountVectorizer(ngram_range=(1, 2), stop_words="english", token_pattern=r"(?u)\b[a-zA-Z][\w-]+\b")
    try:
        counts = vectorizer.fit_transform(region_texts).toarray().astype(np.float64)
    except ValueError:  # nothing but stop words
        return np.zeros((len(region_texts), 0)), []
    tf = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    words_per_region = counts.sum() / max(len(region_texts), 1)
    idf = np.log(1.0 + words_per_region / np.maximum(counts.sum(axis=0), 1.0))
    scores = tf * idf
    # A term most regions use ("propose", "model") names none of them, however often it comes.
    if len(region_texts) > 2:
        scores[:, (counts > 0).sum(axis=0) > len(region_texts) / 2] = 0.0
    return scores, list(vectorizer.get_feature_names_out())


def _pick(scores: np.ndarray, terms: list[str], bigrams: dict[str, list[int]], taken: set, prefix: str,
          min_terms: int, max_terms: int, max_chars: int) -> str:
    """The best-scoring terms that fit: up to max_terms, stopping early once min_terms make a label not taken.

    bigrams: {word: indices of the two-word terms holding it}."""
    chosen: list[str] = []
    label = prefix.rstrip(": ")
    for j in np.argsort(-scores, kind="stable"):
        term = terms[j]
        if scores[j] <= 0:
            break
        options = [term]
        if " " not in term:  # a phrase that carries most of a word's weight says more: "named entity"
            phrases = [(scores[m], terms[m]) for m in bigrams.get(term, ()) if scores[m] >= PHRASE_SHARE * scores[j]]
            options = [max(phrases)[1], term] if phrases else options
        used = {w for c in chosen for w in c.split()}
        options = [o for o in options if not set(o.split()) & used]  # no word twice: "machine" in two phrases
        if not options:
            continue
        term = options[0]
        candidate = prefix + ", ".join(chosen + [term])
        if len(candidate) > max_chars:
            continue
        chosen, label = chosen + [term], candidate
        if len(chosen) >= max_terms or (len(chosen) >= min_terms and label not in taken):
            break
    return label


def region_term_labels(texts: Sequence[str], regions: Sequence[int], aspect: str | None = None,
                       min_terms: int = MIN_TERMS, max_terms: int = MAX_TERMS,
                       max_chars: int = MAX_CHARS) -> dict[int, str]:
    """{region: "aspect: term, term, term"} from each paper's statement (texts[i] in region regions[i])."""
    regions = np.asarray(regions)
    ids = list(np.unique(regions))
    joined = [" ".join(str(texts[i]) for i in np.flatnonzero(regions == g) if isinstance(texts[i], str))
              for g in ids]
    scores, terms = class_tfidf(joined)
    bigrams: dict[str, list[int]] = {}  # the same terms for every region: indexed once
    for m, t in enumerate(terms):
        if " " in t:
            for word in t.split():
                bigrams.setdefault(word, []).append(m)
    prefix = f"{aspect}: " if aspect else ""
    out, taken = {}, set()
    for row, g in enumerate(ids):
        label = _pick(scores[row], terms, bigrams, taken, prefix, min_terms, max_terms, max_chars) if terms else \
            prefix.rstrip(": ")
        if label in taken:  # still the same as another region's: say which region it is
            label = f"{label} ({int(g) + 1})"[:max_chars]
        taken.add(label)
        out[int(g)] = label
    return out
