"""Batching prompts for local generation: which prompts share a start, and how many answers fit in one batch.

`plan_batches` groups prompts whose token sequences share a long start (read once, see
`cascade.py`), `pack_groups` packs such groups into batches within a row and a
key/value budget, and `shared_start` says how much of a batch's prompts can be read once.
"""

from __future__ import annotations

from typing import Sequence


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest start that all sequences share."""
    if not seqs:
        return 0
    n = min(map(len, seqs))
    first = seqs[0]
    for i in range(n):
        if any(s[i] != first[i] for s in seqs[1:]):
            return i
    return n


def shared_start(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens the prompts share and can read once, each keeping at least its
    last token (whose logits predict what follows it)."""
    return min(common_prefix(prompts), min(map(len, prompts)) - 1)


def within_limits(rows: int, longest: int, max_rows: int, max_cells: int | None) -> bool:
    """Whether a batch of `rows` answers, each holding `longest` columns, stays within both limits."""
    return rows <= max_rows and (max_cells is None or rows * longest <= max_cells)


def pack_groups(groups: Sequence[list[int]], repeats: Sequence[int], max_rows: int,
                costs: Sequence[int] | None = None, max_cells: int | None = None) -> list[list[list[int]]]:
    """Consecutive groups of `plan_batches` packed into batches of at most `max_rows` answers
    (and, with `costs` per prompt, at most `max_cells` answers x the batch's largest cost)."""
    costs = costs if costs is not None else [0] * len(repeats)
    batches: list[list[list[int]]] = []
    rows = longest = 0
    for group in groups:
        size, cost = sum(repeats[i] for i in group), max(costs[i] for i in group)
        if batches and within_limits(rows + size, max(longest, cost), max_rows, max_cells):
            batches[-1].append(group)
            rows, longest = rows + size, max(longest, cost)
        else:
            batches.append([group])
            rows, longest = size, cost
    return batches


def plan_batches(prompts: Sequence[Sequence[int]], repeats: Sequence[int], max_rows: int,
                 costs: Sequence[int] | None = None, max_cells: int | None = None) -> list[list[int]]:
    """Group prompt indices into batches of at most `max_rows` answers that share a long start.

    Prompts are sorted by their tokens, so that those with a common start become
    neighbours; a batch is cut where a neighbour shares less than half of the shorter
    prompt, or where it would exceed `max_rows` answers, or, with `costs` (the columns an
    answer to each prompt holds), `max_cells` answers x the batch's largest cost (a prompt
    beyond either limit alone gets a batch of its own).
    """
    costs = costs if costs is not None else [0] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    batches: list[list[int]] = []
    for i in order:
        if batches:
            last = batches[-1]
            shared = common_prefix([prompts[last[-1]], prompts[i]])
            fits = within_limits(sum(repeats[j] for j in last) + repeats[i], max(costs[j] for j in last + [i]),
                           max_rows, max_cells)
            if fits and shared * 2 >= min(len(prompts[last[-1]]), len(prompts[i])):
                last.append(i)
                continue
        batches.append([i])
    return batches
