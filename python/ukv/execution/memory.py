"""The pool's byte buffer: one ``uint8`` tensor every sub-pool's views are built over.

On ``cuda`` and ``cpu`` it is zeroed at construction (a padding write to physical token
0 lands in zeros; a page nobody wrote reads zeros); on ``meta`` it holds no memory.
"""

from __future__ import annotations

import torch


def allocate(total_bytes: int, device: torch.device) -> torch.Tensor:
    """A ``[total_bytes]`` uint8 buffer on ``device`` (zeroed unless ``meta``)."""
    if device.type == "meta":
        return torch.empty(total_bytes, dtype=torch.uint8, device=device)
    return torch.zeros(total_bytes, dtype=torch.uint8, device=device)
