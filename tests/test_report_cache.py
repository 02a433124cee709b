"""The decoding reports kept beside a decoder (`workbench.decode.report_cache`): found again only for the same
files, inputs and settings; a copied run keeps them; a broken store is read as empty. (Stages 04 and 06 reading
them on a rerun: `tests/test_stages_04_06.py`.)"""

import shutil
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from workbench.decode.faithfulness import FaithfulnessConfig, RoundTrip
from workbench.decode.report_cache import KEEP, REPORTS_NAME, ReportStore


@pytest.fixture
def run(tmp_path):
    """A run folder with a decoder folder and an aspect model folder, each a file or two."""
    root = tmp_path / "run"
    (root / "decoders" / "retrieval").mkdir(parents=True)
    (root / "decoders" / "retrieval" / "memory.json").write_text('{"texts": ["a", "b"]}')
    (root / "decoders" / "retrieval" / "memory.safetensors").write_bytes(b"\x00\x01\x02")
    (root / "aspect_models" / "task").mkdir(parents=True)
    (root / "aspect_models" / "task" / "model.safetensors").write_bytes(b"weights")
    return root


def _store(root):
    decoder = SimpleNamespace(source_files=(root / "decoders" / "retrieval", root / "aspect_models" / "task"))
    return ReportStore.of(decoder, RoundTrip(root / "aspect_models" / "task", np.eye(3, dtype=np.float32)))


INPUTS = (np.arange(6, dtype=np.float32).reshape(2, 3), [["one"], ["two"]], ["p1", "p2"], ["p1", "p2"], None,
          FaithfulnessConfig(seed=0))


def test_the_key_follows_every_input_and_file_and_not_the_folder(run, tmp_path):
    key = _store(run).key(*INPUTS)
    assert _store(run).key(*INPUTS) == key
    copy = tmp_path / "elsewhere" / "run"
    shutil.copytree(run, copy)
    assert _store(copy).key(*INPUTS) == key  # a copied run keeps its reports
    changed = [(INPUTS[0] + 1e-3,) + INPUTS[1:], INPUTS[:1] + ([["one"], ["2"]],) + INPUTS[2:],
               INPUTS[:2] + (["p1", "p3"],) + INPUTS[3:], INPUTS[:5] + (FaithfulnessConfig(seed=1),),
               INPUTS[:4] + ((np.ones((1, 3)), [0]),) + INPUTS[5:]]
    assert len({key} | {_store(run).key(*c) for c in changed}) == 1 + len(changed)
    (copy / "aspect_models" / "task" / "model.safetensors").write_bytes(b"weightz")  # the round trip's model
    assert _store(copy).key(*INPUTS) != key
    (run / "decoders" / "retrieval" / "memory.json").write_text('{"texts": ["a", "c"]}')  # the decoder
    assert _store(run).key(*INPUTS) != key


def test_a_report_comes_back_as_it_went_in_nan_included(run):
    store = _store(run)
    metrics = {"documents": np.int64(2), "ppl matching": np.float32(3.5), "bertscore shuffled": float("nan")}
    examples = pd.DataFrame({"document": ["p1", "p2"], "decoded": ["x", None], "bertscore": [0.5, np.nan],
                             "rank": np.array([1, 3])})
    assert store.get("k") is None
    store.put("k", metrics, examples)
    got_metrics, got_examples = _store(run).get("k")
    assert got_metrics["documents"] == 2 and got_metrics["ppl matching"] == 3.5
    assert np.isnan(got_metrics["bertscore shuffled"])
    pd.testing.assert_frame_equal(got_examples, examples)


def test_a_broken_store_is_read_as_empty_and_the_store_keeps_the_latest(run):
    store = _store(run)
    (run / "decoders" / "retrieval" / REPORTS_NAME).write_text("{ torn")
    assert store.get("k") is None
    frame = pd.DataFrame({"document": ["p1"]})
    for i in range(KEEP + 3):
        store.put(f"k{i}", {"documents": i}, frame)
    assert store.get("k0") is None and store.get(f"k{KEEP + 2}")[0] == {"documents": KEEP + 2}
    assert store.get(f"k{3}")[0] == {"documents": 3}


def test_what_is_not_known_by_its_files_is_never_kept(run):
    in_memory = SimpleNamespace()  # a decoder built in a session, or a registered kind without source_files
    assert ReportStore.of(in_memory, None) is None
    decoder = SimpleNamespace(source_files=(run / "decoders" / "retrieval",))
    assert ReportStore.of(decoder, RoundTrip(object())) is None  # a round trip through a model in memory
    assert ReportStore.of(decoder, None) is not None
    gone = SimpleNamespace(source_files=(run / "decoders" / "nowhere",))
    assert ReportStore.of(gone, None) is None


def test_a_folder_one_may_not_write_keeps_nothing_and_fails_nothing(run):
    store = _store(run)
    store.path.mkdir()  # where the store's file would go, something that cannot be written as a file
    store.put("k", {"documents": 1}, pd.DataFrame({"document": ["p1"]}))
    assert store.get("k") is None


def test_a_report_json_would_not_give_back_is_not_kept(run):
    store = _store(run)
    store.put("k", {"documents": 1, "ids": {"p1"}}, pd.DataFrame({"document": ["p1"]}))  # a set: not JSON
    store.put("j", {"documents": 1}, pd.DataFrame({"document": [object()]}))
    assert store.get("k") is None and store.get("j") is None
