"""What the aspect file alone gives a user's own corpus: the zero-shot floor against the encoder's whole abstract.

A user's corpus has no human summaries or highlights; the supervision is the aspect file.
`workbench.embed.aspectfile` embeds each aspect's description, include items and examples
into a prototype, scores every sentence of an abstract against it and pools the sentences
it points at, half and half with the whole abstract (no training, no LLM). This script
measures that floor, the level any trained head must beat, against MiniLM's whole-abstract
embedding, on two corpora and their ground truths:

* the synthetic corpus (`scripts/synthetic_corpus.py`, its summary and highlight columns
  dropped; both generators: "a", developed on, and "b", written and frozen before any tuning)
  with `data/clinical-study-aspects.yaml`, written from the aspects' meaning (no
  value word of either generator in it): per embedding and factor, the mean per-paper
  Spearman x100 of the cosine similarities against "same value" (1/0), printed with its
  ceiling (a perfect ranking; about 64 with six equally frequent values), for several corpus
  seeds. The drug is a nuisance no aspect should follow;
* ACLSum's test split with the `acl` preset: the same against the human-summary truths
  (mpnet reading the summaries, as stage 06).

Each table has the zero-shot head ("aspect file"), the same calibrated to the corpus by
self-training (`aspectfile.calibrate`, "calibrated"), both half sentences and half whole
abstract, the calibrated head blended as the corpus says (`aspectfile.corpus_blends`,
"corpus blend"), and that with boilerplate sentences left out (`boilerplate.py`, "stage 03"):
stage 03's floor.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/aspect_file.py [--seeds 0 1 2] [--docs 120] [--backbone mpnet]
        [--llm] [--smoke]

--llm: the packaged 135M LLM's "does this sentence state the aspect?" (the probability of Yes) against
the calibrated aspect file, on seed 0 of each generator: the weight each puts on the true sentences.

--smoke (or WORKBENCH_BENCH_SMOKE=1): one seed, 24 synthetic papers, 10 ACLSum test papers, and hashed word
vectors (`_smoke.HashedBackbone`) in place of every encoder: each code path, no model to load.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

from _smoke import HashedBackbone, add_smoke  # noqa: E402
from synthetic_corpus import ASPECTS, FACTORS, NUISANCE, synthetic_frame  # noqa: E402
from workbench.core.vectors import unit_rows  # noqa: E402
from workbench.data.aspects import load_aspects  # noqa: E402
from workbench.data.corpus import Corpus, load_corpus  # noqa: E402
from workbench.embed.aspectfile import (aspect_prototypes, calibrate, corpus_blends,  # noqa: E402
                                        zero_shot_embeddings)
from workbench.embed.boilerplate import find_boilerplate  # noqa: E402
from workbench.embed.features import FeatureCache, FrozenBackbone  # noqa: E402
from workbench.embed.floor import STEPS, fit_floor  # noqa: E402
from workbench.measures.evaluation import permutation_test, rowwise_spearman  # noqa: E402
from workbench.evaluate.report import summary_truths  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ASPECT_FILE = ROOT / "data" / "clinical-study-aspects.yaml"


def spearman100(emb: np.ndarray, truth: np.ndarray) -> float:
    """Mean per-paper Spearman x100 between an embedding's cosine similarities and a truth matrix."""
    sim = unit_rows(emb) @ unit_rows(emb).T
    return 100 * float(np.nanmean(rowwise_spearman(sim, truth)))


def same_value(values) -> np.ndarray:
    values = np.asarray(values, dtype=object)
    return (values[:, None] == values[None, :]).astype(np.float64)


def ceiling(values, seed: int = 0) -> float:
    """The best a continuous similarity can score against "same value": a perfect ranking with no ties."""
    truth = same_value(values)
    noise = np.random.default_rng(seed).random(truth.shape) * 1e-3
    sim = truth + (noise + noise.T) / 2
    return 100 * float(np.nanmean(rowwise_spearman(sim, truth)))


def synthetic_table(seed: int, docs: int, cache: FeatureCache, style: str = "a") -> dict:
    """{row: {factor: spearman}} on the test papers of one synthetic corpus, and the ceilings."""
    frame = synthetic_frame(n_train=0, n_val=0, n_test=docs, seed=seed, style=style)
    frame = frame.drop(columns=[c for c in frame if c.startswith(("summary_", "highlights_")) or c == "sentences"])
    truths = {f: same_value(frame[f]) for f in FACTORS}
    rows, blends = head_rows(Corpus(frame).texts(), load_aspects(ASPECT_FILE), ASPECTS, truths, cache)
    return {"rows": rows, "ceiling": {f: ceiling(frame[f], seed) for f in FACTORS}, "blends": blends}


