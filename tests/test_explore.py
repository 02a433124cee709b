"""Explorer (workbench/explore.py): the map callbacks, on a run folder made of untrained models.

The untrained unified model and aspect models are real checkpoints (MiniLM with fresh 16-d
heads), so every path is the one a trained run takes; the numbers are checked against a
brute-force computation, not for quality.
"""

import numpy as np
import pytest
import torch

ASPECTS = ["challenge", "approach"]


@pytest.fixture(scope="module")
def explorer_run(tmp_path_factory):
    from workbench.corpus import load_corpus
    from workbench.encoders import AspectEncoder
    from workbench.explore import Explorer

    run = tmp_path_factory.mktemp("explore")
    torch.manual_seed(0)
    AspectEncoder.from_base("minilm", ASPECTS, dim=16, pooling="mean", max_length=64,
                            device="cpu").save_pretrained(run / "unified_model")
    for i, aspect in enumerate(ASPECTS):
        torch.manual_seed(i + 1)
        AspectEncoder.from_base("minilm", [aspect], dim=16, pooling="mean", max_length=32,
                                device="cpu").save_pretrained(run / "aspect_models" / aspect)
    docs = load_corpus("aclsum:validation").subset(n=30, seed=0)
    docs.docs.loc[docs.docs.index[0], "title"] = "<script>alert(1)</script>"
    return run, docs, Explorer(run, docs, ASPECTS, perplexity=5.0, decode=False)


def test_tap_escapes_paper_text(explorer_run):
    _, _, explorer = explorer_run
    html = explorer.on_tap(0.0, 0.0, 0)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert "No decoders" in html  # decode=False: the map works, without words


def test_search_with_a_negative_weight_matches_brute_force(explorer_run):
    from workbench.encoders import AspectEncoder

    run, docs, explorer = explorer_run
    queries = {"approach": ("We train a neural parser.", 1.0), "challenge": ("Parsing is slow.", -0.5)}
    found = explorer.search(queries, k=5)
    score = np.zeros(len(docs))
    for aspect, (text, weight) in queries.items():
        model = AspectEncoder.from_pretrained(run / "aspect_models" / aspect)
        q = model.encode([text], aspects=aspect)[aspect][0]
        score += weight * (explorer.embeddings[aspect] @ q)
    score /= 1.5
    assert found["doc_id"].tolist() == [docs.ids[i] for i in np.argsort(-score)[:5]]
    np.testing.assert_allclose(found["score"], np.sort(score)[::-1][:5], atol=1e-4)
    with pytest.raises(ValueError, match="unknown aspects"):
        explorer.search({"outcome": ("x", 1.0)})
    with pytest.raises(ValueError, match="at least one"):
        explorer.search({"approach": ("  ", 1.0)})


def test_place_leaves_the_map_alone_and_reweight_moves_it(explorer_run):
    _, docs, explorer = explorer_run
    before = explorer.coords.copy()
    x, y, placed = explorer.on_place(docs.texts()[3])
    assert np.array_equal(explorer.coords, before) and np.isfinite([x, y]).all()
    assert "Most similar papers" in placed
    with pytest.raises(ValueError):
        explorer.on_place("   ")
    coords = explorer.reweight({"approach": 1.0})
    assert explorer.weights == {"challenge": 0.0, "approach": 1.0} and coords.shape == before.shape
    assert explorer.map_aspects() == ["approach"]
