"""The divergence check: do all ranks' pools agree after this step?

Each rank folds the digests of the step's plans (and, when asked, of its tables) into one
int64; one all-gather of that word per step compares them. Only when the words differ do
the ranks exchange their per-plan digests, API call names and plan summaries, to name
the first plan that differs. The common path is one 8-byte collective.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ukv.distributed.digest import chain, digest_words
from ukv.distributed.group import Group
from ukv.errors import UkvError

__all__ = [
    "FAILED_WORD",
    "DivergenceError",
    "StepFacts",
    "check_failed",
    "check_plans",
    "check_step",
]

FAILED_WORD = -0x0BAD_57E9
"""The word a rank that failed to apply its step sends instead of its digest (any word
unlike the others' makes every rank exchange facts; the facts name the failure)."""


class DivergenceError(UkvError, RuntimeError):
    """Tensor-parallel ranks' pools no longer agree (plans or tables differ).

    Attributes:
        step: The step at which the ranks first disagreed.
        op: Index of the first differing plan within that step, or None when every plan
            agreed and only the tables differ.
        label: The API call behind that plan on each rank (rank order), the
            sub-pools whose tables differ, or (a rank failed to apply the step) each
            rank's failure, ``""`` for ranks that applied it.
    """

    def __init__(self, message: str, step: int, op: int | None, label: list[str]) -> None:
        super().__init__(message)
        self.step = step
        self.op = op
        self.label = label


@dataclass
class StepFacts:
    """What one rank knows about its step, exchanged only when the words differ.

    Attributes:
        digests: One digest per plan of the step.
        labels: The API call behind each plan.
        summaries: What each plan did (ids, moves, rows).
        tables: Per sub-pool digest of ``[v2p | p2v]`` (empty when not checked).
        failure: Why this rank could not apply the step (None: it did).
    """

    digests: list[int]
    labels: list[str]
    summaries: list[str]
    tables: list[int] = field(default_factory=list)
    failure: str | None = None


def check_step(
    group: Group, step: int, word: int, facts: Callable[[], StepFacts], names: list[str]
) -> None:
    """Compare this step across ranks; raise on every rank if any differs.

    Args:
        group: The ranks.
        step: The step number (same on every rank).
        word: This rank's digest of the step.
        facts: Makes this rank's account of the step (called only when the words differ).
        names: Sub-pool names, for the message.

    Raises:
        DivergenceError: Naming the step, the first differing plan and what it was on
            each rank (or the sub-pools whose tables differ).
    """
    words = group.all_gather_word(word)
    if all(w == words[0] for w in words):
        return
    everyone: list[StepFacts] = group.all_gather_object(facts())
    raise _explain(step, everyone, names)


def check_plans(
    group: Group,
    step: int,
    digests: list[int],
    tables: list[np.ndarray] | None,
    account: Callable[[], tuple[list[str], list[str]]],
    names: list[str],
) -> None:
    """Fold a step's plan digests (and tables) into this rank's word and compare ranks.

    Every mode's ranks (replicated, leader, follower) make their word here, so the values
    and their order are the same on every rank by construction.

    Args:
        group: The ranks.
        step: The step number (same on every rank).
        digests: One digest per plan of the step, in execution order.
        tables: Each sub-pool's ``[v2p | p2v]`` as int64 host words, or None when the
            tables are not checked.
        account: Makes ``(labels, summaries)``: the API call behind each plan and what it
            did (called only when the words differ).
        names: Sub-pool names, for the message.

    Raises:
        DivergenceError: As :func:`check_step`.
    """
    table_digests = [] if tables is None else [digest_words(t) for t in tables]
    word = chain([step, *digests, *table_digests])

    def facts() -> StepFacts:
        labels, summaries = account()
        return StepFacts(list(digests), labels, summaries, table_digests)

    check_step(group, step, word, facts, names)


def check_failed(group: Group, step: int, why: str, names: list[str]) -> DivergenceError:
    """Join the step's check as a rank that failed to apply it: the others (which made
    their words with :func:`check_plans`) raise with this rank's failure, and so does
    this one (the error is returned for the caller to raise from its cause).

    Args:
        group: The ranks.
        step: The step that failed.
        why: What went wrong (named in every rank's message).
        names: Sub-pool names, for the message.
    """
    try:
        check_step(group, step, FAILED_WORD, lambda: StepFacts([], [], [], failure=why), names)
    except DivergenceError as exc:
        return exc
    raise AssertionError("a failed rank's word equalled every other rank's")  # pragma: no cover


def _explain(step: int, facts: list[StepFacts], names: list[str]) -> DivergenceError:
    failed = [r for r, f in enumerate(facts) if f.failure is not None]
    if failed:
        r = failed[0]
        return DivergenceError(
            f"tensor-parallel ranks diverged at step {step}: rank {r} failed to apply it "
            f"({facts[r].failure})",
            step,
            None,
            [f.failure or "" for f in facts],
        )
    longest = max(len(f.digests) for f in facts)
    for op in range(longest):
        seen = [f.digests[op] if op < len(f.digests) else None for f in facts]
        if all(s == seen[0] for s in seen):
            continue
        labels = [f.labels[op] if op < len(f.labels) else "(no such plan)" for f in facts]
        what = "; ".join(
            f"rank {r}: {labels[r]} -> " + (f.summaries[op] if op < len(f.summaries) else "nothing")
            for r, f in enumerate(facts)
        )
        return DivergenceError(
            f"tensor-parallel ranks diverged at step {step}, plan {op} of the step: {what}",
            step,
            op,
            labels,
        )
    bad = [
        names[i] if i < len(names) else str(i)
        for i in range(max(len(f.tables) for f in facts))
        if len({f.tables[i] if i < len(f.tables) else None for f in facts}) > 1
    ]
    return DivergenceError(
        f"tensor-parallel ranks diverged at step {step}: every plan agrees but the tables "
        f"of sub-pools {bad} differ",
        step,
        None,
        bad,
    )
