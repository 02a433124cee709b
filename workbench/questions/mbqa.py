"""The question axes' classifier (MBQA): yes/no answers to one aspect's questions, read from its frozen embedding.

A multi-task binary classifier on the aspect embedding (a linear layer, or a small MLP with
one shared hidden layer), one logit per question, trained full-batch with a BCE masked to the
answered pairs and balanced per question; saved as safetensors + JSON, never pickle.
`QuestionAxes` is a trained classifier with its questions: `answer`, `compare`,
`region_questions`. How the questions are asked and the classifier built: `axes.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.files import write_json, write_tensors
from ..core.vectors import unit_rows
from ..core.rundir import RunDir


FORMAT = "workbench-mbqa"
WEIGHTS_NAME, CONFIG_NAME = "mbqa.safetensors", "mbqa.json"


def _torch():
    import torch

    return torch


def make_mbqa(dim: int, n_questions: int, hidden: int = 0):
    """The classifier: Linear(dim -> q), or Linear(dim -> hidden) + GELU + Linear(hidden -> q), the hidden layer
    shared by all questions."""
    nn = _torch().nn
    if hidden:
        return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, n_questions))
    return nn.Sequential(nn.Linear(dim, n_questions))


def masked_bce(logits, targets, mask, weights=None):
    """Mean BCE over the answered entries only (mask 1), each optionally weighted: sum(m w l) / sum(m)."""
    F = _torch().nn.functional
    loss = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    if weights is not None:
        loss = loss * weights
    return (loss * mask).sum() / mask.sum().clamp(min=1)


def balance_weights(targets: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per entry, the weight that gives each question's yes and no answers equal total weight (paper: weighted BCE).

    A question answered "yes" for 1 paper in 10 would otherwise be learnt as "always no".
    """
    m = mask.astype(np.float64)
    n = m.sum(0)
    pos = (targets * m).sum(0)
    w_pos = np.where(pos > 0, n / (2 * np.maximum(pos, 1)), 1.0)
    w_neg = np.where(n - pos > 0, n / (2 * np.maximum(n - pos, 1)), 1.0)
    return np.clip(np.where(targets > 0.5, w_pos, w_neg), 0.1, 10.0).astype(np.float32)


@dataclass(frozen=True)
class MBQATraining:
    """How `train_mbqa` trains: full-batch AdamW for `epochs` steps at `lr` with `weight_decay`;
    `balance` weights each question's yes and no answers equally; `seed` the initial weights."""

    epochs: int = 300
    lr: float = 1e-2
    weight_decay: float = 1e-3
    balance: bool = True
    seed: int = 0


def train_mbqa(x: np.ndarray, targets: np.ndarray, mask: np.ndarray, hidden: int = 0,
               training: MBQATraining = MBQATraining()):
    """Train the classifier full-batch (AdamW) on frozen embeddings x (n, d); targets/mask (n, q), mask 1 = answered.

    hidden: 0 a linear layer, else one shared hidden layer of that size; `training`: epochs, rate,
    decay, balancing and seed (`MBQATraining`). A few hundred answered pairs and a few hundred
    dimensions: full batch on the CPU takes well under a second, and a linear layer is the least
    that can overfit them.
    """
    torch = _torch()
    torch.manual_seed(training.seed)
    X, Y, M = (torch.as_tensor(np.asarray(a, dtype=np.float32)) for a in (x, targets, mask))
    W = torch.as_tensor(balance_weights(targets, mask)) if training.balance else None
    model = make_mbqa(X.shape[1], Y.shape[1], hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=training.lr, weight_decay=training.weight_decay)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small: waking a second thread costs more than it saves
    try:
        for _ in range(training.epochs):
            opt.zero_grad(set_to_none=True)
            loss = masked_bce(model(X), Y, M, W)
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def predict(model, x: np.ndarray) -> np.ndarray:
    """(n, q) yes-probabilities of the classifier for embeddings x (n, d)."""
    torch = _torch()
    with torch.no_grad():
        return torch.sigmoid(model(torch.as_tensor(unit_rows(x)))).numpy()


