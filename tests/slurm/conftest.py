"""The real-Slurm tests' fixture: a Slurm of its own per test (tests/helpers/slurm.py), every
daemon stopped by pid at the test's end, whatever the test did, and nothing of it left running."""

from __future__ import annotations

import pytest

from helpers.slurm import HEALTHY, LocalSlurm, slurm_or_skip


def start_slurm(tmp_path_factory, node_state: str = "UNKNOWN"):
    programs = slurm_or_skip()
    # A short folder: munged's socket path must fit a unix socket's 108 bytes.
    root = tmp_path_factory.mktemp("slurm")
    sim = root / "node.toml"
    sim.write_text(HEALTHY)
    cluster = LocalSlurm(root, programs, sim, node_state=node_state)
    return cluster


@pytest.fixture
def slurm(tmp_path_factory):
    yield from _run(start_slurm(tmp_path_factory))


@pytest.fixture
def slurm_drained_at_start(tmp_path_factory):
    """A node slurm.conf declares ``State=DRAIN``: drained with no reason at all."""
    yield from _run(start_slurm(tmp_path_factory, node_state="DRAIN"))


def _run(cluster: LocalSlurm):
    try:
        cluster.start()
        yield cluster
    finally:
        left = cluster.stop()
    assert not left, ("processes still running 30 s after the daemons were stopped (killed):\n"
                      + "\n".join(left))
