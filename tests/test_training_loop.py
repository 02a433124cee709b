"""`training.EarlyStopping`, the schedule and stopping rule of every training loop, against a plain reference."""

import ast
from pathlib import Path

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
