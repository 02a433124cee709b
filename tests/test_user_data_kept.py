"""What the user made is kept (issue 41): marks and selections of papers a corpus lacks, maps saved only under
maps/, and a shared feature cache that two processes write at once.

The marks tests open `Explorer` on a run whose embeddings are a hash of each paper's id (`stored_embeddings` replaced):
what is under test is how maps/selection.json is read, shown and written, which no model changes, and a real
model would cost seconds per test. The cache test runs two real processes (a script this file writes) with an
encoder whose vector is a hash of the text, so a text stored with another text's vector is seen at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from workbench.core.rundir import RunDir

ASPECTS = ["challenge", "approach"]
ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- marks and selection


def _corpus(n: int = 12):
    from workbench.data.corpus import Corpus

    return Corpus(pd.DataFrame({"doc_id": [f"p{i:02d}" for i in range(n)],
                                "title": [f"Paper {i}" for i in range(n)],
                                "abstract": [f"We study problem {i} with method {i % 3}." for i in range(n)]}),
                  name="twelve")


def _hashed_embeddings(model_dir, corpus, run_dir=None, progress=False):
    """{aspect: [n, 8]}: a fixed vector per (aspect, doc_id), whatever the corpus's order or size."""
    def vector(aspect, doc_id):
        seed = int(hashlib.sha1(f"{aspect}|{doc_id}".encode()).hexdigest()[:8], 16)
        return np.random.default_rng(seed).standard_normal(8)

    return {a: np.stack([vector(a, d) for d in corpus.docs["doc_id"].astype(str)]) for a in ASPECTS}


class _RecordedPane(dict):
    """MapPane's arguments, as a pane the teaching widget can be put under (`teaching.attach`)."""

    def __init__(self, kwargs):
        super().__init__(kwargs)
        self.layout = types.SimpleNamespace(children=())


@pytest.fixture
def open_explorer(tmp_path, monkeypatch):
    """A function (corpus) -> Explorer on one run folder under tmp_path; the pane's MapPane records its arguments."""
    from workbench.core.rundir import RunDir
    from workbench.maps import explore as explore_module
    from workbench.maps.options import MapLayout

    monkeypatch.setattr(explore_module, "stored_embeddings", _hashed_embeddings)
    monkeypatch.setattr(explore_module, "MapPane", lambda *args, **kwargs: _RecordedPane(kwargs))
    run = tmp_path / "run"
    RunDir(run).unified_model.mkdir(parents=True)  # the Explorer asks for stage 03's folder

    def open_on(corpus):
        return explore_module.Explorer(run, corpus, ASPECTS, decode=False,
                                       layout=MapLayout(perplexity=2.0, reuse_map=None))

    return open_on


def test_marks_of_papers_missing_from_a_re_export_are_kept_and_come_back(open_explorer, capsys):
    """Issue 41 item 2: 3 marks stored, an Explorer on 9 of the 12 papers selects one paper; reopened on all 12,
    the run still has its 3 marks (before: 1) and the paper selected that the 9 lacked."""
    full = _corpus()
    ids = full.ids
    first = open_explorer(full)
    first.set_marks([(0, 10, True), (2, 11, False), (1, 3, True)])
    first.select([9, 1])
    stored = first.marked_pairs[["doc_id_a", "doc_id_b", "similar"]].values.tolist()
    assert len(stored) == 3
    capsys.readouterr()

    nine = full.subset(ids=ids[:9])
    partial = open_explorer(nine)
    said = capsys.readouterr().out
    assert "1 selected papers and 2 marked pairs are of papers not in this corpus" in said and "kept" in said
    # Listed, not pruned: the papers the re-export lacks, with what the user did with each.
    assert partial.not_in_corpus.to_dict("records") == [
        {"doc_id": ids[9], "selected": True, "marked_pairs": 0},
        {"doc_id": ids[10], "selected": False, "marked_pairs": 1},
        {"doc_id": ids[11], "selected": False, "marked_pairs": 1}]
    assert partial.marked_pairs["in_corpus"].tolist() == [False, False, True]
    shown = partial.pane(labels=False)["state"]  # the pane shows only what it can draw, by its own rows
    assert shown.marks == [(1, 3, True)] and shown.selected == [1]

    partial.select([0])
    assert partial.selection["doc_id"].tolist() == [ids[0]]
    partial.set_marks([(1, 3, True), (4, 5, False)])  # the pane after one more mark
    with pytest.raises(ValueError, match="not papers of this map"):
        partial.select([ids[10]])  # a paper it cannot show cannot be picked on it, and nothing changes

    again = open_explorer(full)
    pairs = again.marked_pairs[["doc_id_a", "doc_id_b", "similar"]].values.tolist()
    assert len(pairs) == 4 and all(p in pairs for p in stored) and [ids[4], ids[5], False] in pairs
    assert again.marked_pairs["in_corpus"].all() and again.not_in_corpus.empty
    assert again.selection["doc_id"].tolist() == [ids[9], ids[0]]
    assert "not in this corpus" not in capsys.readouterr().out