def agreement(probs: np.ndarray, targets: np.ndarray, mask: np.ndarray) -> dict:
    """Accuracy and balanced accuracy (mean of the yes and no recalls) of probs > 0.5 on the masked entries."""
    m = mask.astype(bool)
    pred, true = probs[m] > 0.5, targets[m] > 0.5
    if not m.any():
        return {"accuracy": float("nan"), "balanced_accuracy": float("nan"), "pairs": 0}
    recalls = [float((pred[true == t] == t).mean()) for t in (True, False) if (true == t).any()]
    return {"accuracy": float((pred == true).mean()), "balanced_accuracy": float(np.mean(recalls)),
            "pairs": int(m.sum())}


def save_mbqa(model, folder, config: dict) -> Path:
    """Save the classifier as safetensors + JSON config (questions, metrics); never pickle."""

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    write_tensors(folder / WEIGHTS_NAME, model.state_dict())  # the config last
    write_json(folder / CONFIG_NAME, {"format": FORMAT, "version": 1, **config}, indent=1)
    return folder


def load_mbqa(folder):
    """(model, config) saved by `save_mbqa`."""
    from safetensors.torch import load_file

    folder = Path(folder)
    config = json.loads((folder / CONFIG_NAME).read_text())
    if config.get("format") != FORMAT:
        raise ValueError(f"{folder / CONFIG_NAME} is not a {FORMAT} config")
    model = make_mbqa(config["dim"], len(config["questions"]), config.get("hidden", 0))
    model.load_state_dict(load_file(str(folder / WEIGHTS_NAME)))
    return model.eval(), config


# --------------------------------------------------------------------------- the axes


class QuestionAxes:
    """One aspect's questions and the classifier that answers them from the aspect embedding.

    questions: [{"id", "text", ...}] in the classifier's output order.
    """

    def __init__(self, aspect: str, questions: list[dict], model, config: dict | None = None):
        self.aspect, self.model, self.config = aspect, model, dict(config or {})
        self.records = list(questions)
        self.questions = [q["text"] for q in questions]

    @classmethod
    def load(cls, run_dir, aspect: str) -> "QuestionAxes":
        """The axes saved under `<run_dir>/questions/<aspect>/`."""
        model, config = load_mbqa(RunDir(run_dir).questions(aspect))
        return cls(aspect, config["questions"], model, config)

    def answer(self, vectors) -> np.ndarray:
        """(n, q) probabilities of "yes" for aspect embeddings (n, D) (or one (D,) -> (1, q))."""
        return predict(self.model, np.atleast_2d(vectors))

    def compare(self, vec_a, vec_b, top: int = 5) -> tuple[list[dict], list[dict]]:
        """(agree, disagree): the questions two points answer alike and differently, surest first.

        Each item is {"question", "a", "b"} (the two yes-probabilities). Agreement on "yes"
        is scored p_a p_b, on "no" (1 - p_a)(1 - p_b); disagreement |p_a - p_b|.
        """
        pa, pb = self.answer(vec_a)[0], self.answer(vec_b)[0]
        same = (pa > 0.5) == (pb > 0.5)
        score_agree = np.where(pa > 0.5, pa * pb, (1 - pa) * (1 - pb))
        item = lambda i: {"question": self.questions[i], "a": float(pa[i]), "b": float(pb[i])}  # noqa: E731
        agree = [item(i) for i in np.argsort(-score_agree, kind="stable") if same[i]][:top]
        disagree = [item(i) for i in np.argsort(-np.abs(pa - pb), kind="stable") if not same[i]][:top]
        return agree, disagree

    def region_questions(self, vectors, top: int = 3) -> list[tuple[str, float]]:
        """The questions most of a region's papers answer "yes": [(question, share of yes)], share > 0.5, top first."""
        p = self.answer(vectors)
        share, mean = (p > 0.5).mean(0), p.mean(0)
        order = np.lexsort((-mean, -share))
        return [(self.questions[i], float(share[i])) for i in order[:top] if share[i] > 0.5]
