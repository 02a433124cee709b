"""Embedding decoder (workbench/decode/soft_prompt.py): soft-token path, loss masking, frozen LM, tiny training, checkpoints.

The packaged SmolLM2-135M-Instruct is loaded once for the module. The tiny training run
(slow tier) is shared by the tests of what a decoder learns; the checkpoint and generation
tests share a decoder saved after one training step.
"""

import copy
import json
import shutil

import numpy as np
import pytest
import torch
from torch import nn

from workbench.decode.soft_prompt import (CONFIG_NAME, HISTORY_NAME, WEIGHTS_NAME, DecodeSampling, DecoderConfig,
                                         EmbeddingDecoder)
from workbench.decode.soft_prompt_training import DecoderItems, train_decoder
from workbench.embed.encoders import CheckpointError
from workbench.core.rundir import RunDir

EMB_DIM = 16
SENTENCES = [
    "Frogs sing at night.", "Bees make honey.", "Rivers carry sand to the sea.", "Wolves hunt in packs.",
    "Snow covers the mountains.", "Ants build tunnels.", "Owls see in the dark.", "Whales migrate far.",
    "Moss grows on rocks.", "Crabs walk sideways.", "Bats eat insects.", "Corals form reefs.",
]
N_TRAIN = 10  # items 10 and 11 are the validation set


@pytest.fixture(scope="module")
def lm():
    from workbench.core.models import load_causal_lm

    return load_causal_lm("smollm2-135m-instruct", device="cpu")


def _decoder(lm, chat=True, **config):
    model, tokenizer = lm
    if not chat:
        # The same LM seen as a base LM: no chat template -> <bos>, tokens, delimiter.
        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = None
    torch.manual_seed(0)
    return EmbeddingDecoder(model, tokenizer, EMB_DIM, DecoderConfig(device="cpu", **config)).eval()


def _embeddings(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, EMB_DIM)).astype(np.float32)


class _FixedTokens(nn.Module):
    """A stand-in mapping whose soft tokens are the LM's own embeddings of fixed token ids."""

    def __init__(self, table, ids):
        super().__init__()
        self.rows = table[ids].detach().reshape(1, -1)

    def forward(self, x):
        return self.rows.expand(x.shape[0], -1)


@pytest.mark.slow
@pytest.mark.parametrize("chat", [True, False])
def test_soft_tokens_match_plain_token_input(lm, chat):
    dec = _decoder(lm, chat=chat)
    table = dec.lm.get_input_embeddings().weight
    pieces = dec.tokenizer(" frogs sing loudly at night near the river bank in spring",
                           add_special_tokens=False)["input_ids"]
    assert len(pieces) >= 11
    task_ids, soft_ids, delim_ids = pieces[:5], pieces[5:10], pieces[10:11]
    dec.mapping = _FixedTokens(table, soft_ids)
    with torch.no_grad():
        dec.task_tokens.copy_(table[task_ids])
        if not chat:
            dec.delimiter.copy_(table[delim_ids])
    texts = ["Frogs sing at night.", "Bees make honey in summer hives."]
    targets = dec.encode_targets(texts)
    with torch.no_grad():
        inputs, mask, _ = dec.build_inputs(_embeddings(2), targets)
        logits = dec.lm(inputs_embeds=inputs, attention_mask=mask).logits
        P = dec.n_prompt
        for i, target in enumerate(targets):
            ids = dec.prefix_ids + task_ids + soft_ids + ([] if chat else delim_ids) + dec.suffix_ids + target
            assert len(ids) == P + len(target)
            want = dec.lm(input_ids=torch.tensor([ids])).logits[0]
            # The logits that predict the target tokens, and the target tokens' own positions.
            span = slice(P - 1, P + len(target))
            torch.testing.assert_close(logits[i, span], want[span], atol=1e-4, rtol=1e-4)
    if chat:
        # The chat decoder's instruction and assistant header really are in the prompt.
        text = dec.tokenizer.decode(dec.prefix_ids + dec.suffix_ids)
        assert "Describe the content" in text and "assistant" in text


