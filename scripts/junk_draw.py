"""Draw LLM answers to label by hand: the packaged 135M model's answers that today's grounding check keeps.

Stage 01 as `params/demo.yaml` runs it (the `acl` preset, SmolLM2-135M-Instruct on the CPU, k = 4,
64 new tokens, temperature 0.7, top-p 0.95, top-k 50, seed 0) on every paper of a corpus, then stage
02's grounding check (`embed.grounding.grounded_views`, the corpus's abstracts as the pool), then
`--n` of the kept answers drawn with `random.Random(--seed)`. Writes JSON lines with an empty
`label`, for a person to fill in (keep or drop) by reading each answer against its abstract.
`tests/data/junk_texts.json` was drawn so with the grounding check as it stood before its text rules,
copy of any abstract and floor (git 780be4c); run there to draw the same 30 again.

    .venv/bin/python scripts/junk_draw.py aclsum:validation RUN_DIR OUT.jsonl --n 30 --seed 56

`--features LABELLED.json` instead writes, beside the labelled file, what the grounding check reads of each
labelled answer through the reference encoder (its cosines with every abstract, with the nearest sentence
of its own abstract and of another's), so that a test can apply the rule to them without loading a model.
"""

from __future__ import annotations

import argparse
import json
import random


def kept_answers(corpus_name: str, run_dir: str, k: int = 4, max_new_tokens: int = 64, seed: int = 0):
    """[(doc_id, aspect, text)] of the answers the grounding check keeps, generating them first where missing."""
    from workbench.data.aspects import load_aspects
    from workbench.data.corpus import load_corpus
    from workbench.embed.grounding import grounded_views
    from workbench.generate.llm import Sampling, make_backend
    from workbench.generate.summaries import SUMMARY_STOP, generate_summaries

    corpus = load_corpus(corpus_name)
    aspects = load_aspects("acl")
    backend = make_backend("transformers", "smollm2-135m-instruct", batch_size=96)
    sampling = Sampling(temperature=0.7, top_p=0.95, top_k=50, max_new_tokens=max_new_tokens, seed=seed,
                        stop=SUMMARY_STOP)
    print(generate_summaries(corpus, aspects, backend, run_dir, k=k, sampling=sampling))
    views = grounded_views(aspects.names, run_dir, corpus, include_human=False, exclude_splits=())
    return corpus, [(d, a, t) for a, v in views.items() for d, texts in v.views.items() for t in texts]


def reference_features(corpus, run_dir: str, texts) -> list[dict]:
    """What `embed.grounding.judge_views` reads of each (doc_id, aspect, text) through the reference encoder."""
    import numpy as np

    from workbench.core.vectors import unit_rows
    from workbench.data.sentences import split_sentences
    from workbench.embed import grounding
    from workbench.embed.features import FeatureCache, FrozenBackbone

    cache = FeatureCache.for_run(run_dir, FrozenBackbone(grounding.REFERENCE))
    docs = cache.documents(corpus.texts())
    abstracts = unit_rows(docs.whole)
    sentences, owners = grounding.corpus_sentences(docs.sentences, abstracts.shape[1])
    row = {str(d): i for i, d in enumerate(corpus.ids)}
    out = []
    for doc, _, text in texts:
        parts = split_sentences(text)
        vectors = unit_rows(cache.vectors([text] + (parts if len(parts) > 1 else [])))
        mine, theirs = grounding.copy_cosines(vectors, row[doc], sentences, owners)
        out.append({"own": row[doc], "cosines": np.round(vectors[0] @ abstracts.T, 4).tolist(),
                    "own sentence": round(mine, 4), "other sentence": round(theirs, 4)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("run_dir")
    parser.add_argument("out")
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--seed", type=int, default=56)
    parser.add_argument("--features", help="a labelled file: write the reference encoder's readings beside it")
    args = parser.parse_args()
    if args.features:
        from workbench.data.corpus import load_corpus

        labelled = json.load(open(args.features))
        texts = [(t["doc_id"], t["aspect"], t["text"]) for t in labelled["texts"]]
        found = reference_features(load_corpus(args.corpus), args.run_dir, texts)
        with open(args.out, "w") as out:
            json.dump({"how": f"scripts/junk_draw.py {args.corpus} RUN_DIR {args.out} --features {args.features}: "
                              "per labelled text, in its order, its cosines with the corpus's abstracts (its own at "
                              "`own`) and with the nearest sentence of its own abstract and of another's, by the "
                              "grounding check's reference encoder",
                       "corpus size": len(found[0]["cosines"]) if found else 0, "texts": found}, out)
        return
    corpus, kept = kept_answers(args.corpus, args.run_dir)
    drawn = random.Random(args.seed).sample(sorted(kept), args.n)
    abstracts = dict(zip(map(str, corpus.ids), corpus.texts()))
    with open(args.out, "w") as out:
        for doc, aspect, text in drawn:
            out.write(json.dumps({"doc_id": doc, "aspect": aspect, "text": text, "label": "", "why": ""}) + "\n")
    print(f"{len(kept)} kept answers; {args.n} drawn with seed {args.seed} into {args.out}")
    for doc, aspect, text in drawn:
        print(f"\n[{doc} {aspect}] {text}\n  ABSTRACT: {abstracts[doc]}")


if __name__ == "__main__":
    main()
