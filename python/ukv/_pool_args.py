"""The checks of :class:`~ukv.UnifiedKVPool`'s constructor arguments.

Each returns the checked value (normalised) or raises
:class:`~ukv.errors.PoolConfigError` naming the bad value, before the pool builds
anything.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import torch

from ukv.errors import PoolConfigError
from ukv.specs import Spec

DEVICE_TYPES = ("cuda", "cpu", "meta")


def positive(name: str, value: object) -> int:
    """``value`` as a positive int below 2**64."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) <= 0:
        raise PoolConfigError(f"invalid {name} = {value!r}: must be a positive int")
    if int(value) >= 1 << 64:
        raise PoolConfigError(f"invalid {name} = {value!r}: must be below 2**64")
    return int(value)


def device_of(device: str | torch.device) -> torch.device:
    """The pool's device; a CUDA device is pinned to its index at construction."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise PoolConfigError(f"invalid device = {device!r}: not a torch device") from None
    if dev.type not in DEVICE_TYPES:
        raise PoolConfigError(f"invalid device = {device!r}: must be cuda, cpu or meta")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PoolConfigError(f"invalid device = {device!r}: CUDA is not available")
    if dev.type == "cuda":
        # Pinned at construction: a later torch.cuda.set_device elsewhere changes nothing.
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if not 0 <= index < torch.cuda.device_count():
            raise PoolConfigError(f"invalid device = {device!r}: no CUDA device {index}")
        dev = torch.device("cuda", index)
    return dev


def check_specs(specs: Sequence[Spec]) -> list[Spec]:
    """Two specs (one ``grow="up"``, one ``"down"``), or three with one ``"middle"`` band
    floating between them; unique names."""
    specs = list(specs) if isinstance(specs, (list, tuple)) else []
    if len(specs) not in (2, 3) or not all(isinstance(s, Spec) for s in specs):
        raise PoolConfigError(
            f"invalid specs = {specs!r}: need two specs (one grow='up', one grow='down'), "
            "or three with one grow='middle' between them"
        )
    grows = sorted(s.grow for s in specs)
    if grows not in (["down", "up"], ["down", "middle", "up"]):
        raise PoolConfigError(
            f"invalid specs grow = {grows}: need one 'up' and one 'down', plus at most one 'middle'"
        )
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise PoolConfigError(f"invalid specs name = {dup!r}: names must be unique")
    return specs


def check_bind(bind: Mapping[str, str] | None, specs: list[Spec]) -> dict[str, int]:
    """``{non_owner name: owner index}`` from the ``bind`` argument, validated."""
    if bind is None:
        return {}
    if not isinstance(bind, Mapping):
        raise PoolConfigError(f"invalid bind = {bind!r}: must be a mapping of names")
    index = {s.name: i for i, s in enumerate(specs)}
    owners: dict[str, int] = {}
    for user, owner in bind.items():
        for name in (user, owner):
            if name not in index:
                raise PoolConfigError(
                    f"invalid bind = {dict(bind)!r}: no sub-pool {name!r} (have {list(index)})"
                )
        if user == owner or owner in bind:
            raise PoolConfigError(
                f"invalid bind = {dict(bind)!r}: {user!r} must bind an id owner other than itself"
            )
        if not (specs[index[user]].is_paged and specs[index[owner]].is_paged):
            raise PoolConfigError(
                f"invalid bind = {dict(bind)!r}: only paged (KV) sub-pools share virtual ids"
            )
        owners[user] = index[owner]
    return owners