def head_rows(texts, aspect_set, names, truths: dict, cache: FeatureCache, keep: dict | None = None):
    """({row: {truth: spearman}} for the whole-abstract baselines and each kind's head per aspect, the blends);
    `keep`, where given, receives stage 03's heads ("stage 03") and MiniLM's whole-abstract vectors (MINILM)."""
    features = cache.documents(texts)
    heads, blends = floor_heads(features, aspect_prototypes(aspect_set, names, cache.vectors), cache)
    minilm = features.whole if WHOLE == MINILM else minilm_whole(texts)
    rows = {WHOLE: {t: spearman100(features.whole, truths[t]) for t in truths}}
    if WHOLE != MINILM:
        rows[MINILM] = {t: spearman100(minilm, truths[t]) for t in truths}
    for kind, emb in heads.items():
        for a in names:
            rows[f"{kind}: {a}"] = {t: spearman100(emb[a], truths[t]) for t in truths}
    if keep is not None:
        keep.update({"stage 03": heads["stage 03"], "phrases": heads["phrases"], MINILM: minilm})
    return rows, blends


KINDS = ("aspect file", "calibrated", "corpus blend", "stage 03", "phrases")
MINILM = "MiniLM whole abstract"  # the baseline the issue names, whatever the backbone
WHOLE = MINILM  # the row of the backbone's own embedding (main sets it from --backbone)


def minilm_whole(texts) -> np.ndarray:
    """MiniLM's whole-abstract vectors, for the baseline row when the heads read another backbone."""
    return FrozenBackbone("minilm").embed(list(texts))


def floor_heads(features, protos, cache: FeatureCache) -> tuple[dict, dict]:
    """({kind: {aspect: vectors}} for KINDS, stage 03's blends and the phrases' shares): each kind adds one step to
    the one before; "stage 03" (`floor.fit_floor` without phrases) also leaves boilerplate sentences out
    (`boilerplate.py`) and takes the position mixture where it applies, and "phrases" (the guard's floor, every
    step) gives each aspect its own sentence vectors, its phrases pooled (`aspectfile.word_pooled_sentences`)."""
    scorer = calibrate(features, protos) or protos
    lean = fit_floor(features, protos, cache.word_vectors, steps=[s for s in STEPS if s != "phrases"])
    full = fit_floor(features, protos, cache.word_vectors)
    return {"aspect file": zero_shot_embeddings(features, protos),
            "calibrated": zero_shot_embeddings(features, scorer),
            "corpus blend": zero_shot_embeddings(features, scorer, blend=corpus_blends(features, scorer)),
            "stage 03": lean.embeddings(features),
            "phrases": full.embeddings(features, cache.word_vectors)}, \
        {"blends": full.blends, "phrases": full.word_shares}


def aclsum_table(docs: int, cache: FeatureCache) -> tuple[dict, dict, dict]:
    """({row: {aspect: spearman}} on ACLSum's test papers against the human-summary truths (mpnet), the blends,
    {(truth encoder, aspect): (stage 03's gain over MiniLM's whole abstract, its A.6 p-value)})."""
    corpus = load_corpus(f"aclsum:test[:{docs}]")
    aspect_set = load_aspects("acl")
    truths = summary_truths(corpus, aspect_set.names, "mpnet")
    kept: dict = {}
    rows, blends = head_rows(corpus.texts(), aspect_set, aspect_set.names, truths, cache, kept)
    # Appendix A.6 on each truth encoder: stage 03's head against MiniLM's whole abstract, on its own aspect.
    cosine = lambda v: unit_rows(v) @ unit_rows(v).T  # noqa: E731
    tests = {}
    for encoder in ("mpnet", "minilm"):
        truth = truths if encoder == "mpnet" else summary_truths(corpus, aspect_set.names, encoder)
        for a in aspect_set.names:
            test = permutation_test(cosine(kept["stage 03"][a]), cosine(kept[MINILM]), truth[a], 200, 0)
            tests[encoder, a] = (100 * test["observed_difference"], test["p_value"])
    return rows, blends, tests