@pytest.mark.slow
def test_loss_masking(lm):
    dec = _decoder(lm)
    texts = ["Frogs sing at night.", "Corals form large reefs in warm and shallow seas."]
    targets = dec.encode_targets(texts)
    assert all(t[-1] == dec.tokenizer.eos_token_id for t in targets)
    emb = _embeddings(2)
    with torch.no_grad():
        inputs, mask, labels = dec.build_inputs(emb, targets)
    P, T = dec.n_prompt, max(len(t) for t in targets)
    assert inputs.shape[:2] == labels.shape == mask.shape == (2, P + T)
    assert (labels[:, :P] == -100).all()  # template, task and soft tokens carry no loss
    for i, t in enumerate(targets):
        assert labels[i, P:P + len(t)].tolist() == t
        assert (labels[i, P + len(t):] == -100).all()  # right padding carries no loss
        assert int(mask[i].sum()) == P + len(t) and mask[i, :P + len(t)].all()

    # Another instruction (another prompt length) and other embeddings: the same targets carry the loss.
    other = EmbeddingDecoder(dec.lm, dec.tokenizer, EMB_DIM,
                             DecoderConfig(prompt="Summarise the {aspect} in a single sentence, please:"),
                             aspect="methodology")
    assert other.n_prompt != P
    with torch.no_grad():
        _, _, labels2 = other.build_inputs(emb * 5, targets)
    assert (labels2[:, :other.n_prompt] == -100).all()
    assert torch.equal(labels2[:, other.n_prompt:], labels[:, P:])

    # The loss is the cross-entropy over target positions only.
    with torch.no_grad():
        logp = torch.log_softmax(dec.lm(inputs_embeds=inputs, attention_mask=mask).logits.float(), -1)
        manual = -sum(float(logp[i, P + j - 1, tok]) for i, t in enumerate(targets) for j, tok in enumerate(t))
        manual /= sum(len(t) for t in targets)
        assert float(dec(emb, texts)) == pytest.approx(manual, abs=1e-4)

    # The unconditioned control drops exactly the soft tokens.
    with torch.no_grad():
        _, _, labels0 = dec.build_inputs(None, targets)
    assert labels0.shape[1] == P - dec.config.n_soft + T


@pytest.mark.slow
@pytest.mark.parametrize("chat", [True, False])
def test_only_mapping_and_learned_tokens_train(lm, chat):
    dec = _decoder(lm, chat=chat).train()
    trainable = {n for n, p in dec.named_parameters() if p.requires_grad}
    expected = {"mapping.0.weight", "mapping.0.bias", "mapping.3.weight", "mapping.3.bias", "task_tokens"}
    assert trainable == (expected if chat else expected | {"delimiter"})
    assert not dec.lm.training  # the frozen LM stays in eval mode
    dec(_embeddings(2), ["Frogs sing at night.", "Bees make honey."]).backward()
    assert all(p.grad is None for p in dec.lm.parameters())
    assert all(dec.get_parameter(n).grad is not None for n in trainable)


@pytest.fixture(scope="module")
def trained(lm, tmp_path_factory):
    """20 steps of training (about 25 s on one core): for the tests of what the decoder learns."""
    out = tmp_path_factory.mktemp("decoder")
    emb = _embeddings(len(SENTENCES))
    config = DecoderConfig(max_steps=20, eval_every=20, lr=2e-2, batch_size=4, device="cpu")
    items = DecoderItems(emb, [[s] for s in SENTENCES], range(N_TRAIN), range(N_TRAIN, len(SENTENCES)))
    result = train_decoder(items, out, config, lm=lm, progress=False)
    return result, emb


@pytest.fixture(scope="module")
def checkpoint(lm, tmp_path_factory):
    """A decoder saved by `train_decoder` after one step: checkpoints and generation do not depend on training."""
    out = tmp_path_factory.mktemp("decoder_checkpoint")
    emb = _embeddings(len(SENTENCES))
    config = DecoderConfig(max_steps=1, eval_every=1, lr=1e-2, batch_size=4, device="cpu")
    items = DecoderItems(emb, [[s] for s in SENTENCES], range(N_TRAIN), range(N_TRAIN, len(SENTENCES)))
    result = train_decoder(items, out, config, lm=lm, progress=False)
    return result, emb


