"""The ACLSum data set (Takeshita et al., 2024) as a table: 250 ACL papers with human aspect summaries.

`corpus.load_aclsum` and ``load_corpus("aclsum:test[:20]")`` make a `Corpus` of it; here
the splits and slices are read and the package's tokenised sentences become natural text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd

from .validation import CorpusError

_ACLSUM_SPLITS = {"train": "train", "validation": "val", "test": "test"}  # ours -> package's
_ACLSUM_ALIASES = {"val": "validation", "dev": "validation"}
_ACLSUM_ASPECTS = ("challenge", "approach", "outcome")
_ACLSUM_SLICE = re.compile(r"^([\w-]+)(?:\[(\d*):(\d*)\])?$")  # "test", "test[:20]", "train[50:]"


def aclsum_splits() -> list[str]:
    """The ACLSum splits `load_corpus("aclsum:<splits>")` accepts: train, validation, test."""
    return list(_ACLSUM_SPLITS)


_SPACE_BEFORE = re.compile(r"\s+([,.;:!?%)\]}]|'s\b|n't\b|'re\b|'ve\b|'ll\b|'d\b)")
_SPACE_AFTER = re.compile(r"([(\[{])\s+")


def detokenize(text: str) -> str:
    """Undo PTB-style tokenisation ("models ( QE ) , not" -> "models (QE), not").

    ACLSum ships its sentences tokenised; LLMs and encoders read natural text better.
    """
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text)).replace(" - ", "-").replace("`` ", '"').replace(" ''", '"')


def aclsum_docs(splits: Sequence[str] | None = None) -> tuple[pd.DataFrame, str, str]:
    """(docs, source, default name) of the ACLSum papers of `splits`; see `corpus.load_aclsum`."""
    from aclsum import ACLSum

    parsed = []
    for given in (splits or _ACLSUM_SPLITS):
        found = _ACLSUM_SLICE.match(given.strip().lower())
        if not found:
            raise CorpusError(f"aclsum: {given!r} is not a split or a split with a slice such as 'test[:20]'")
        split, start, stop = found.groups()  # start, stop: None without a slice or a bound
        split = _ACLSUM_ALIASES.get(split, split)
        if split not in _ACLSUM_SPLITS:
            raise CorpusError(f"aclsum: unknown split {split!r}; splits are {aclsum_splits()}")
        parsed.append((split, (int(start) if start else None, int(stop) if stop else None)))
    parsed = list(dict.fromkeys(parsed))  # "train,train" must not load twice
    if len({s for s, _ in parsed}) < len(parsed):
        raise CorpusError(f"aclsum: a split named twice with different slices: {splits}")
    wanted = [s + (f"[{a or ''}:{b or ''}]" if (a, b) != (None, None) else "") for s, (a, b) in parsed]

    rows = []
    for split, (start, stop) in parsed:
        for doc in ACLSum(_ACLSUM_SPLITS[split]).documents[start:stop]:
            row = {"doc_id": doc.id, "title": doc.title,
                   "abstract": detokenize(" ".join(doc.sentences["abstract"])), "split": split}
            for aspect in _ACLSUM_ASPECTS:
                row[f"summary_{aspect}"] = doc.summaries[aspect]
            for aspect in _ACLSUM_ASPECTS:
                row[f"highlights_{aspect}"] = [detokenize(t) for t in doc.get_all_highlighted_sentences(aspect)]
            rows.append(row)
    docs = pd.DataFrame(rows)
    docs["doc_id"] = docs["doc_id"].astype(str)
    docs["title"] = docs["title"].astype(object)
    docs["abstract"] = docs["abstract"].astype(object)
    source = "aclsum:" + ",".join(wanted)
    default_name = "aclsum" if wanted == list(_ACLSUM_SPLITS) else "aclsum-" + "-".join(wanted)
    return docs, source, default_name
