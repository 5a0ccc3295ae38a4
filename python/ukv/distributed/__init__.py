"""Tensor-parallel pools in lockstep over ``torch.distributed`` (docs/DISTRIBUTED.md).

Every rank of a tensor-parallel group holds a head shard of the same cache (specs from
``ukv.models`` with ``tp_size``/``tp_rank``, rules in :mod:`ukv.models.sharding`), and
the ranks' allocation decisions must agree exactly. Two modes:

- :class:`ReplicatedPool`: every rank runs its own pool on the same call stream (what
  SGLang does) and the ranks compare one digest per step.
- :class:`LeaderPool` / :class:`FollowerPool`: rank 0 plans; each step it broadcasts its
  plans' packed payloads and the followers apply them, without a core.

Both raise :class:`DivergenceError` at the first step whose plans (or, on request,
tables) differ, naming the plan. Collectives run on a gloo group (host tensors).
"""

from ukv.distributed.divergence import DivergenceError
from ukv.distributed.follower import FollowerPool, FollowerStep
from ukv.distributed.leader import LeaderPool
from ukv.distributed.replicated import ReplicatedPool

__all__ = ["DivergenceError", "FollowerPool", "FollowerStep", "LeaderPool", "ReplicatedPool"]