@pytest.mark.slow
def test_tiny_training_prefers_matching_embeddings(trained):
    result, emb = trained
    dec = result.decoder
    assert result.best_step > 0
    matching = dec.perplexity(emb[:N_TRAIN], SENTENCES[:N_TRAIN])
    shuffled = dec.perplexity(np.roll(emb[:N_TRAIN], 1, axis=0), SENTENCES[:N_TRAIN])
    assert matching < 0.7 * shuffled, (matching, shuffled)
    print(f"perplexity matching {matching:.2f}, shuffled {shuffled:.2f}")
    history = json.loads(open(f"{result.out_dir}/{HISTORY_NAME}").read())
    assert [h["step"] for h in history] == [0, 20]
    assert history[0]["train_loss"] is None and history[-1]["val_loss"] < history[0]["val_loss"]


@pytest.mark.slow
def test_save_load_round_trip(checkpoint, lm, tmp_path):
    result, emb = checkpoint
    texts = SENTENCES[:4]
    loaded = EmbeddingDecoder.from_pretrained(result.out_dir, lm=lm)
    with torch.no_grad():
        assert float(loaded(emb[:4], texts)) == pytest.approx(float(result.decoder.eval()(emb[:4], texts)), abs=1e-6)
    saved = json.loads(open(f"{result.out_dir}/{CONFIG_NAME}").read())
    assert saved["lm"] == "smollm2-135m-instruct" and saved["emb_dim"] == EMB_DIM and saved["lm_hidden"] == 576

    # A wrong embedding size in the config.
    bad = tmp_path / "bad_dim"
    shutil.copytree(result.out_dir, bad)
    saved["emb_dim"] = 2 * EMB_DIM
    (bad / CONFIG_NAME).write_text(json.dumps(saved))
    with pytest.raises(CheckpointError, match="emb_dim"):
        EmbeddingDecoder.from_pretrained(bad, lm=lm)

    # An LM of another hidden size.
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = lm[1]
    small = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4))
    with pytest.raises(CheckpointError, match="hidden size"):
        EmbeddingDecoder.from_pretrained(result.out_dir, lm=(small, tokenizer))

    # Not a checkpoint at all.
    with pytest.raises(CheckpointError):
        EmbeddingDecoder.from_pretrained(tmp_path, lm=lm)
    assert (tmp_path / "bad_dim" / WEIGHTS_NAME).is_file()


@pytest.mark.slow
def test_generate_shapes(checkpoint):
    result, emb = checkpoint
    dec = result.decoder
    greedy = dec.generate(emb[:3], DecodeSampling(greedy=True, max_new_tokens=6), batch_size=2)
    assert len(greedy) == 3 and all(len(c) == 1 and c[0].strip() for c in greedy)
    torch.manual_seed(0)
    sampled = dec.generate(emb[:3], DecodeSampling(num_return_sequences=2, max_new_tokens=6), batch_size=2)
    assert len(sampled) == 3 and all(len(c) == 2 and all(s.strip() for s in c) for c in sampled)


# --------------------------------------------------------------------------- shared decoder


@pytest.mark.slow
def test_shared_decoder_aspect_token(lm, tmp_path):
    model, tokenizer = lm
    torch.manual_seed(0)
    dec = EmbeddingDecoder(model, tokenizer, EMB_DIM, DecoderConfig(device="cpu"),
                           aspects=["method", "task"]).eval()
    per_aspect = _decoder(lm)
    assert dec.n_prompt == per_aspect.n_prompt + 1 - len(per_aspect.prefix_ids) + len(dec.prefix_ids)
    targets = dec.encode_targets(["Frogs sing at night.", "Bees make honey."])
    with torch.no_grad():
        inputs, _, labels = dec.build_inputs(_embeddings(2), targets, aspect=["task", "method"])
        slot = len(dec.prefix_ids) + dec.config.n_task  # the aspect token follows the task tokens
        torch.testing.assert_close(inputs[0, slot], dec.aspect_tokens[1])
        torch.testing.assert_close(inputs[1, slot], dec.aspect_tokens[0])
        assert (labels[:, :dec.n_prompt] == -100).all()
        # The aspect token changes what the LM predicts.
        a = dec(_embeddings(2), ["Frogs sing at night.", "Bees make honey."], aspect="method")
        b = dec(_embeddings(2), ["Frogs sing at night.", "Bees make honey."], aspect="task")
        assert float(a) != pytest.approx(float(b), abs=1e-6)
    with pytest.raises(ValueError, match="aspect="):
        dec.build_inputs(_embeddings(2), targets)
    with pytest.raises(ValueError, match="one of"):
        dec.build_inputs(_embeddings(2), targets, aspect="species")
    with pytest.raises(ValueError, match="trained for aspect"):
        EmbeddingDecoder(model, tokenizer, EMB_DIM, DecoderConfig(), aspect="method").build_inputs(
            _embeddings(1), aspect="task")
    assert "aspect_tokens" in dec.trainable_state()
    dec.save_pretrained(tmp_path)
    loaded = EmbeddingDecoder.from_pretrained(tmp_path, lm=lm)
    assert loaded.aspects == ["method", "task"]
    torch.testing.assert_close(loaded.aspect_tokens, dec.aspect_tokens)


