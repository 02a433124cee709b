"""Guards found by fault injection: inputs and runs at the edges that once crashed or misled a stage.

Fast: no transformer is loaded (a bag-of-words stand-in plays the frozen encoder), and the
notebook cells under test run from their JSON with the slow calls stubbed.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stand_ins import BagOfWords
from workbench.core.rundir import RunDir

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def strict_load(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (which Python writes but JSON does not allow)."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def cell_source(notebook: str, marker: str) -> str:
    nb = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))
    found = [c for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"])]
    assert len(found) == 1, f"{notebook}: {len(found)} code cells contain {marker!r}"
    return "".join(found[0]["source"])


# --------------------------------------------------------------------------- 1: very long abstracts


def test_long_abstract_is_cut_at_load_and_still_reported(tmp_path, capsys):
    from workbench.cli import main as cli_main
    from workbench.data import corpus as corpus_module
    from workbench.data.corpus import load_corpus

    long_text = "Words of a whole paper pasted into the abstract cell. " * 1000  # 54,000 characters
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"id": "p1", "title": "A short paper", "abstract": "A fine abstract."},
        {"id": "p2", "title": "The pasted paper", "abstract": long_text},
    ]) + "\n")
    with pytest.warns(UserWarning, match=r"'p2'.*The pasted paper.*54,000.*20,000"):
        corpus = load_corpus(path)
    assert corpus.get("p2")["abstract"] == long_text[:20000]
    assert corpus.get("p1")["abstract"] == "A fine abstract."
    # Validation keeps reporting it, with the original length; a warning, so the paper stays.
    report = corpus.validate()
    long_issues = report.issues[report.issues["problem"] == "very_long"]
    assert list(long_issues["doc_id"]) == ["p2"] and "54,000" in long_issues["detail"].iloc[0]
    assert report.ok
    clean, _ = corpus.drop_invalid(report)
    assert len(clean.get("p2")["abstract"]) == 20000 == corpus_module.MAX_ABSTRACT_CHARS
    # Every stage loads the same cut text (same fingerprint); `workbench validate` still lists it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_corpus(path).fingerprint() == corpus.fingerprint()
        assert cli_main(["validate", str(path)]) == 0
    assert "very_long" in capsys.readouterr().out


# --------------------------------------------------------------------------- 2 and 3: stage 02's files


def _small_corpus():
    """Six training papers and ONE validation paper: too few to train, so the teacher is the encoder itself."""
    from workbench.data.corpus import Corpus

    rows = []
    for i, topic in enumerate(["asthma", "diabetes", "migraine", "arthritis", "gout", "acne", "lupus"]):
        disease = f"Patients with {topic} were studied."
        rows.append({"doc_id": f"d{i}", "title": f"Paper {i}", "abstract": f"{disease} We ran a survey.",
                     "split": "train" if i < 6 else "validation",
                     "summary_disease": f"The disease is {topic}.", "highlights_disease": [disease]})
    return Corpus(pd.DataFrame(rows), name="small")


def _train_twice(tmp_path, monkeypatch, capsys):
    import workbench.embed.aspect_training as train
    from workbench.embed.aspect_training import TrainConfig, train_aspect_models

    monkeypatch.setattr(train, "frozen_backbone", lambda name, pooling="mean": BagOfWords())
    corpus = _small_corpus()
    config = TrainConfig(mode="frozen", batch_size=4, eval_every=5, head_steps=10, head_rank=4)
    runs = []
    for _ in range(2):
        capsys.readouterr()
        result = train_aspect_models(["disease"], tmp_path, corpus, config, val_split="validation",
                                     progress=False)["disease"]
        lines = capsys.readouterr().out.splitlines()
        weights = RunDir(tmp_path).aspect_model("disease") / "model.safetensors"
        runs.append((result, lines, weights.stat().st_mtime_ns))
    return runs


def test_untrained_frozen_teacher_is_not_retrained_on_a_rerun(tmp_path, monkeypatch, capsys):
    (first, lines1, stamp1), (second, lines2, stamp2) = _train_twice(tmp_path, monkeypatch, capsys)
    assert any("frozen encoder itself" in line for line in lines1) and not first.skipped
    assert second.skipped and any("skipped" in line for line in lines2), lines2
    assert stamp2 == stamp1  # the checkpoint was not written again
    assert second.best_step == 0 and math.isnan(second.best_mrr) and math.isnan(second.baseline["val_mrr"])
    assert second.history == first.history == []


def test_training_writes_strict_json(tmp_path, monkeypatch, capsys):
    _train_twice(tmp_path, monkeypatch, capsys)
    folder = RunDir(tmp_path).aspect_model("disease")
    record = strict_load((folder / "train_config.json").read_text())
    assert record["status"] == "finished" and record["result"]["best_mrr"] is None  # was a bare NaN
    assert strict_load((folder / "history.json").read_text()) == []
    strict_load((folder / "workbench_config.json").read_text())
    strict_load((RunDir(tmp_path).split_file).read_text())


def test_the_json_writer_maps_nan_and_inf_to_null(tmp_path):
    from workbench.core.files import json_text, write_json  # what training, distillation and the runner write with

    data = {"a": float("nan"), "b": [float("inf"), -float("inf"), np.float32("nan"), np.float64(1.5)],
            "c": {"d": (1, float("nan"))}, "e": None, "f": "NaN"}
    write_json(tmp_path / "x.json", data)
    assert strict_load((tmp_path / "x.json").read_text()) == {
        "a": None, "b": [None, None, None, 1.5], "c": {"d": [1, None]}, "e": None, "f": "NaN"}
    text = json_text({"eval": [{"step": 0, "agreement": float("nan"), "mrr": np.float32(0.5)}]}, indent=1)
    assert strict_load(text) == {"eval": [{"step": 0, "agreement": None, "mrr": 0.5}]}


# --------------------------------------------------------------------------- 4: stage 04 on a tiny corpus


def test_faithfulness_table_of_no_metrics_is_empty_with_its_index_named():
    from workbench.decode.faithfulness import faithfulness_table

    empty = faithfulness_table({})
    assert empty.empty and list(empty.index.names) == ["aspect", "decoder"]
    table = faithfulness_table({("a", "retrieval"): {"documents": 2, "round-trip MRR": 0.5},
                                ("b", "retrieval"): {"documents": 3, "round-trip MRR": 1.0}})
    assert list(table.index.names) == ["aspect", "decoder"]
    assert table.loc[("b", "retrieval"), "documents"] == 3 and table.shape == (2, 2)


def test_notebook_04_says_faithfulness_was_skipped_when_no_aspect_has_two_validation_papers(tmp_path, capsys,
                                                                                            monkeypatch):
    """The faithfulness cell and the cells after it, with one validation paper per aspect (a 16-abstract corpus)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from workbench.decode import decoding
    from workbench.core.display import html_table, styled
    from workbench.decode.faithfulness import FAITHFULNESS_COUNTS, figure3_table
    from workbench.core.progress import notice

    monkeypatch.setattr(decoding, "load_decoders", lambda *a, **k: {"x": None, "y": None})
    shown = []
    data = {a: decoding.DecoderData(aspect=a, doc_ids=["d0", "d1"], embeddings=np.eye(2, dtype=np.float32),
                                    texts=[["s0"], ["s1"]], train_idx=[0], val_idx=[1]) for a in ("x", "y")}
    namespace = {"pd": pd, "plt": plt, "run_dir": RunDir(tmp_path), "names": ["x", "y"], "scored": ["x", "y"], "kinds": ["retrieval"],
                 "decoder": "retrieval", "shared": False, "device": None, "eval_docs": 50, "perplexity_docs": 10,
                 "bertscore_model": "mpnet", "max_new_tokens": 48, "seed": 0, "data": data, "titles": {},
                 "examples_per_aspect": 3, "display": shown.append, "HTML": str, "styled": styled,
                 "html_table": html_table, "figure3_table": figure3_table,
                 "set_default_decoder": decoding.set_default_decoder, "evaluate_decoders": decoding.evaluate_decoders,
                 "DecoderEvalConfig": decoding.DecoderEvalConfig,
                 "FAITHFULNESS_COUNTS": FAITHFULNESS_COUNTS, "notice": notice}
    for marker in ("evaluation = evaluate_decoders(", "if len(table):\n    fig, axes", "figure3_table(shown"):
        exec(cell_source("04_decode.ipynb", marker), namespace)
    out = capsys.readouterr().out
    assert "faithfulness skipped" in out and "x: 1 validation paper(s)" in out
    assert namespace["table"].empty and shown == []
    assert json.loads((RunDir(tmp_path).decoder_metrics).read_text()) == {}


