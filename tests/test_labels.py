"""Short region labels: term coverage against a hand count, and the label rules (aspect, length, unique)."""

import numpy as np
import pytest

from workbench.maps.labels import MAX_CHARS, coverage, paper_terms, region_term_labels, term_matrix


def test_coverage_and_terms_match_a_hand_count():
    texts = ["Alien plants spread; alien plants.", "native birds sing", "alien birds", "The plants"]
    regions = np.array([0, 0, 1, 1])
    assert sorted(paper_terms(texts[0])) == ["alien", "alien plants", "plants", "plants spread", "spread"]
    assert paper_terms("the of and") == [] and paper_terms(None) == []
    matrix, terms = term_matrix(texts)
    cover, overall = coverage(matrix, regions, [0, 1])
    for j, t in enumerate(terms):  # a term counts once per paper, however often it comes
        has = np.array([t in paper_terms(x) for x in texts])
        np.testing.assert_allclose(cover[:, j], [has[:2].mean(), has[2:].mean()], err_msg=t)
        assert overall[j] == has.mean()


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