# --------------------------------------------------------------------------- stage 04 (decoding.py)


def _data(aspect, emb):
    from workbench.decode.decoding import DecoderData

    return DecoderData(aspect=aspect, doc_ids=[f"d{i}" for i in range(len(SENTENCES))], embeddings=emb,
                       texts=[[s] for s in SENTENCES], train_idx=list(range(N_TRAIN)),
                       val_idx=list(range(N_TRAIN, len(SENTENCES))))


@pytest.mark.slow
def test_train_decoders_resume_and_load(lm, tmp_path, capsys):
    from workbench.decode.decoding import DONE_NAME, load_decoders, train_decoders

    emb = _embeddings(len(SENTENCES))
    data = {"a": _data("a", emb), "b": _data("b", emb[::-1].copy())}
    config = DecoderConfig(max_steps=1, eval_every=1, device="cpu")  # what is trained is not under test here
    first = train_decoders(tmp_path, data, ["a", "b"], config, lm=lm, progress=False)
    assert set(first) == {"a", "b"} and (RunDir(tmp_path).decoders / "a" / DONE_NAME).is_file()
    stamp = (RunDir(tmp_path).decoders / "a" / WEIGHTS_NAME).stat().st_mtime_ns
    again = train_decoders(tmp_path, data, ["a", "b"], config, lm=lm, progress=False)
    assert (RunDir(tmp_path).decoders / "a" / WEIGHTS_NAME).stat().st_mtime_ns == stamp  # not retrained
    assert again["a"].best_val_loss == pytest.approx(first["a"].best_val_loss)
    # Changed data retrains only that aspect.
    data["b"].texts[0] = ["Something else entirely."]
    train_decoders(tmp_path, data, ["a", "b"], config, lm=lm, progress=False)
    assert (RunDir(tmp_path).decoders / "a" / WEIGHTS_NAME).stat().st_mtime_ns == stamp
    # A half-finished decoder (no done.json) is trained again.
    (RunDir(tmp_path).decoders / "a" / DONE_NAME).unlink()
    train_decoders(tmp_path, data, ["a"], config, lm=lm, progress=False)
    assert (RunDir(tmp_path).decoders / "a" / DONE_NAME).is_file()

    shared = train_decoders(tmp_path / "s", data, ["a", "b"], config, shared=True, lm=lm, progress=False)
    assert shared["a"] is shared["b"]
    loaded = load_decoders(tmp_path / "s", lm=lm)
    assert set(loaded) == {"a", "b"} and loaded["a"].shared and loaded["a"].decoder is loaded["b"].decoder
    text = loaded["b"].describe(emb[0], max_new_tokens=5, greedy=True)
    assert len(text) == 1 and isinstance(text[0][0], str)
    with pytest.raises(FileNotFoundError, match="stage 04"):
        load_decoders(tmp_path / "nothing")
    # An aspect stage 04 trained no decoder of (stage 02 had no model of it): an error, or left out on request.
    with pytest.raises(FileNotFoundError, match="'c'"):
        load_decoders(tmp_path, ["a", "c"], lm=lm)
    skipped = load_decoders(tmp_path, ["a", "c"], lm=lm, skip_missing=True)
    assert set(skipped) == {"a"}
    assert "c: no decoder" in capsys.readouterr().out


