"""Stand-ins the tests share: parts that behave like the real ones, small enough to reason about by hand."""

import hashlib

import numpy as np


class BagOfWords:
    """A frozen 'encoder': the unit sum of a fixed random vector per word. Counts what it encodes."""

    name, pooling, max_length, hidden_size = "bag-of-words", "mean", 256, 48

    def __init__(self):
        self.calls, self.texts = 0, 0

    @property
    def key(self):
        return "bow"

    def embed(self, texts, batch_size=32, progress=False):
        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), self.hidden_size), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().replace(".", " ").split():
                seed = int(hashlib.sha1(word.encode()).hexdigest()[:8], 16)
                out[i] += np.random.default_rng(seed).standard_normal(self.hidden_size)
            out[i] /= max(np.linalg.norm(out[i]), 1e-12)
        return out
