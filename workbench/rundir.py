"""The run directory's layout that later stages read: stage 02's aspect models and split, stage 04's decoders.

    <run_dir>/aspect_models/split.json       {"val_split": ..., "train": [doc ids], "validation": [doc ids]}
    <run_dir>/aspect_models/<aspect>/        the stage-02 model of each aspect
    <run_dir>/decoders/                      stage 04's decoders and their confidence calibration

Stage 02 (`train.py`) writes the first two, stage 04 (`decoding.py`) the decoders; the later
stages read them here, whichever module they are in.
"""

from __future__ import annotations

import json
from pathlib import Path

MODELS_DIR = "aspect_models"
DECODERS = "decoders"
SPLIT_NAME = "split.json"


def read_split(run_dir) -> tuple[list[str], list[str]]:
    """The run's (train ids, validation ids), as stage 02 split the documents."""
    path = Path(run_dir) / MODELS_DIR / SPLIT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run stage 02 (train) for this run first")
    split = json.loads(path.read_text())
    return [str(d) for d in split["train"]], [str(d) for d in split["validation"]]


def aspect_model_dir(run_dir, aspect: str) -> Path:
    """Folder of the stage-02 model of an aspect (used to re-embed decoded text)."""
    folder = Path(run_dir) / MODELS_DIR / aspect
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is missing: the round trip needs the stage-02 aspect model")
    return folder
