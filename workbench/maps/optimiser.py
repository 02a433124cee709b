"""Optimisers of maps: the phases of a t-SNE fit, the exact path's descent with gains, and one Adam loop.

* `Schedule` and `Phase`: early exaggeration at a low momentum, then the settling phase (sklearn's and
  openTSNE's defaults); both map engines (`engine.py`) run their phases from it;
* `GainsDescent`: the dense KL gradient descent of sklearn's exact method (momentum and delta-bar-delta
  gains, its learning-rate rule), with its constants named;
* `Adam`: Adam with a cosine-decayed step that keeps the best point seen, used by `AspectMap.place`
  (2-D positions) and `AspectMap.invert_features` (feature coefficients) alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .tsne_math import kl_gradient

EARLY_MOMENTUM, MOMENTUM = 0.5, 0.8  # sklearn's and openTSNE's momentum during early exaggeration, and after


@dataclass(frozen=True)
class Phase:
    """A stretch of iterations at one momentum and one exaggeration of P."""

    iterations: int
    momentum: float = MOMENTUM
    exaggeration: float = 1.0
    label: str = ""  # for verbose reports


@dataclass(frozen=True)
class Schedule:
    """The phases of a fit: `exaggeration_iter` iterations of early exaggeration, then the rest unexaggerated.

    A warm start (a weight change, a given init) skips the early phase: it would tear the layout apart again.
    """

    exaggeration: float = 12.0  # sklearn's and openTSNE's default
    exaggeration_iter: int = 250  # both libraries' length of the early exaggeration phase
    early_momentum: float = EARLY_MOMENTUM
    momentum: float = MOMENTUM

    def phases(self, n_iter: int, warm: bool = False) -> list[Phase]:
        """The early phase (no iterations when warm) and `n_iter` settling iterations."""
        early = Phase(0 if warm else int(self.exaggeration_iter), self.early_momentum, self.exaggeration, " early")
        return [early, Phase(int(n_iter), self.momentum)]


@dataclass(frozen=True)
class GainsDescent:
    """sklearn's exact t-SNE descent: momentum plus per-coordinate gains (delta-bar-delta).

    A coordinate's gain grows by `gain_increase` while its gradient keeps its sign and shrinks by the
    factor `gain_decrease` when it flips, never below `min_gain`; a run stops early once the gradient
    norm falls under `min_grad_norm`.
    """

    gain_increase: float = 0.2
    gain_decrease: float = 0.8
    min_gain: float = 0.01
    min_grad_norm: float = 1e-7
    report_every: int = 50  # iterations between verbose reports
    min_learning_rate: float = 50.0

    def learning_rate(self, n: int, exaggeration: float) -> float:
        """sklearn's learning_rate="auto": n / early exaggeration / 4, at least `min_learning_rate`."""
        return max(n / exaggeration / 4.0, self.min_learning_rate)

    def run(self, P: np.ndarray, Y: np.ndarray, phase: Phase, learning_rate: float,
            verbose: bool = False) -> np.ndarray:
        """Layout Y (n, 2) after `phase` against the dense affinities P (n, n); Y itself is left as it was."""
        Y = Y.copy()
        update = np.zeros_like(Y)
        gains = np.ones_like(Y)
        PE = P * phase.exaggeration if phase.exaggeration != 1.0 else P
        for it in range(phase.iterations):
            report = verbose and ((it + 1) % self.report_every == 0 or it == phase.iterations - 1)
            kl, grad = kl_gradient(PE, Y, with_kl=report)
            same = update * grad < 0.0
            gains = np.where(same, gains + self.gain_increase, gains * self.gain_decrease)
            np.clip(gains, self.min_gain, None, out=gains)
            update = phase.momentum * update - learning_rate * gains * grad
            Y += update
            if report:
                print(f"[t-SNE exact{phase.label}] iteration {it + 1}: KL {kl:.4f}, "
                      f"gradient norm {np.linalg.norm(grad):.2e}")
            if np.linalg.norm(grad) < self.min_grad_norm:
                break
        return Y


@dataclass(frozen=True)
class Adam:
    """Adam whose step decays from `lr` to 0 along a half cosine, keeping the best point seen.

    The loss surfaces it runs on (a point's KL against a frozen map) are not convex, and a late step
    can overshoot; returning the best point rather than the last one costs one comparison per step.
    """

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-12

    def minimise(self, evaluate: Callable, x0: np.ndarray, n_iter: int, lr: float) -> np.ndarray:
        """The kept value of the lowest loss seen, row by row, over `n_iter` steps from x0.

        evaluate(x, t) -> (losses (m,), gradient shaped like x, kept (m, ...)): called at the start
        and after each step (t = 0 .. n_iter); `kept` is what is returned for a row's best loss (the
        point itself, or what it stands for). Rows are independent problems stacked in one array.
        """
        n_iter = int(n_iter)
        # The defaults' (1 - beta) as the literals 0.1 and 0.001: 1 - 0.9 is 0.09999999999999998 in floats.
        mix1, mix2 = round(1.0 - self.beta1, 12), round(1.0 - self.beta2, 12)
        x = np.array(x0, dtype=np.float64)
        m1, m2 = np.zeros_like(x), np.zeros_like(x)
        best_loss, best = None, None
        for t in range(n_iter + 1):
            loss, grad, kept = evaluate(x, t)
            loss = np.asarray(loss, dtype=np.float64)
            if best is None:
                best_loss, best = loss.copy(), np.array(kept, dtype=np.float64)
            else:
                better = loss < best_loss
                best[better], best_loss[better] = kept[better], loss[better]
            if t == n_iter:
                break
            m1 = self.beta1 * m1 + mix1 * grad
            m2 = self.beta2 * m2 + mix2 * grad * grad
            step = lr * 0.5 * (1.0 + math.cos(math.pi * t / max(n_iter, 1)))
            x = x - step * (m1 / (1 - self.beta1 ** (t + 1))) / (np.sqrt(m2 / (1 - self.beta2 ** (t + 1))) + self.eps)
        return best
