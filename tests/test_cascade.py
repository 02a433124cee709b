"""Cascade attention (shared prompt starts held once) against the plain model on whole sequences."""

import pytest
import torch

from workbench.generate.cascade import PromptStore, cascade, read_prefix, supports
from workbench.generate.llm import Sampling, filtered_probs, pack_groups


@pytest.fixture(scope="module")
def lm(smollm):
    return smollm.model, smollm.tokenizer


def _full_logits(model, sequences):
    """Last-position logits of each whole sequence, read alone by transformers' own SDPA attention."""
    current = model.config._attn_implementation
    model.set_attn_implementation("sdpa")
    try:
        with torch.inference_mode():
            return torch.stack([model(input_ids=torch.tensor([s])).logits[0, -1] for s in sequences])
    finally:
        model.set_attn_implementation(current)


@pytest.mark.slow
def test_prefixes_stacked_rows_and_decoding_steps_match_whole_sequences(lm):
    model, tokenizer = lm
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    system = ids("You summarise abstracts, one aspect at a time.\n")
    instructions = [ids("Aspect: approach. Write one sentence about the method.\nAbstract:\n"),
                    ids("Aspect: outcome. Write one sentence about the results, in general terms.\nAbstract:\n")]
    ends = [[ids("We parse graphs with a transition system."), ids("Translation of noisy text is hard.")],
            [ids("A short one.")]]
    with cascade(model):
        start = read_prefix(model, torch.tensor([system]))
        prefixes = [read_prefix(model, torch.tensor([i]), start) for i in instructions]
        parts, first, sequences, groups = [], [], [], []
        for g, group_ends in enumerate(ends):
            for end in group_ends:  # each end read alone, different lengths
                part = PromptStore(model.config.num_hidden_layers, 0, [prefixes[g]])
                first.append(part.read(model, torch.tensor([end]), logits=True))
                parts.append(part)
                sequences.append(system + instructions[g] + end)
                groups.append(g)
        store = PromptStore.stack(parts, max(p.length for p in parts) + 4, prefixes, groups)
        assert store.valid.sum(-1).tolist() == [len(e) for g in ends for e in g]  # right-aligned, nothing padded in
        assert torch.allclose(torch.cat(first), _full_logits(model, sequences), atol=1e-3)

        # fork: row 0 twice, rows 1 and 2 once (k samples share the row's columns), then three greedy steps
        store.select(torch.tensor([0, 0, 1, 2]))
        sequences = [sequences[i] for i in (0, 0, 1, 2)]
        token = torch.cat(first)[[0, 0, 1, 2]].argmax(-1)
        token[1] = 13  # the two copies of row 0 diverge
        for _ in range(3):
            sequences = [s + [t] for s, t in zip(sequences, token.tolist())]
            logits = store.read(model, token[:, None], logits=True)
            assert torch.allclose(logits, _full_logits(model, sequences), atol=1e-3)
            token = logits.argmax(-1)
        # finished rows leave: the others go on unchanged, across groups
        store.select(torch.tensor([1, 3]))
        sequences = [sequences[1] + [token[1].item()], sequences[3] + [token[3].item()]]
        logits = store.read(model, token[[1, 3]][:, None], logits=True)
        assert torch.allclose(logits, _full_logits(model, sequences), atol=1e-3)


@pytest.mark.slow
def test_left_padded_rows_read_together_match_rows_read_alone(lm):
    model, tokenizer = lm
    ends = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("One two three four five.", "Six.")]
    width = max(map(len, ends))
    ids = torch.zeros((2, width), dtype=torch.long)
    valid = torch.zeros((2, width), dtype=torch.bool)
    for row, end in enumerate(ends):
        ids[row, width - len(end):], valid[row, width - len(end):] = torch.tensor(end), True
    with cascade(model):
        prefix = read_prefix(model, torch.tensor([tokenizer("Abstract:\n", add_special_tokens=False)["input_ids"]]))
        store = PromptStore(model.config.num_hidden_layers, width + 2, [prefix])
        together = store.read(model, ids, valid, logits=True)
    head = tokenizer("Abstract:\n", add_special_tokens=False)["input_ids"]
    assert torch.allclose(together, _full_logits(model, [head + e for e in ends]), atol=1e-3)


@pytest.mark.slow
def test_the_model_refuses_cascade_attention_without_a_store_and_gets_its_own_back(lm):
    model, _ = lm
    before = model.config._attn_implementation
    with cascade(model), pytest.raises(RuntimeError, match="PromptStore"), torch.inference_mode():
        model(input_ids=torch.tensor([[1, 2, 3]]))
    assert model.config._attn_implementation == before


@pytest.mark.slow
def test_supports_only_full_causal_attention(lm):
    model, _ = lm
    assert supports(model)
    model.config.sliding_window = 4096
    try:
        assert not supports(model)
    finally:
        model.config.sliding_window = None


def test_filtered_probs_is_the_distribution_of_transformers_warpers():
    from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)

    torch.manual_seed(0)
    logits = torch.randn(5, 300) * 3
    for top_k, top_p in ((50, 0.95), (0, 0.9), (20, 1.0), (300, 0.5)):
        sampling = Sampling(temperature=0.7, top_k=top_k, top_p=top_p)
        warpers = LogitsProcessorList([TemperatureLogitsWarper(0.7)])
        if top_k:
            warpers.append(TopKLogitsWarper(top_k))
        if top_p < 1:
            warpers.append(TopPLogitsWarper(top_p))
        want = torch.softmax(warpers(None, logits.clone()), -1)
        probs, candidates = filtered_probs(logits, sampling)
        got = torch.zeros_like(want).scatter_(1, candidates, probs)
        assert torch.allclose(got, want, atol=1e-6), (top_k, top_p)


def test_pack_groups_fills_batches_in_order():
    groups = [[0, 1], [2], [3, 4, 5], [6]]
    repeats = [4] * 7
    assert pack_groups(groups, repeats, 12) == [[[0, 1], [2]], [[3, 4, 5]], [[6]]]
    assert pack_groups(groups, repeats, 100) == [groups]