def test_only_papers_missing_here_are_selected_so_export_says_so(open_explorer, tmp_path):
    full = _corpus()
    open_explorer(full).select([11])
    partial = open_explorer(full.subset(ids=full.ids[:9]))
    assert partial.selection.empty
    with pytest.raises(ValueError, match=r"nothing is selected in this corpus \(1 selected papers are not in it"):
        partial.export_selection(tmp_path / "never.csv")
    assert not (tmp_path / "never.csv").exists()


@pytest.mark.parametrize("name", ["../../escaped", "../escaped", "a/b", "<absolute>", "..", ".", ".hidden", "",
                                  "x" * 61, "a\\b", "selection.json", "name\n", None])
def test_save_map_refuses_names_that_are_not_one_folder_under_maps(open_explorer, tmp_path, name):
    """Issue 41 item 9: a map's name is a folder under maps/; '../../escaped' wrote outside the run directory."""
    explorer = open_explorer(_corpus())
    name = str(tmp_path / "escaped") if name == "<absolute>" else name
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=r"map's name.*letters, digits, '_', '\.' or '-'"):
        explorer.save_map(name)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written anywhere
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()


def test_save_map_keeps_plain_names_and_reopens_them(open_explorer, tmp_path):
    from workbench.maps.saved import reopen_map

    explorer = open_explorer(_corpus())
    folder = explorer.save_map("by-approach_2.v1")
    assert folder == tmp_path / "run" / "maps" / "by-approach_2.v1" and folder.is_dir()
    assert reopen_map(tmp_path / "run", "by-approach_2.v1", explorer.meta["doc_id"], explorer.embeddings,
                      perplexity=2.0) is not None
    with pytest.raises(ValueError, match="map's name"):
        reopen_map(tmp_path / "run", "../run/maps/by-approach_2.v1", explorer.meta["doc_id"], explorer.embeddings)


# --------------------------------------------------------------------------- the shared feature cache

# One writer: opens the cache, waits for the start file, then asks for its texts four at a time (one shard
# each), as a notebook's Explorer and a stage would. Its encoder's vector is a hash of the text.
WRITER = textwrap.dedent('''
    import hashlib, sys, time
    from pathlib import Path

    import numpy as np

    def vector_of(text):
        seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
        v = np.random.default_rng(seed).standard_normal(16).astype(np.float32)
        return v / np.linalg.norm(v)

    class HashEncoder:
        name, pooling, max_length, hidden_size, key = "hash", "mean", 256, 16, "hash"

        def embed(self, texts, batch_size=32, progress=False):
            return np.stack([vector_of(t) for t in texts])

    if __name__ == "__main__":
        from workbench.embed.features import FeatureCache

        folder, first, last, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
        texts = [f"text number {i}" for i in range(first, last)]
        cache = FeatureCache(folder, HashEncoder(), run=sys.argv[5])  # the run's ledger records each file
        while not start.exists():
            time.sleep(0.002)
        for at in range(0, len(texts), 4):
            got = cache.vectors(texts[at:at + 4])
            assert np.array_equal(got, np.stack([vector_of(t) for t in texts[at:at + 4]])), at
''')


