"""Seeded arrivals: prompts with shared prefixes (so the radix caches hit) and lengths.

The trace depends on the seed and the configuration's trace fields only, never on the
pool, so SGLang's pool and the drop-in see the same requests at the same iterations.
A request's output tokens are fixed too: the token a forward samples at position ``p``
is :func:`sampled_token` of (request, ``p``), whatever the batch it ran in, so a
request retracted and recomputed continues with the same tokens.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sglang_scheduler.config import Config


@dataclasses.dataclass(frozen=True)
class Arrival:
    """One request of the trace."""

    index: int
    step: int  # the scheduler iteration it arrives at
    prompt: tuple[int, ...]
    max_new_tokens: int

    @property
    def rid(self) -> str:
        return f"r{self.index}"


def sampled_token(index: int, position: int, vocab: int) -> int:
    """The token request ``index`` samples for ``position`` (never 0)."""
    h = (index * 0x9E3779B1 + position * 0x85EBCA6B + 0x165667B1) & 0xFFFFFFFF
    h ^= h >> 15
    h = (h * 0x2C1B3C6D) & 0xFFFFFFFF
    h ^= h >> 12
    return 1 + h % (vocab - 1)


def arrivals(cfg: Config) -> list[Arrival]:
    """Every request of the trace, in arrival order."""
    rng = np.random.default_rng(cfg.seed)
    prefixes = [
        tuple(int(t) for t in rng.integers(1, cfg.vocab, size=rng.integers(*cfg.prefix_len)))
        for _ in range(cfg.num_prefixes)
    ]
    out: list[Arrival] = []
    for step in range(cfg.steps):
        for _ in range(rng.poisson(cfg.arrival_rate)):
            shared = prefixes[int(rng.integers(0, len(prefixes)))]
            suffix = rng.integers(1, cfg.vocab, size=rng.integers(*cfg.suffix_len))
            prompt = shared + tuple(int(t) for t in suffix)
            prompt = prompt[: cfg.context_len // 2]
            n_out = int(rng.integers(*cfg.output_len))
            out.append(Arrival(len(out), step, prompt, n_out))
    return out