# --------------------------------------------------------------------------- 5: stage 05's example queries


@pytest.mark.parametrize("value", [float("nan"), np.float32("nan"), None, pd.NA, "", "   "])
def test_missing_summary_falls_back_to_the_title(value):
    from workbench.data.corpus import text_or

    assert text_or(value, "The title") == "The title"


def test_present_summary_is_kept():
    from workbench.data.corpus import text_or

    assert text_or("The approach is X.", "The title") == "The approach is X."
    assert text_or(None, float("nan")) == ""


def test_a_selectivity_too_large_to_read_is_said_as_over_100():
    from workbench.embed.guard import probe_verdict, said_ratio

    assert said_ratio(3.14159) == "3.14" and said_ratio(2654.5) == "over 100" and said_ratio(float("nan")) == "nan"
    # A head that reads phrases barely moves under the other aspects' swaps: its ratio is huge, and said so.
    # matrix[swapped aspect][column]: how far each embedding moved.
    matrix = {"a": {"a": 4.0, "floor:a": 5.0, "base": 2.0}, "b": {"a": 1.0, "floor:a": 0.001, "base": 1.0}}
    verdict = probe_verdict(matrix, "a")
    assert verdict["aspect file"] == 5000.0 and verdict["kept"] == "aspect file"
    assert "(4.00 against 2.00)" in verdict["verdict"] and "(over 100)" in verdict["verdict"]


