"""Shared test setup: GPU-only tests skip cleanly where no CUDA device is usable."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Real outputs kept in the repository (sources in tests/fixtures/README.md).
FIXTURES = REPO / "tests" / "fixtures"


def _cuda_usable() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.device_count() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if "gpu" in it.keywords]
    if not gpu_items or _cuda_usable():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working driver")
    for it in gpu_items:
        it.add_marker(skip)


@pytest.fixture
def fixtures_dir() -> Path:
    assert FIXTURES.is_dir(), f"fixtures missing from the repository: {FIXTURES}"
    return FIXTURES
