"""What stages 02 and 03 share between their two training modes: result records, their files, selection and data.

Each of the two stages trains in one of two modes: by fine-tuning the paper's way (`aspect_training.py`,
`distill.py`) or as pooling heads on a frozen encoder (`head_training.py`, the CPU-first mode).
Both modes of a stage write the same files and return the same result, so the later stages
and the notebooks need not know which one ran. What they share lives here, and the
modules of the two modes import it rather than each other:

* stage 02: `TrainResult`, the files of a model folder (`HISTORY_NAME`, `TRAIN_CONFIG_NAME`),
  `evaluate` (the validation retrieval of view pairs) and `Criterion` (the one rule for which evaluation is kept);
* stage 03: `DistillResult` and its `validation_table`, and the documents' data both modes
  train on (`abstracts_of`, `documents_with_targets`, `stack_targets`);
* every training loop of the package (stages 02, 03 in both modes, the soft-prompt decoder of
  04): `EarlyStopping`, the one schedule of evaluations and the one stopping rule.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..core.accel import ConfigDict
from ..measures.metrics import retrieval_report
from ..generate.views import AspectViews, validation_pairs
from .checkpoints import load_model

HISTORY_NAME = "history.json"
TRAIN_CONFIG_NAME = "train_config.json"


# --------------------------------------------------------------------------- every loop


class EarlyStopping:
    """The schedule and stopping rule every training loop shares.

    Evaluate every `eval_every` steps and at the last step; stop once `patience` evaluations
    in a row did not improve on the best (the caller says what improving means and keeps the
    best weights):

        stopper = EarlyStopping(config.max_steps, config.eval_every, config.patience)
        for step in stopper.steps():          # 1..max_steps, ending early once stopped
            ...one optimiser step...
            if stopper.due(step):
                stopper.record(improved)      # after evaluating
        stopper.stopped_early, stopper.step   # what the result records
    """

    def __init__(self, max_steps: int, eval_every: int, patience: int):
        self.max_steps, self.eval_every, self.patience = int(max_steps), max(1, int(eval_every)), int(patience)
        self.bad = 0          # evaluations since the last improvement
        self.step = 0         # the last step taken
        self.stopped = False  # patience used up

    def steps(self):
        """Steps 1..max_steps; ends after the step whose evaluation used up the patience."""
        for step in range(1, self.max_steps + 1):
            if self.stopped:
                return
            self.step = step
            yield step

    def due(self, step: int) -> bool:
        """Whether to evaluate after this step."""
        return step % self.eval_every == 0 or step == self.max_steps

    def record(self, improved: bool) -> bool:
        """Count an evaluation; True when training should stop."""
        self.bad = 0 if improved else self.bad + 1
        self.stopped = self.bad >= self.patience
        return self.stopped

    @property
    def stopped_early(self) -> bool:
        """Stopped by the patience rule before the last step."""
        return self.stopped and self.step < self.max_steps


# --------------------------------------------------------------------------- stage 02


@dataclass
class TrainResult:
    """What `train_aspect_model` returns; `history` has one dict per evaluation.

    `baseline` is the step-0 evaluation (the untrained encoder with its random head).
    `model` is the final in-memory model (last step, NOT necessarily the best one) and
    is only set with keep_model=True; the best one is on disk in `out_dir`.
    """

    aspect: str
    out_dir: str
    best_step: int
    best_mrr: float
    best_mean_rank: float
    baseline: dict
    history: list[dict] = field(default_factory=list)
    n_train_docs: int = 0
    n_val_docs: int = 0
    seconds: float = 0.0
    stopped_early: bool = False
    skipped: bool = False
    model: Any = field(default=None, repr=False, compare=False)

    def history_frame(self):
        """The history as a DataFrame (step, train_loss, val_mean_rank, val_mrr, val_top1, seconds)."""
        import pandas as pd

        return pd.DataFrame(self.history)

    def summary(self) -> dict:
        """One row for a results table."""
        return {"aspect": self.aspect, "train docs": self.n_train_docs, "val docs": self.n_val_docs,
                "MRR step 0": self.baseline.get("val_mrr"), "best MRR": self.best_mrr,
                "mean rank step 0": self.baseline.get("val_mean_rank"), "best mean rank": self.best_mean_rank,
                "best step": self.best_step, "steps run": self.history[-1]["step"] if self.history else 0,
                "seconds": round(self.seconds, 1), "reused (trained before)": self.skipped}


def evaluate(model, views: AspectViews, val_ids, batch_size: int = 64, aspect: str | None = None) -> dict:
    """Validation retrieval: rank each held-out document's second view from its first -> mean rank, MRR, top-1.

    Uses the model's projected, L2-normalised head output, the embedding that is trained
    and later distilled. (The authors' code ranked the raw CLS vector here, which
    ignores the head: a quirk we do not repeat.)
    """
    aspect = aspect or views.aspect
    _, queries, candidates = validation_pairs(views, val_ids)
    emb = model.encode(queries + candidates, aspects=[aspect], batch_size=batch_size)[aspect]
    report = retrieval_report(emb[:len(queries)], emb[len(queries):])
    return {"val_mean_rank": report["mean_rank"], "val_mrr": report["mrr"], "val_top1": report["top1"]}


@dataclass(frozen=True)
class Criterion:
    """The one rule that says which checkpoint is better, for every training loop of stages 02 and 03: a
    validation score (`key`), the direction that wins (`higher`), and where two scores tie (within `TIE`), a
    second score that breaks it (`tie_key`, `tie_higher`). A score that is not finite never wins, and anything
    finite beats no checkpoint or a non-finite one (a NaN agreement of a head too new to be scored)."""
    key: str
    higher: bool
    tie_key: str | None = None
    tie_higher: bool = True

    TIE = 1e-9  # scores closer than this are equal: float noise between two evaluations of one checkpoint

    def better(self, new: dict, old: dict | None) -> bool:
        """True when the scores `new` beat `old` (None: no checkpoint yet)."""
        score = new[self.key]
        if not math.isfinite(score):
            return False
        if old is None or not math.isfinite(old[self.key]):
            return True
        gain = score - old[self.key] if self.higher else old[self.key] - score
        if gain > self.TIE:
            return True
        if gain < -self.TIE or self.tie_key is None:
            return False
        tie = new[self.tie_key] - old[self.tie_key]
        return (tie if self.tie_higher else -tie) > self.TIE


def selection(select_by: str) -> Criterion:
    """Stage 02's criterion: the validation MRR ("mrr", higher wins) or mean rank ("mean_rank", lower wins)."""
    return Criterion("val_mrr", higher=True) if select_by == "mrr" else Criterion("val_mean_rank", higher=False)