@pytest.mark.slow
def test_bertscore_prefers_the_matching_text():
    from workbench.decode.faithfulness import bertscore

    refs = [["Frogs sing at night near ponds."], ["Bees make honey.", "Frogs sing at night."]]
    f1 = bertscore(["Frogs sing at night near ponds.", "Frogs sing at night."], refs, model="minilm")
    assert f1[0] == pytest.approx(1.0, abs=1e-4)  # identical text
    assert f1[1] == pytest.approx(1.0, abs=1e-4)  # the best of several references counts
    other = bertscore(["The stock market fell sharply."], [["Frogs sing at night near ponds."]], model="minilm")
    assert other[0] < f1[0] - 0.1
    with pytest.raises(ValueError):
        bertscore(["a"], [[]], model="minilm")
    # decoding_report scores matching and shuffled in one call (each text encoded once): same scores.
    cands = ["Frogs sing at night.", "Bees make honey in hives.", "The market fell."]
    refs = [["Frogs croak after dark."], ["Honey comes from bees."], ["Stocks dropped sharply.", "A crash."]]
    shuffled = cands[1:] + cands[:1]
    both = bertscore(cands + shuffled, refs * 2, model="minilm")
    np.testing.assert_allclose(both[:3], bertscore(cands, refs, model="minilm"), atol=1e-5)
    np.testing.assert_allclose(both[3:], bertscore(shuffled, refs, model="minilm"), atol=1e-5)


def test_round_trip_rank_against_brute_force():
    from workbench.decode.decoding import round_trip
    from workbench.embed.encoders import AspectEncoder

    torch.manual_seed(0)
    model = AspectEncoder.from_base("minilm", ["method"], dim=32, pooling="mean")
    texts = SENTENCES[:6]
    own = model.encode(texts, aspects="method")["method"]
    corpus = np.concatenate([own, _embeddings(20, seed=3)[:, :1].repeat(32, axis=1)])
    # Targets: the corpus rows of the texts themselves, then a shifted pairing.
    rt = round_trip(texts, own, model, "method", corpus)
    assert np.allclose(rt["cosine"], 1.0, atol=1e-4) and (rt["rank"] == 1).all()
    shifted = np.roll(own, 1, axis=0)
    rt = round_trip(texts, shifted, model, "method", corpus)
    unit = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
    for i, text_vec in enumerate(own):
        sims = unit @ text_vec
        target_sim = float(shifted[i] @ text_vec)
        assert rt["cosine"][i] == pytest.approx(target_sim, abs=1e-4)
        assert rt["rank"][i] == 1 + int((sims > target_sim + 1e-6).sum())


@pytest.mark.slow
def test_decoding_report_on_tiny_decoder(trained):
    from workbench.decode.decoding import AspectDecoder
    from workbench.decode.faithfulness import FaithfulnessConfig, decoding_report, figure3_table

    result, emb = trained
    dec = AspectDecoder("a", result.decoder)
    metrics, examples = decoding_report(dec, emb[:N_TRAIN], [[s] for s in SENTENCES[:N_TRAIN]],
                                        config=FaithfulnessConfig(sampling={"max_new_tokens": 6},
                                                                  bertscore_model="minilm"))
    assert metrics["ppl matching"] < metrics["ppl shuffled"]
    assert np.isnan(metrics["ppl unconditioned"])  # a chat decoder: not reported by default
    assert 0 < metrics["bertscore matching"] <= 1 and len(examples) == N_TRAIN
    table = figure3_table({"a": examples}, n=2)
    assert list(table.columns[:4]) == ["document", "aspect", "summary", "reconstruction"] and len(table) == 2


@pytest.mark.slow
def test_input_standardisation_separates_nearby_embeddings(lm, tmp_path):
    dec = _decoder(lm)
    rng = np.random.default_rng(0)
    common = rng.standard_normal(EMB_DIM)
    emb = (common + 0.01 * rng.standard_normal((8, EMB_DIM))).astype(np.float32)  # papers close together
    with torch.no_grad():
        raw = dec.soft_tokens(emb[:2])
        dec.set_input_stats(emb)
        torch.testing.assert_close(dec.input_mean, torch.tensor(emb.mean(0)))
        std = dec.soft_tokens(emb[:2])
    spread = lambda t: float((t[0] - t[1]).norm() / t[0].norm())  # noqa: E731
    assert spread(std) > 20 * spread(raw)  # raw inputs give nearly identical soft tokens
    dec.save_pretrained(tmp_path)
    loaded = EmbeddingDecoder.from_pretrained(tmp_path, lm=lm)
    torch.testing.assert_close(loaded.input_scale, dec.input_scale)
    with torch.no_grad():
        torch.testing.assert_close(loaded.soft_tokens(emb[:2]), std)
