"""Loading an aspect model checkpoint of either kind: the one entry point of the stages that read models.

Stage 02 and 03 save a fine-tuned `encoders.AspectEncoder` or, in the CPU-first mode, a
`heads.PooledAspectModel` on a frozen backbone; both folders hold a ``workbench_config.json``
whose "format" says which. `load_model` reads it and returns the right model, so stages
03-06 need not know which mode trained it:

    model = load_model(RunDir(run_dir).unified_model, run_dir=run_dir)
    vectors = model.encode(["an abstract"])            # {aspect: [1, dim]}
"""

from __future__ import annotations

import os
from pathlib import Path

from .encoders import CONFIG_NAME, AspectEncoder, read_config
from .features import FeatureCache
from .heads import FORMAT as POOLED_FORMAT
from .heads import PooledAspectModel
from ..core.rundir import MODELS_DIR


def load_model(folder: str | os.PathLike, device: str | None = None, aspects=None, run_dir=None,
               trust_remote_code: bool = False):
    """Load any workbench aspect model: a fine-tuned `AspectEncoder` or frozen-backbone `PooledAspectModel`.

    Both have the same interface (`encode`, `aspects`, `dim`, ...), so the stages that
    read models (03 targets, 04 round trips, 05 maps, 06 evaluation) need not know which
    mode trained them. A frozen-backbone model reads and extends the feature cache of
    `run_dir`, or of the run directory it lives in (``<run>/aspect_models/<aspect>`` or
    ``<run>/unified_model``), so texts encoded once are not encoded again.
    """
    folder = Path(folder).expanduser()
    config_path = folder / CONFIG_NAME
    fmt = None
    if config_path.is_file():
        fmt = read_config(config_path).get("format")
    if fmt != POOLED_FORMAT:
        return AspectEncoder.from_pretrained(folder, device=device, aspects=aspects,
                                             trust_remote_code=trust_remote_code)
    model = PooledAspectModel.from_pretrained(folder, device=device, aspects=aspects)
    if run_dir is None:
        if folder.parent.name == MODELS_DIR:
            run_dir = folder.parent.parent
        elif (folder.parent / MODELS_DIR).is_dir():
            run_dir = folder.parent
    if run_dir is not None:
        model.cache = FeatureCache.for_run(run_dir, model.backbone())
    return model


def is_model(value) -> bool:
    """True for a loaded aspect model of either kind (anything else is taken as a path)."""
    return hasattr(value, "encode") and hasattr(value, "aspects")
