"""`training.EarlyStopping`, the schedule and stopping rule of every training loop, against a plain reference."""

import ast
from pathlib import Path

import numpy as np
import pytest

from workbench.embed.training import EarlyStopping

PACKAGE = Path(__file__).resolve().parents[1] / "workbench"


def reference(max_steps, eval_every, patience, improvements):
    """The loop as the stages once wrote it by hand: (steps taken, evaluation steps, stopped early)."""
    bad, evals, step, stopped_early = 0, [], 0, False
    it = iter(improvements)
    while step < max_steps:
        step += 1
        if step % eval_every == 0 or step == max_steps:
            evals.append(step)
            bad = 0 if next(it) else bad + 1
            if bad >= patience:
                stopped_early = step < max_steps
                break
    return step, evals, stopped_early


@pytest.mark.parametrize("max_steps,eval_every,patience,pattern", [
    (10, 3, 2, [True, False, False, True]),
    (10, 3, 1, [False, True, True, True]),
    (7, 7, 1, [False]),                      # patience used up at the last step: not "early"
    (20, 4, 3, [True, True, True, True, True]),
    (5, 1, 2, [True, False, True, False, False]),
    (0, 5, 2, []),
])
def test_early_stopping_matches_the_hand_written_loop(max_steps, eval_every, patience, pattern):
    stopper = EarlyStopping(max_steps, eval_every, patience)
    it, evals = iter(pattern), []
    for step in stopper.steps():
        if stopper.due(step):
            evals.append(step)
            stopper.record(next(it))
    assert (stopper.step, evals, stopper.stopped_early) == reference(max_steps, eval_every, patience, pattern)


@pytest.mark.slow
def test_every_training_loop_of_the_package_uses_it():
    """No hand-written `for step in range(...)` / `while step < ...` loop is left (llm.py's token loop aside)."""
    hand_written = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("llm.py", "training.py"):  # generating tokens; EarlyStopping.steps itself
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.For) and getattr(node.target, "id", None) == "step":
                call = node.iter
                if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "steps"):
                    hand_written.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.While) and "step" in ast.unparse(node.test):
                hand_written.append(f"{path.name}:{node.lineno}")
    assert not hand_written, hand_written


def test_one_rule_picks_the_better_checkpoint_in_every_loop():
    """`Criterion` is the only "better checkpoint" rule: stage 02 by MRR or mean rank, stage 03's fine-tuned
    model by mean rank with MRR breaking ties, its frozen heads by agreement. Checked against the rule
    written out case by case."""
    from workbench.embed import distill, head_training
    from workbench.embed.training import Criterion, selection

    nan = float("nan")
    mrr, rank = selection("mrr"), selection("mean_rank")
    assert mrr.better({"val_mrr": 0.5}, None) and not mrr.better({"val_mrr": nan}, None)
    assert mrr.better({"val_mrr": 0.51}, {"val_mrr": 0.5}) and not mrr.better({"val_mrr": 0.5}, {"val_mrr": 0.5})
    assert rank.better({"val_mean_rank": 2.0}, {"val_mean_rank": 3.0})
    assert not rank.better({"val_mean_rank": 3.0}, {"val_mean_rank": 2.0})
    assert distill.BETTER.better({"mean_rank": 2.0, "mrr": 0.6}, {"mean_rank": 2.0, "mrr": 0.5})  # the tie-break
    assert not distill.BETTER.better({"mean_rank": 2.0, "mrr": 0.9}, {"mean_rank": 1.9, "mrr": 0.5})
    assert distill.BETTER.better({"mean_rank": 5.0, "mrr": 0.1}, {"mean_rank": nan, "mrr": nan})  # finite beats NaN
    assert head_training.AGREEMENT.better({"agreement": 0.1}, {"agreement": nan})
    assert not head_training.AGREEMENT.better({"agreement": nan}, {"agreement": 0.1})

    def by_hand(new, old, higher, tie):  # the rule spelled out, on random pairs
        if new[0] != new[0]:
            return False
        if old[0] != old[0]:
            return True
        gain = (new[0] - old[0]) * (1 if higher else -1)
        return gain > 1e-9 or (abs(gain) <= 1e-9 and tie and new[1] - old[1] > 1e-9)

    rng = np.random.default_rng(0)
    for higher, tie in ((True, False), (False, True), (False, False)):
        rule = Criterion("a", higher, "b" if tie else None)
        for _ in range(300):
            new, old = rng.integers(0, 3, 2) / 2.0, rng.integers(0, 3, 2) / 2.0
            new[0] = nan if rng.random() < 0.1 else new[0]
            assert rule.better({"a": new[0], "b": new[1]}, {"a": old[0], "b": old[1]}) == by_hand(new, old, higher, tie)
