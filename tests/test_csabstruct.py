"""The CSAbstruct copy in data/csabstruct/: ids, no repeated abstract, roles per sentence, and the user's export."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import csabstruct  # noqa: E402

SOURCE = ROOT.parent / "shared" / "data" / "csabstruct"


def test_every_abstract_has_a_unique_id_and_text_and_a_role_per_sentence():
    frame = csabstruct.load()
    assert frame["split"].value_counts().to_dict() == {"train": 1667, "dev": 295, "test": 193}
    assert frame["doc_id"].is_unique and frame["abstract"].is_unique
    assert all(d == f"csab-{s}-{d.rsplit('-', 1)[1]}" for d, s in zip(frame["doc_id"], frame["split"]))
    assert all(len(s) == len(r) == len(c) for s, r, c in zip(frame["sentences"], frame["roles"], frame["confs"]))
    assert set(r for roles in frame["roles"] for r in roles) == {"background", "objective", "method", "result", "other"}
    # No test abstract repeats a train or dev one: the figures on test are on papers no step saw.
    seen = set(frame.loc[frame["split"] != "test", "abstract"])
    assert not seen & set(frame.loc[frame["split"] == "test", "abstract"])


def test_the_file_is_the_source_less_repeats_and_its_marks_follow_the_roles():
    if not SOURCE.exists():
        pytest.skip("the original split files are not beside the checkout")
    test = csabstruct.load("test")
    lines = (SOURCE / "test.jsonl").read_text().splitlines()
    for doc_id, sentences in zip(test["doc_id"], test["sentences"]):
        assert json.loads(lines[int(doc_id.rsplit("-", 1)[1])])["sentences"] == sentences
    marks = csabstruct.aspect_marks(test.head(3), "challenge")
    assert [m.tolist() for m in marks] == [[r in ("background", "objective") for r in roles]
                                          for roles in test.head(3)["roles"]]


def test_the_export_is_what_a_user_has_and_loads_as_a_corpus(tmp_path):
    from workbench.data.corpus import load_corpus

    corpus = load_corpus(csabstruct.export(tmp_path / "csab.csv", ("dev",)))
    assert len(corpus) == 295 and "roles" not in corpus.docs and "labels" not in corpus.docs
    assert corpus.ids[0] == "csab-dev-0"
