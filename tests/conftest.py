"""Test configuration shared by every ukv test.

CPU runs (the default, and CI) execute the Triton kernels under Triton's interpreter,
which must be switched on before ``triton`` is first imported; that is why this file
sets the variable at import time, before any test module imports ukv. A GPU run sets
``UKV_TEST_DEVICE=cuda`` and leaves the interpreter off.
"""

from __future__ import annotations

import os

TEST_DEVICE = os.environ.get("UKV_TEST_DEVICE", "cpu")
if TEST_DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``gpu`` when no CUDA device is present."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    """The device pools and kernels under test live on (``UKV_TEST_DEVICE``, default cpu)."""
    return TEST_DEVICE