def test_an_aspect_swapped_alone_is_said_not_checked_and_the_head_kept():
    from workbench.embed.guard import probe_verdict

    # Only aspect a had pairs to swap: its selectivities have nothing to divide by (NaN), and no verdict may
    # read "follows a more than the encoder does (nan against nan)".
    verdict = probe_verdict({"a": {"a": 0.8, "floor:a": 0.9, "base": 0.4}}, "a")
    assert verdict["kept"] == "head" and verdict["verdict"].startswith("not checked")
    assert "nan" not in verdict["verdict"]
    assert probe_verdict({}, "a")["verdict"].startswith("not checked")


def test_a_verdict_on_the_aspect_files_own_sentences_says_it_is_unverified():
    """The floor and the sentences the probe swaps came from one aspect file: its verdict may not read as a finding."""
    from workbench.embed.guard import guard_table, probe_verdict, unverified

    matrix = {"a": {"a": 0.5, "floor:a": 4.0, "base": 1.0}, "b": {"a": 1.0, "floor:a": 0.4, "base": 1.0}}
    verdict = probe_verdict(matrix, "a")
    assert verdict["kept"] == "aspect file" and "verified" not in verdict
    said = unverified(verdict, "a")
    assert said["kept"] == "aspect file" and said["verified"] is False  # the decision stands, said as unverified
    assert said["verdict"].startswith("unverified: ") and "label_a" in said["verdict"]
    assert unverified(probe_verdict({}, "a"), "a")["verdict"].startswith("not checked")
    assert not guard_table({"aspects": {"a": said}}).loc["a", "verified"]
