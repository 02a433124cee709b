"""Short region labels: class-based TF-IDF against a hand computation, and the label rules (aspect, length, unique)."""

import numpy as np
import pytest

from workbench.maps.labels import MAX_CHARS, class_tfidf, region_term_labels


def test_class_tfidf_matches_the_formula():
    texts = ["alien plants spread alien plants", "native birds sing", "alien birds"]
    scores, terms = class_tfidf(texts)
    counts = {t: [doc.split().count(t) if " " not in t else doc.count(t) for doc in texts] for t in terms}
    totals = np.array([len(d.split()) + max(len(d.split()) - 1, 0) for d in texts], dtype=float)
    words_per_region = totals.sum() / len(texts)
    for j, t in enumerate(terms):
        c = np.array(counts[t], dtype=float)
        expected = c / totals * np.log(1 + words_per_region / c.sum())
        if (c > 0).sum() > len(texts) / 2:  # a term most regions use names none of them
            expected = np.zeros_like(expected)
        np.testing.assert_allclose(scores[:, j], expected, rtol=1e-9, err_msg=t)
    assert scores[:, terms.index("alien")].max() == 0 and scores[0, terms.index("plants")] > 0


def test_labels_name_the_aspect_and_set_regions_apart():
    texts = ["Invasive plants spread along river banks."] * 3 + ["Birds nest in native forest canopies."] * 3 + \
            ["Soil microbes change after fire."] * 3
    regions = [0] * 3 + [1] * 3 + [2] * 3
    labels = region_term_labels(texts, regions, aspect="habitat")
    assert set(labels) == {0, 1, 2} and len(set(labels.values())) == 3
    for g, label in labels.items():
        assert label.startswith("habitat: ") and len(label) <= MAX_CHARS
        assert len(label[len("habitat: "):].split(", ")) >= 2
    for g in range(3):  # each label's terms come from its own region's statements only
        own = texts[3 * g].lower()
        assert all(term in own for term in labels[g][len("habitat: "):].split(", ")), labels[g]


@pytest.mark.parametrize("texts", [["the and of"] * 4, [None, None, "", ""]])
def test_regions_without_words_still_get_distinct_labels(texts):
    labels = region_term_labels(texts, [0, 0, 1, 1], aspect="method")
    assert len(set(labels.values())) == 2 and all(v.startswith("method") for v in labels.values())