def test_two_processes_writing_one_feature_cache_give_every_text_its_own_vector(tmp_path):
    """Issue 41 item 6: two processes, 300 texts each, 200 of them shared, into one cache folder; before, some
    texts were stored with another's vector, some lost, and writes raised FileNotFoundError."""
    from safetensors.numpy import load_file
    from workbench.embed.features import FeatureCache, text_key

    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    folder, start = tmp_path / "features" / "hash", tmp_path / "start"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writers = [subprocess.Popen([sys.executable, str(script), str(folder), lo, hi, str(start), str(tmp_path)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for lo, hi in (("0", "300"), ("100", "400"))]
    start.touch()  # both start writing at the same moment
    outputs = [w.communicate(timeout=60)[0] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outputs

    writer = runpy.run_path(str(script))  # the same encoder, without the work
    texts = {text_key(f"text number {i}"): f"text number {i}" for i in range(400)}
    stored: dict[str, int] = {}
    for index in sorted(folder.glob("shard-*.json")):  # every shard on disk, not only the first copy of a text
        keys = json.loads(index.read_text())["keys"]
        vectors = load_file(str(index.with_suffix(".safetensors")))["vectors"]
        assert len(keys) == len(vectors), index
        for key, vector in zip(keys, vectors):
            assert np.array_equal(vector, writer["vector_of"](texts[key])), (index.name, texts[key])
            stored[key] = stored.get(key, 0) + 1
    assert set(stored) == set(texts) and max(stored.values()) == 1  # all 400 there, each once
    assert sorted(p.name for p in folder.glob("shard-*.safetensors")) == \
        sorted(p.name.replace(".json", ".safetensors") for p in folder.glob("shard-*.json"))
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    reader = FeatureCache(folder, writer["HashEncoder"]())
    assert len(reader) == 400 and reader.missing(list(texts.values())) == []
    # Both processes appended to one ledger: every line whole, every file there recorded at its size.
    lines = [json.loads(line) for line in RunDir(tmp_path).cache_ledger.read_text().splitlines()]
    assert {line["path"] for line in lines} == {f"features/hash/{p.name}" for p in folder.iterdir()}
    assert all(line["bytes"] == (folder / Path(line["path"]).name).stat().st_size
               for line in lines if not line["path"].endswith(".lock"))


def test_an_export_without_titles_or_summaries_still_gives_a_search_to_try(open_explorer):
    """Stage 05's example search reads a paper's summary, else its title, else its abstract's first sentence:
    an export of ids and abstracts alone (CSAbstruct as a user has it) once failed there with an empty query."""
    from workbench.data.corpus import Corpus

    corpus = Corpus(pd.DataFrame({"doc_id": [f"p{i:02d}" for i in range(12)], "title": [""] * 12,
                                  "abstract": [f"We study problem {i}. We use method {i % 3}." for i in range(12)]}),
                    name="untitled")  # as `load_corpus` leaves an export without a title column
    explorer = open_explorer(corpus)
    queries = explorer.example_queries(3)
    assert queries == {"approach": ("We study problem 3.", 1.0), "challenge": ("We study problem 3.", -0.5)}
    titled = _corpus().docs.assign(summary_approach="Uses X.", summary_challenge=float("nan"))
    # A missing summary (NaN) falls back to the title, never to the text "nan".
    assert open_explorer(Corpus(titled)).example_queries(3) == {"approach": ("Uses X.", 1.0),
                                                                "challenge": ("Paper 3", -0.5)}


def test_a_saved_map_of_other_embeddings_is_drawn_afresh(open_explorer, tmp_path, capsys):
    """Papers keep their place on a saved map only while their embeddings are those it was drawn from: after stage
    03 ran again the map is fitted anew, and the user is told."""
    from workbench.maps.saved import reopen_map

    explorer = open_explorer(_corpus())
    explorer.save_map("kept")
    ids, same = explorer.meta["doc_id"], explorer.embeddings
    assert reopen_map(tmp_path / "run", "kept", ids, same, perplexity=2.0) is not None
    rng = np.random.default_rng(0)
    other = {a: e + 0.3 * rng.standard_normal(e.shape) for a, e in same.items()}
    capsys.readouterr()
    assert reopen_map(tmp_path / "run", "kept", ids, other, perplexity=2.0) is None
    assert "drawn from other embeddings" in capsys.readouterr().out


def test_a_saved_map_is_checked_by_blocks_and_a_plain_reopen_copies_no_embeddings(open_explorer, tmp_path,
                                                                                   monkeypatch):
    """Reopening compares the saved embeddings with the current ones a block of rows at a time (here 3): the same
    largest change as the whole arrays give; the same papers in the same order reopen on the arrays given."""
    from workbench.maps import saved as saved_maps
    from workbench.maps.tsne import AspectMap
    from workbench.maps.tsne_math import unit32

    explorer = open_explorer(_corpus())
    folder = explorer.save_map("kept")
    ids, same = list(explorer.meta["doc_id"]), explorer.embeddings
    monkeypatch.setattr(saved_maps, "CHECK_ROWS", 3)
    rng = np.random.default_rng(1)
    other = {a: e + 0.01 * rng.standard_normal(e.shape) for a, e in same.items()}
    kept = [0, 2, 3, 5, 6, len(ids) - 1]  # saved rows still in a corpus that lost some and reordered the rest
    order = list(rng.permutation(len(ids))[:len(kept)])
    whole = AspectMap.load(folder)
    expected = max(float(np.abs(whole.embeddings[a][kept] - unit32(other[a][order])).max()) for a in whole.aspects)
    got = saved_maps.SavedMap.read(folder).largest_change(kept, other, order)
    assert got == pytest.approx(expected, abs=1e-7) and got > saved_maps.EMBEDDINGS_CHANGED
    reopened = saved_maps.reopen_map(tmp_path / "run", "kept", ids, same, perplexity=2.0)
    assert reopened is not None and np.array_equal(reopened.coords, whole.coords)
    assert all(np.shares_memory(reopened.embeddings[a], same[a]) for a in same)
