"""BERTScore (`workbench/decode/bertscore.py`) against the bert-score package, and its reading once per text."""

import numpy as np
import pytest

from workbench.decode import bertscore
from workbench.embed.features import FrozenBackbone, text_key
from workbench.core.models import resolve_model

CANDIDATES = ["We parse sentences with a graph-based dependency parser.",
              "A new corpus of noisy user text for translation.",
              "Entailment filters remove unfaithful summaries.",
              ""]
REFERENCES = [["The paper parses sentences with a graph parser.", "Dependency parsing of tweets."],
              "Translating noisy text from social media.",
              ["Summaries are filtered with an entailment model."],
              "Anything at all."]


@pytest.fixture(autouse=True)
def fresh_store():
    bertscore.TOKENS.clear()
    yield
    bertscore.TOKENS.clear()


def test_f1_matches_the_bert_score_package():
    import bert_score

    ours = bertscore.f1(CANDIDATES[:3], REFERENCES[:3], "minilm", 6)
    scorer = bert_score.BERTScorer(model_type=resolve_model("minilm").path, num_layers=6, rescale_with_baseline=False)
    refs = [[r] if isinstance(r, str) else r for r in REFERENCES[:3]]
    _, _, theirs = scorer.score(CANDIDATES[:3], refs)
    assert np.allclose(ours, theirs.numpy(), atol=1e-4)
    # Against several references the best counts; an empty candidate scores 0, as in bert-score.
    alone = bertscore.f1([CANDIDATES[0]] * 2, REFERENCES[0], "minilm", 6)
    assert ours[0] == pytest.approx(alone.max(), abs=1e-6)
    assert bertscore.f1(CANDIDATES[3:], REFERENCES[3:], "minilm", 6)[0] == 0.0


def test_one_pass_gives_the_pooled_vector_and_keeps_the_tokens(monkeypatch):
    texts = [r for rs in REFERENCES[:3] for r in ([rs] if isinstance(rs, str) else rs)]
    pooled = bertscore.read("minilm", texts, 4, pooled=True)
    assert np.allclose(pooled, FrozenBackbone("minilm").embed(texts), atol=1e-5)  # what the truths need
    kept = {k: v[0].copy() for k, v in bertscore.token_store("minilm", 4, 256).items()}
    assert set(kept) == {text_key(t) for t in texts}
    # Reading only up to the layer gives the same token vectors as the whole pass.
    bertscore.TOKENS.clear()
    bertscore.read("minilm", texts, 4)
    again = bertscore.token_store("minilm", 4, 256)
    assert all(np.allclose(again[k][0], kept[k], atol=1e-5) for k in kept)
    assert all(again[k][1][0] == 0 and again[k][1][-1] == 0 and again[k][1][1:-1].all() for k in kept)
    # Texts already read are not read again: scoring against them runs the encoder on the candidates only.
    encoder = FrozenBackbone("minilm").encoder()
    seen = []
    original = encoder.batches
    monkeypatch.setattr(encoder, "batches", lambda texts, *args: seen.extend(texts) or original(texts, *args))
    bertscore.f1(CANDIDATES[:3], REFERENCES[:3], "minilm", 4)
    assert sorted(seen) == sorted(CANDIDATES[:3])


def test_stage_06_truths_keep_the_summaries_for_bertscore(tmp_path):
    from workbench.evaluate.report import encode_texts

    texts = ["Parsing noisy tweets.", "Filtering summaries by entailment."]
    vectors = encode_texts("minilm", texts, run_dir=tmp_path, keep_layer=6)
    assert np.allclose(vectors, FrozenBackbone("minilm").embed(texts), atol=1e-5)
    assert {text_key(t) for t in texts} <= set(bertscore.token_store("minilm", 6, 256))
    assert np.allclose(encode_texts("minilm", texts, run_dir=tmp_path), vectors)  # cached in the run as usual


def test_kept_texts_are_bounded_and_scores_do_not_change(monkeypatch, tmp_path):
    """A kernel kept from run to run holds at most MAX_KEPT texts per store; evicted texts are read again."""
    from workbench.evaluate import report

    full = bertscore.f1(CANDIDATES[:3], REFERENCES[:3], "minilm", 6)
    bertscore.TOKENS.clear()
    monkeypatch.setattr(bertscore, "MAX_KEPT", 3)
    first = bertscore.f1(CANDIDATES[:3], REFERENCES[:3], "minilm", 6)  # 7 texts: all needed, none dropped
    store = bertscore.token_store("minilm", 6, 256)
    assert len(store) == 7 and np.allclose(first, full)
    bertscore.f1(["Another text."], ["And its reference."], "minilm", 6)
    assert len(store) == 3 and {text_key("Another text."), text_key("And its reference.")} <= set(store)
    assert np.allclose(bertscore.f1(CANDIDATES[:3], REFERENCES[:3], "minilm", 6), full, atol=1e-6)

    # The off-the-shelf vectors of stage 06: one run directory's caches in memory at a time.
    report.encode_texts("minilm", ["Parsing noisy tweets."], run_dir=tmp_path / "a")
    report.encode_texts("minilm", ["Parsing noisy tweets."], run_dir=tmp_path / "b")
    assert {key[0] for key in report.TEXT_CACHES} == {str(tmp_path / "b" / "features" / FrozenBackbone("minilm").key)}
