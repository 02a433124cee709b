"""The run directory's layout that later stages read: where stage 02 leaves its aspect models and its split.

    <run_dir>/aspect_models/split.json       {"val_split": ..., "train": [doc ids], "validation": [doc ids]}
    <run_dir>/aspect_models/<aspect>/        the stage-02 model of each aspect

Stage 02 (`train.py`) writes them; stages 04-06 read them here, whichever module they are in.
"""

from __future__ import annotations

import json
from pathlib import Path

MODELS_DIR = "aspect_models"
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
