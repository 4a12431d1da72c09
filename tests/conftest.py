"""Shared test setup: GPU-only tests skip cleanly where no CUDA device is usable; NVML-only
tests (marker ``nvml``) run wherever an NVIDIA driver answers, even with a CPU-only torch."""

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


def _nvml_usable() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    gpu_items = [it for it in items if "gpu" in it.keywords]
    if gpu_items and not _cuda_usable():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a working driver and CUDA torch")
        for it in gpu_items:
            it.add_marker(skip)
    nvml_items = [it for it in items if "nvml" in it.keywords and "gpu" not in it.keywords]
    if nvml_items and not _nvml_usable():
        skip = pytest.mark.skip(reason="needs an NVIDIA driver (NVML) with at least one GPU")
        for it in nvml_items:
            it.add_marker(skip)


def pytest_configure(config):
    """Before anything runs (module- and session-scoped fixtures that run the CLI included),
    the history database is one under a temporary folder, never the real
    ~/.local/share/gputopo/history.sqlite (issue 19); each test then gets its own below."""
    import os
    import tempfile

    os.environ["GPUTOPO_HISTORY"] = os.path.join(tempfile.mkdtemp(prefix="gputopo-test-history-"),
                                                 "history.sqlite")


@pytest.fixture(autouse=True)
def _history_in_tmp(tmp_path_factory, monkeypatch):
    """Every test (and every CLI it starts) records its runs in a database of its own under
    pytest's tmp folder, never in the real ~/.local/share/gputopo/history.sqlite (issue 19)."""
    monkeypatch.setenv("GPUTOPO_HISTORY", str(tmp_path_factory.mktemp("history") / "history.sqlite"))


@pytest.fixture
def fixtures_dir() -> Path:
    assert FIXTURES.is_dir(), f"fixtures missing from the repository: {FIXTURES}"
    return FIXTURES


def wait_for_first_line(proc, path: Path, what: str, timeout_s: float = 120.0) -> None:
    """Wait until ``path`` (a JSONL file a running ``proc`` appends to) has a line, so a test
    can interrupt the run mid-way; fails if ``proc`` ended before that ("the {what} ended...")."""
    import time

    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        if path.exists() and path.read_text().count("\n") >= 1:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the {what} ended before it could be interrupted"
