"""`gputopo health --as slurm-healthcheck` as Slurm runs it (issue 48): a real slurmctld and
slurmd (Debian's 22.05) on this machine, ``HealthCheckProgram`` calling the command on a sim file
every few seconds (tests/helpers/slurm.py). The test flips the file between a healthy and a
faulty machine and reads what Slurm itself says (``sinfo``, ``scontrol show node``):

- a faulty node is drained with gputopo's reason (``gputopo: <kind> ...``, the kind within the
  20 characters ``sinfo -R`` shows), the same verdict again changes nothing, and the drain is
  resumed once the node is healthy again;
- a drain set by hand with another reason is never resumed, nor its reason replaced;
- a drain with no reason (a node slurm.conf declares ``State=DRAIN``) is never touched.

Slurm only logs a health check's exit code; the slurm-healthcheck dialect exits 0 on a pass and
on a failure alike (gputopo drains the node itself), which every check here shows.
Run alone with `make test-slurm`; `make test` runs them too. Without the packages (or root) they
skip saying so; under ``CI=true`` they fail instead.
"""

from __future__ import annotations

import re

import pytest

from helpers.slurm import FAULTY, HEALTHY, LocalSlurm, running, slurm_or_skip

# The fixture: a Slurm of its own per test (tests/helpers/slurm.py), every daemon stopped by pid
# at the test's end, whatever the test did, and nothing of it left running. (Kept here, not in a
# tests/slurm/conftest.py: a second module named conftest would shadow the suite's own, which
# other tests import.)


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
    yield from running(start_slurm(tmp_path_factory))


@pytest.fixture
def slurm_drained_at_start(tmp_path_factory):
    """A node slurm.conf declares ``State=DRAIN``: drained with no reason at all."""
    yield from running(start_slurm(tmp_path_factory, node_state="DRAIN"))


pytestmark = [pytest.mark.slow, pytest.mark.slurm]

#: A drain reason gputopo owns: the grammar's prefix (docs/fleet.md).
OWNED = "gputopo: "


def _reason_stamp(slurm) -> str:
    """``scontrol show node``'s Reason line, with who set it and when: ``Reason=... [root@T]``."""
    out = slurm.scontrol("show", "node", slurm.name).stdout
    m = re.search(r"^\s*Reason=(.*)$", out, re.M)
    return m.group(1) if m else ""


def test_a_faulty_node_is_drained_with_gputopos_reason_and_resumed_once_healthy(slurm):
    slurm.wait_checks(2)
    node = slurm.node()
    assert not node.drained, f"a healthy node was drained: {node}\n{slurm.diagnostics()}"

    slurm.flip(FAULTY)
    slurm.wait_for(lambda: slurm.node().drained, "the faulty node drained")
    node = slurm.node()
    assert node.reason.startswith(OWNED + "xid "), f"drained with another reason: {node}"
    # sinfo -R shows the reason's first 20 characters: gputopo's mark and the kind are in them.
    shown = [ln for ln in slurm.sinfo_reasons().splitlines()[1:] if slurm.name in ln]
    assert shown and shown[0].startswith(node.reason[:20]), slurm.sinfo_reasons()

    # The same verdict again acts on nothing: once the verdict is stable (the first failing check
    # may also say the Xid counter grew since the last check, and the next one updates gputopo's
    # own reason), the drain keeps its reason, user and time check after check.
    slurm.wait_checks(2)
    stamp = _reason_stamp(slurm)
    assert stamp.startswith(OWNED + "xid "), stamp
    slurm.wait_checks(3)
    assert _reason_stamp(slurm) == stamp, slurm.diagnostics()

    slurm.flip(HEALTHY)
    slurm.wait_for(lambda: not slurm.node().drained, "the healthy node resumed")
    assert slurm.node().reason == ""
    slurm.wait_checks(1)
    assert set(slurm.checks_done()) == {0}, (
        f"slurm-healthcheck exits 0 on a pass and on a failure: {slurm.checks_done()}\n"
        f"{slurm.diagnostics()}")


def test_a_drain_set_by_hand_with_another_reason_is_never_resumed_nor_replaced(slurm):
    slurm.wait_checks(1)
    slurm.drain("rack 12 maintenance")
    before = _reason_stamp(slurm)
    assert before.startswith("rack 12 maintenance")

    slurm.wait_checks(2)  # healthy: a pass resumes only gputopo's drains
    assert slurm.node().drained and _reason_stamp(slurm) == before

    slurm.flip(FAULTY)  # faulty: another owner drained it; its reason stays
    slurm.wait_checks(2)
    assert slurm.node().drained and _reason_stamp(slurm) == before, slurm.diagnostics()

    slurm.flip(HEALTHY)
    slurm.wait_checks(2)
    assert slurm.node().drained and _reason_stamp(slurm) == before, slurm.diagnostics()
    assert set(slurm.checks_done()) == {0}, slurm.diagnostics()


def test_a_drain_with_no_reason_is_never_touched(slurm_drained_at_start):
    slurm = slurm_drained_at_start
    node = slurm.node()
    assert node.drained and node.reason == "", node

    slurm.wait_checks(2)  # healthy: not resumed
    node = slurm.node()
    assert node.drained and node.reason == "", f"{node}\n{slurm.diagnostics()}"

    slurm.flip(FAULTY)  # faulty: not given gputopo's reason either
    slurm.wait_checks(2)
    node = slurm.node()
    assert node.drained and node.reason == "", f"{node}\n{slurm.diagnostics()}"

    slurm.flip(HEALTHY)
    slurm.wait_checks(2)
    node = slurm.node()
    assert node.drained and node.reason == "", f"{node}\n{slurm.diagnostics()}"
