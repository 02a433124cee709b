"""The settings of stage 07's question axes (`AxesConfig`, taken by `axes.build_axes` and re-exported there)."""

from __future__ import annotations

from dataclasses import dataclass

from ..generate.sampling import Sampling


@dataclass(frozen=True)
class AxesConfig:
    """The settings of `build_axes` (stage 07's parameters of the same names).

    k: clusters of the aspect's embeddings, one CQG prompt each; per_cluster: questions asked
    per prompt; samples: question lists per cluster (sampled; the samples of one prompt cost
    about what one does); n_pos, n_neg: statements of the cluster and of its neighbouring
    clusters shown per prompt; pairs: about how many (paper, question) answers to ask for, as
    every question for pairs / questions papers; embed: the encoder that drops near-duplicate
    questions (None: exact duplicates only); min_rate, max_rate: the range a kept question's
    yes-rate lies in; hidden: MBQA's hidden layer (0: a linear layer); seed: clusters, probed
    papers and the classifier; gen_sampling, answer_sampling: how questions and answers are
    drawn (None: each step's default); progress: show progress bars.
    """

    k: int = 8
    per_cluster: int = 5
    samples: int = 2
    n_pos: int = 3
    n_neg: int = 3
    pairs: int = 150
    embed: str | None = "minilm"
    min_rate: float = 0.1
    max_rate: float = 0.9
    hidden: int = 0
    seed: int = 0
    gen_sampling: Sampling | None = None
    answer_sampling: Sampling | None = None
    progress: bool = False