# --------------------------------------------------------------------------- stage 03


@dataclass
class DistillResult:
    """What a training run of stage 03 leaves: where the best checkpoint is and how it got there.

    `baseline` is the validation at step 0 (fresh heads), `best` the one of the kept
    checkpoint; both have "mean_rank", "mrr" and per-aspect values under "aspects".
    """

    out_dir: Path
    kind: str
    aspects: list[str]
    best_step: int
    best: dict
    baseline: dict
    history: dict
    config: ConfigDict  # the distill.DistillConfig it ran with
    n_train: int
    n_val: int
    steps: int
    stopped_early: bool
    seconds: float
    # Frozen mode: the base encoder's whole-abstract vectors scored like a head (the bar to beat).
    reference: dict | None = None

    def load(self, device: str | None = None):
        """The best checkpoint, loaded."""
        return load_model(self.out_dir, device=device)

    def table(self):
        """Per-aspect validation table: mean rank and MRR at step 0 and at the best step."""
        return validation_table(self)

    def __repr__(self) -> str:
        return (f"DistillResult({self.kind}: best step {self.best_step}/{self.steps}, mean rank "
                f"{self.baseline['mean_rank']:.2f} -> {self.best['mean_rank']:.2f}, MRR {self.baseline['mrr']:.3f} -> "
                f"{self.best['mrr']:.3f}, {self.n_train} train / {self.n_val} val docs, {self.seconds:.0f}s, "
                f"saved in {self.out_dir})")


def validation_table(result: DistillResult):
    """Per aspect: validation documents, chance MRR, mean rank and MRR at step 0 and at the best step.

    Frozen mode adds the agreement (mean per-document Spearman x 1 with the teacher's
    similarities, the selection score) of the base encoder's whole-abstract vectors, of the
    untrained head and of the kept heads.
    """
    import pandas as pd

    rows = []
    for aspect in result.aspects:
        before, after = result.baseline["aspects"][aspect], result.best["aspects"][aspect]
        n = after["n"]
        kept = "kept"  # may be step 0 itself, so the names must differ anyway
        row = {"aspect": aspect, "val docs": n, "kept step": after.get("step", result.best_step),
               "chance MRR": float(np.mean(1.0 / np.arange(1, n + 1))) if n else float("nan"),
               "mean rank (step 0)": before["mean_rank"], f"mean rank ({kept})": after["mean_rank"],
               "MRR (step 0)": before["mrr"], f"MRR ({kept})": after["mrr"]}
        if "agreement" in after:  # frozen mode: agreement with the teacher's similarities, and the base encoder's
            if result.reference:
                row["agreement (base encoder)"] = result.reference["aspects"][aspect]["agreement"]
            row["agreement (step 0)"] = before["agreement"]
            row[f"agreement ({kept})"] = after["agreement"]
        rows.append(row)
    table = pd.DataFrame(rows).set_index("aspect")
    table.loc["mean"] = table.mean(numeric_only=True)
    return table


def abstracts_of(corpus, doc_ids: Iterable[str]) -> dict[str, str]:
    """The abstract of each requested document; every one must be in the corpus with a text abstract."""
    table = {str(d): a for d, a in zip(corpus.docs["doc_id"], corpus.docs["abstract"]) if isinstance(a, str)}
    wanted = list(dict.fromkeys(doc_ids))
    missing = [d for d in wanted if d not in table]
    if missing:
        raise ValueError(f"{len(missing)} document(s) are not in corpus {corpus.name!r} or have no abstract: "
                         f"{missing[:5]}; pass the corpus the targets were made for")
    return {d: table[d] for d in wanted}


def documents_with_targets(targets: Mapping[str, Mapping[str, np.ndarray]]) -> set[str]:
    """Documents that have a target in at least one aspect (the only ones the unified model trains on)."""
    return set().union(*[set(t) for t in targets.values()]) if targets else set()


def stack_targets(targets, doc_ids, dim) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Dense [n, dim] targets and [n] masks per aspect for a list of documents (NaN where none)."""
    dense, masks = {}, {}
    for aspect, table in targets.items():
        dense[aspect] = np.full((len(doc_ids), dim), np.nan, dtype=np.float32)
        masks[aspect] = np.array([d in table for d in doc_ids], dtype=bool)
        for i, d in enumerate(doc_ids):
            if d in table:
                dense[aspect][i] = table[d]
    return dense, masks