def describe(blends: dict) -> str:
    return "; ".join(f"{what} " + ", ".join(f"{a} {b:.2f}" for a, b in values.items())
                     for what, values in (("corpus blends", blends["blends"]), ("phrases' shares", blends["phrases"])))


def print_table(rows: dict, columns: list[str], extra: dict | None = None) -> None:
    print("| embedding | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    if extra:
        print("| ceiling (perfect ranking) | " + " | ".join(f"{extra[c]:.1f}" for c in columns) + " |")
    for name, values in rows.items():
        print(f"| {name} | " + " | ".join(f"{values[c]:.1f}" for c in columns) + " |")


def llm_comparison(docs: int, cache: FeatureCache, styles, model_name: str = "smollm2-135m-instruct") -> None:
    """The LLM where the issue suggests it is good: "does this sentence state the aspect?" scored by the probability
    of Yes against No after the chat prompt (one forward pass, no sampling), each sentence normalised over its
    abstract like the calibrated classifier's; both with boilerplate left out. Printed per generator (seed 0):
    the weight each puts on the sentences that truly state the aspect, and the share of the ceiling pooled."""
    import torch
    from workbench.core.models import load_causal_lm
    from workbench.embed.aspectfile import sentence_weights
    from workbench.embed.boilerplate import keep_mask

    model, tok = load_causal_lm(model_name, device="cpu", dtype=torch.float32)
    ids = lambda words: [tok.encode(w, add_special_tokens=False)[0] for w in words]  # noqa: E731
    yes, no = ids(["Yes", "yes", " Yes", " yes"]), ids(["No", "no", " No", " no"])
    aspect_set = load_aspects(ASPECT_FILE)

    def log_odds(prompts):
        out = []
        with torch.no_grad():
            for i in range(0, len(prompts), 32):
                batch = tok(prompts[i:i + 32], return_tensors="pt", padding=True)
                lp = torch.log_softmax(model(**batch).logits[:, -1, :].float(), -1)
                out.append((torch.logsumexp(lp[:, yes], -1) - torch.logsumexp(lp[:, no], -1)).numpy())
        return np.concatenate(out)

    for style in styles:
        frame = synthetic_frame(n_train=0, n_val=0, n_test=docs, seed=0, style=style)
        features = cache.documents(frame["abstract"].tolist())
        protos = aspect_prototypes(aspect_set, ASPECTS, cache.vectors)
        boiler = find_boilerplate(features)
        calibrated = sentence_weights(features, calibrate(features, protos, boilerplate=boiler) or protos,
                                      boilerplate=boiler)
        flat = [(i, j, a) for i, st in enumerate(features.sentence_texts) for j in range(len(st)) for a in ASPECTS]
        t0 = time.perf_counter()
        z = log_odds([tok.apply_chat_template([{"role": "user", "content": (
            f"Topic: {a} ({aspect_set[a].description})\nSentence: \"{features.sentence_texts[i][j]}\"\n"
            f"Does this sentence say what the {a} is? Answer Yes or No.")}], tokenize=False,
            add_generation_prompt=True) for i, j, a in flat])
        seconds = time.perf_counter() - t0
        odds = [{a: np.zeros(len(st)) for a in ASPECTS} for st in features.sentence_texts]
        for (i, j, a), v in zip(flat, z):
            odds[i][a][j] = v
        llm = []
        for i, sents in enumerate(features.sentences):
            keep = keep_mask(sents, boiler)
            p = {a: keep / (1 + np.exp(-odds[i][a])) for a in ASPECTS}
            llm.append({a: v / max(v.sum(), 1e-30) for a, v in p.items()})
        print(f"\ngenerator {style}, seed 0: {len(flat)} LLM prompts ({model_name}) in {seconds:.0f} s")
        truths = {f: same_value(frame[f]) for f in FACTORS}
        for name, weights in (("calibrated aspect file", calibrated), ("LLM yes/no", llm)):
            on_true, pooled = {}, {}
            for a in ASPECTS:
                on_true[a] = np.mean([w[a][np.isin(st, list(h))].sum() for w, st, h in
                                      zip(weights, features.sentence_texts, frame[f"highlights_{a}"])])
                pooled[a] = unit_rows(np.stack([w[a] @ unit_rows(s) if len(s) else features.whole[i]
                                                for i, (w, s) in enumerate(zip(weights, features.sentences))]))
            print(f"  {name:22s} weight on the true sentences: " + ", ".join(f"{a} {v:.2f}" for a, v in on_true.items())
                  + "; pooled alone, share of the ceiling: " + ", ".join(
                      f"{a} {100 * spearman100(pooled[a], truths[a]) / ceiling(frame[a]):.1f}%" for a in ASPECTS))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--docs", type=int, default=150, help="synthetic test papers per seed")
    parser.add_argument("--styles", nargs="+", default=["a", "b"],
                        help="synthetic generators: a (developed on) and b (written and frozen before any tuning)")
    parser.add_argument("--aclsum-docs", type=int, default=100)
    parser.add_argument("--backbone", default="minilm",
                        help="the frozen encoder of the heads (stage 02-03's base_model), e.g. mpnet")
    parser.add_argument("--llm", action="store_true",
                        help="also score sentences by the packaged 135M LLM's yes/no (about 5 minutes per generator)")
    add_smoke(parser, argv, seeds=[0], docs=24, aclsum_docs=10)
    args = parser.parse_args(argv)
    global WHOLE, summary_truths, minilm_whole
    WHOLE = MINILM if args.backbone == "minilm" else f"{args.backbone} whole abstract"
    folder = tempfile.TemporaryDirectory(prefix="aspect-file-")  # removed when the script ends
    cache = FeatureCache(Path(folder.name), FrozenBackbone(args.backbone))
    if args.smoke:  # hashed word vectors in place of every encoder (each code path, no model to load)
        hashed = HashedBackbone()
        cache = FeatureCache(Path(folder.name), hashed)
        minilm_whole = hashed.embed  # noqa: F811
        summary_truths = lambda corpus, names, encoder: {  # noqa: E731, F811
            a: (lambda v: v @ v.T)(hashed.embed(corpus.docs[f"summary_{a}"].tolist())) for a in names}
    print(f"Synthetic corpus, {args.docs} papers per seed, aspect file {ASPECT_FILE.relative_to(ROOT)}; "
          f"mean per-paper Spearman x100 against 'same value' (the drug is a nuisance)")
    for style in args.styles:
        worst = {}
        for seed in args.seeds:
            t0 = time.perf_counter()
            table = synthetic_table(seed, args.docs, cache, style)
            print(f"\ngenerator {style}, seed {seed} ({time.perf_counter() - t0:.1f} s); " + describe(table["blends"]))
            print_table(table["rows"], FACTORS, table["ceiling"])
            base = table["rows"][WHOLE]
            for kind in KINDS:
                for a in ASPECTS:
                    row = table["rows"][f"{kind}: {a}"]
                    share, base_share = row[a] / table["ceiling"][a], base[a] / table["ceiling"][a]
                    worst.setdefault((kind, a), []).append(
                        (share, base_share, row[NUISANCE], max(v for f, v in row.items() if f != a)))
        print(f"\nGenerator {style}, worst seed per aspect: share of the ceiling on its own factor ({WHOLE}'s), "
              "the nuisance, the largest other factor")
        for (kind, a), results in worst.items():
            share, base_share, nuisance, other = min(results)
            print(f"  {kind:12s} {a:11s} {100 * share:5.1f}% of the ceiling (whole abstract {100 * base_share:5.1f}%), "
                  f"ratio {share / base_share if base_share > 0 else float('inf'):.2f}x; nuisance {nuisance:.1f}; "
                  f"largest other factor {other:.1f}")
    t0 = time.perf_counter()
    rows, blends, tests = aclsum_table(args.aclsum_docs, cache)
    print(f"\nACLSum test, {args.aclsum_docs} papers, acl preset, truths: human summaries read by mpnet "
          f"({time.perf_counter() - t0:.1f} s); " + describe(blends))
    columns = list(next(iter(rows.values())))
    print_table(rows, columns)
    base = rows[MINILM]
    for kind in KINDS:
        gains = {a: rows[f"{kind}: {a}"][a] - base[a] for a in columns}
        print(f"gain of the {kind} head over {MINILM} on its own aspect: "
              + ", ".join(f"{a} {g:+.1f}" for a, g in gains.items()))
    print("stage 03's head against MiniLM's whole abstract on its own aspect, A.6 (200 permutations): "
          + "; ".join(f"{a} ({encoder} truth) {gain:+.1f}, p = {p:.3f}" for (encoder, a), (gain, p) in tests.items()))
    if args.llm:
        llm_comparison(args.docs, cache, args.styles)


if __name__ == "__main__":
    main()
