"""Each kind of artifact of a run, corrupted in turn: the map and its decoding either rebuild what
was cached or stop with an error that names the file. Nothing corrupt is read as if it were whole."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab_harness import ASPECTS, CORPUS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pristine(tiny_map_pristine):
    return tiny_map_pristine  # each case copies it


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xffnot what it should be{")


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


# (artifact, how it is broken, "rebuild" or "error")
CASES = [
    ("unified_model/model.safetensors", _truncate, "error"),
    ("unified_model/workbench_config.json", _garbage, "error"),
    ("aspect_models/challenge/model.safetensors", _truncate, "error"),
    ("decoders/retrieval/memory.json", _garbage, "error"),
    ("decoders/retrieval/memory.safetensors", _truncate, "error"),
    ("decoders/confidence.json", _garbage, "rebuild"),  # decoding goes on without levels, and says so
    ("embeddings/*.safetensors", _truncate, "rebuild"),  # a cache: computed again
    ("embeddings/*.json", _garbage, "rebuild"),
    ("features/*/shard-*.safetensors", _truncate, "rebuild"),
]


@pytest.mark.parametrize("pattern, breaks, outcome", CASES, ids=[c[0] for c in CASES])
def test_a_corrupt_artifact_is_rebuilt_or_named(pristine, tmp_path, pattern, breaks, outcome, capsys):
    from workbench.data.corpus import load_corpus
    from workbench.maps.explore import Explorer
    from workbench.maps.options import MapLayout

    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    targets = sorted(run.glob(pattern))
    assert targets, pattern
    for target in targets:
        breaks(target)
    docs = load_corpus(CORPUS)
    if outcome == "error":
        with pytest.raises(Exception) as caught:
            explorer = Explorer(run, docs, ASPECTS, layout=MapLayout(perplexity=5.0, seed=0))
            explorer.on_tap(0.0, 0.0, 0)
        text = str(caught.value)
        assert any(str(t.relative_to(run)) in text or t.name in text for t in targets), (pattern, text)
        assert type(caught.value).__name__ not in {"UnicodeDecodeError", "JSONDecodeError", "KeyError"}, text
    else:
        explorer = Explorer(run, docs, ASPECTS, layout=MapLayout(perplexity=5.0, seed=0))
        html = explorer.on_tap(0.0, 0.0, 0)
        assert "Nearest known statements to its embedding" in html
        if "confidence" in pattern:
            assert "confidence levels off" in capsys.readouterr().out and "not calibrated" in html
