"""Each extension point of docs/architecture.md, used the way a user would: a toy extension added through it alone.

Five changes a user makes (a corpus format, an LLM backend, a decoder, how a map is cut into
regions, a stage-06 table), each registered from outside the package and then picked up by the
stage that uses it, plus the WORKBENCH_PLUGINS variable that loads such a module in every
process (the notebooks' kernels included).
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.decode import decoding
from workbench.generate import llm
from workbench.maps import mapview
from workbench.data import readers
from workbench.evaluate import report
from workbench.data.aspects import load_aspects
from workbench.data.columns import Raw
from workbench.data.corpus import Corpus, load_corpus
from workbench.generate.summaries import generate_summaries, summaries_frame
from workbench.core.rundir import RunDir
from workbench.measures.runmetrics import RunMetrics, load_metrics
from workbench.generate.sampling import Completion

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def restore():
    """The registries as they were, after each test: a toy extension must not leak into other tests."""
    registries = [readers.READERS, readers.SUPPORTED_FORMATS, llm.BACKENDS, decoding.DECODER_KINDS,
                  mapview.REGION_METHODS, mapview.REGION_DEFAULT, report.EXTRA_TABLES]
    saved = [dict(r) for r in registries]
    formats = list(readers.FORMATS)
    yield
    for registry, before in zip(registries, saved):
        registry.clear()
        registry.update(before)
    readers.FORMATS[:] = formats


# ------------------------------------------------------------------------------------------ a corpus format

def read_abstracts_txt(path: Path, encoding: str) -> Raw:
    """Toy format: records separated by a blank line, the first line the title, the rest the abstract."""
    blocks = [b.strip().split("\n", 1) for b in path.read_text(encoding=encoding).split("\n\n") if b.strip()]
    frame = pd.DataFrame([{"title": b[0], "abstract": b[1] if len(b) > 1 else ""} for b in blocks])
    return Raw(frame=frame, where=[f"record {i + 1}" for i in range(len(frame))])


def test_a_corpus_format(restore, tmp_path):
    readers.register_reader("abstracts", read_abstracts_txt, [".abs"])
    path = tmp_path / "papers.abs"
    path.write_text("A first paper\nWe study one thing. It works.\n\nA second paper\nWe study another thing.\n")
    corpus = load_corpus(path)
    assert list(corpus.docs["title"]) == ["A first paper", "A second paper"]
    assert corpus.docs["abstract"].iloc[1] == "We study another thing."
    assert len(load_corpus(path, format="abstracts")) == 2 and "abstracts" in readers.FORMATS


# ------------------------------------------------------------------------------------------ an LLM backend

class CannedBackend:
    """Toy backend: every request gets the same JSON answer."""

    kind = "canned"

    def __init__(self, model, answer='{"summary": "A canned statement about the paper."}'):
        self.model_id, self.answer = model, answer

    def complete(self, conversations, sampling, prefill=None, seeds=None):
        for i, _ in enumerate(conversations):
            yield i, Completion(text=(prefill or "") + self.answer, tokens=5)


def test_an_llm_backend_serves_stage_01(restore, tmp_path):
    llm.register_backend(CannedBackend, "canned")
    backend = llm.make_backend("canned", "toy-model")
    corpus = Corpus(pd.DataFrame({"doc_id": ["a", "b"], "title": ["", ""],
                                  "abstract": ["We parse text. It works well.", "We translate text. It is fast."]}))
    generate_summaries(corpus, load_aspects("acl").subset(["challenge"]), backend, tmp_path, k=1, progress=False)
    frame = summaries_frame(tmp_path)
    assert len(frame) == 2 and set(frame["model"]) == {"toy-model"}
    with pytest.raises(ValueError, match="canned"):
        llm.make_backend("nonesuch", "x")


# ------------------------------------------------------------------------------------------ a decoder

class NearestTitleDecoder:
    """Toy decoder: every embedding decodes to a fixed sentence."""

    names_sources = False  # texts are written, not taken from a paper
    reports_unconditioned = False

    def __init__(self, aspect):
        self.aspect = aspect

    def statements(self, embeddings, exclude=None, **sampling):
        return [{"text": f"something about {self.aspect}", "doc_id": None, "cosine": float("nan")}
                for _ in np.atleast_2d(embeddings)]

    def describe(self, embeddings, exclude=None, **sampling):
        return [[s["text"]] for s in self.statements(embeddings)]

    def perplexities(self, requests, batch_size=8):
        return {name: 1.0 for name in requests}


def test_a_decoder_kind_is_what_later_stages_load(restore, tmp_path):
    decoding.register_decoder("toy", lambda run_dir, aspects, device=None, lm=None:
                              {a: NearestTitleDecoder(a) for a in aspects})
    decoding.set_default_decoder(tmp_path, "toy")
    found = decoding.load_decoders(tmp_path, ["challenge"])  # kind "auto": the run's default
    assert isinstance(found["challenge"], decoding.Decoder)
    assert found["challenge"].describe(np.ones((2, 4))) == [["something about challenge"]] * 2
    with pytest.raises(ValueError, match="built-in"):
        decoding.register_decoder("retrieval", lambda *a, **k: {})


# ------------------------------------------------------------------------------------------ map regions

def left_and_right(coords, k, seed=0):
    """Toy regions: the left and the right half of the map."""
    return (coords[:, 0] > np.median(coords[:, 0])).astype(int)


def test_a_region_method_cuts_every_map(restore):
    coords = np.random.default_rng(0).normal(size=(40, 2))
    mapview.register_regions("halves", left_and_right, default=True)
    ids = mapview.cluster_labels(coords, 8)
    assert set(ids) == {0, 1} and (ids == (coords[:, 0] > np.median(coords[:, 0]))).all()
    mapview.register_regions("kmeans-again", mapview.kmeans_regions)
    assert len(set(mapview.cluster_labels(coords, 5, method="kmeans-again"))) == 5


# ------------------------------------------------------------------------------------------ a stage-06 table

def test_a_stage_06_table_lands_in_metrics(restore, tmp_path):
    def norms(context):
        return pd.DataFrame({a: [float(np.linalg.norm(context["rows"]["unified"][a], axis=1).mean())]
                             for a in context["aspects"]}, index=["mean norm"])

    report.register_table("embedding norms", norms)
    rows = {"unified": {"x": np.full((3, 4), 0.5)}}
    tables = report.extra_tables(tmp_path, held=None, aspects=["x"], rows=rows, truths={})
    metrics = RunMetrics(tmp_path)
    for name, table in tables.items():
        metrics[name] = table
    assert load_metrics(tmp_path)["embedding norms"] == {"mean norm": {"x": 1.0}}


# ------------------------------------------------------------------------------------------ WORKBENCH_PLUGINS

def test_plugins_named_in_the_environment_load_in_every_process(tmp_path):
    (tmp_path / "my_extension.py").write_text(
        "from workbench.data import readers\n"
        "readers.register_reader('toyfmt', lambda path, encoding: None, ['.toy'])\n")
    env = {**os.environ, "WORKBENCH_PLUGINS": "my_extension", "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", "import workbench.data.readers as r; print(r.SUPPORTED_FORMATS['.toy'])"],
                         env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "toyfmt", out.stderr
    env["WORKBENCH_PLUGINS"] = "no_such_extension"
    out = subprocess.run([sys.executable, "-c", "import workbench"], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0 and "no_such_extension" in out.stderr
