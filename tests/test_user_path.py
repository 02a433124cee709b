"""scripts/user_path.py: the corpora it hands the workbench hold nothing a user's export lacks, and its
parameters are the own-corpus settings the runner accepts (the runs themselves: docs/results.md)."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
import yaml

from workbench.run.runconfig import load_params

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("user_path", ROOT / "scripts" / "user_path.py")
user_path = importlib.util.module_from_spec(spec)
spec.loader.exec_module(user_path)


def test_aclsum_loses_its_highlights_and_keeps_its_truths(tmp_path):
    path = user_path.write_corpus("aclsum", tmp_path)
    docs = pd.read_json(path, lines=True)
    assert len(docs) == 250 and not [c for c in docs if c.startswith("highlights_")]
    assert {"summary_challenge", "summary_approach", "summary_outcome", "split"} <= set(docs)
    config = load_params(_written(tmp_path, user_path.params_for("aclsum", path, tmp_path)))
    assert config["stages"] == ["01_generate", "02_train", "03_distill", "06_evaluate"]
    assert config["parameters"]["aspects"] == "acl"
    stages = config["stage_parameters"]
    assert stages["02_train"]["include_human"] is False and stages["03_distill"]["include_human"] is False
    assert stages["01_generate"]["subset"] is None and stages["01_generate"]["model"] == "smollm2-135m-instruct"


@pytest.mark.parametrize("style", ["a", "b"])
def test_synthetic_corpora_carry_labels_and_no_summaries(tmp_path, style):
    path = user_path.write_corpus(f"synthetic-{style}", tmp_path)
    docs = pd.read_csv(path)
    assert len(docs) == 90 and set(docs) == {"doc_id", "title", "abstract", "label_disease", "label_method",
                                             "label_population"}
    assert docs["label_method"].nunique() == 6
    config = load_params(_written(tmp_path, user_path.params_for(f"synthetic-{style}", path, tmp_path)))
    assert config["parameters"]["aspects"].endswith("clinical-study-aspects.yaml")
    assert "include_human" not in config["stage_parameters"]["02_train"]


def test_the_reading_names_what_the_check_kept_and_each_gain():
    metrics = {"guard": {"marks": "the aspect file", "n_pairs": {"a": 3},
                         "aspects": {"a": {"kept": "aspect file", "verdict": "replaced"}}},
               "heads_vs_backbone": {"mpnet": {"a": {"head": 48.4, "backbone (whole abstract)": 47.6, "gain": 0.8,
                                                     "p-value": 0.005}}, "minilm": {}}}
    lines = user_path.reading(metrics)
    assert lines[1] == "  a: kept aspect file - replaced"
    assert lines[2] == "Table 2 against human summaries read by mpnet: a 48.4 against 47.6 (+0.8, p = 0.005)"
    assert len(lines) == 3 and user_path.reading(metrics, labels=True)[2].startswith(
        "Table 2 against the label_<aspect> columns: a 48.4")


def _written(folder: Path, params: dict) -> Path:
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path
