"""Shared fixtures. The suite runs offline: nothing may reach a model hub."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pandas as pd
import pytest


@pytest.fixture
def tiny_corpus():
    """Three short, valid abstracts."""
    from workbench.corpus import Corpus

    return Corpus(pd.DataFrame({
        "doc_id": ["a", "b", "c"],
        "title": ["Parsing", "Translation", "Summaries"],
        "abstract": [
            "We study dependency parsing for low-resource languages and propose a cross-lingual transfer method.",
            "Neural machine translation degrades on noisy user text; we add synthetic noise during training.",
            "Abstractive summarisers hallucinate facts; we filter training data by entailment scores.",
        ],
    }), name="tiny")


@pytest.fixture(scope="session")
def smollm():
    """The packaged SmolLM2 backend, loaded once for the session (converted folder cached on disk)."""
    from workbench.llm import TransformersBackend

    return TransformersBackend("smollm2-135m-instruct", batch_size=8, device="cpu")
