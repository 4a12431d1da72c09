"""How `health` treats a drain Slurm made after gate's Prolog failed (gputopo/fleet/prolog.py):
never its own, never resumed; gate's kept verdict said in every dialect beside health's own
verdict, which it never replaces."""

import json

import pytest

from gputopo.fleet.checks import APPLICABLE, CheckResult
from gputopo.fleet.dialects import dialects_of, exit_code, render
from gputopo.fleet.prolog import PROLOG_ERROR, GateKept, is_prolog_error, prolog_drain_text
from gputopo.fleet.slurm import NodeState, decide
from gputopo.fleet.verdict import NodeVerdict
from gputopo.model import Finding
from gputopo.model.reason import NPD_BYTES, is_reason, parse

GATE_REASON = ("gputopo: p2p-unsupported gpus0-1 NVLink up but peer copies at the PCIe rate; "
               "gputopo: nvlink-down gpu3 2 NVLinks down")
GATE_FAIL = {"command": "gate", "verdict": "fail", "reason": GATE_REASON, "time": "2026-12-07T21:00:00+00:00",
             "job": "42", "exit_code": 1}


def _verdict(findings=(), gate=None) -> NodeVerdict:
    checks = [CheckResult("gpus", APPLICABLE, "NVML health", list(findings)),
              CheckResult("pcie", APPLICABLE, "PCIe links")]
    return NodeVerdict("passive", checks, 45.0, 0.5, 1_796_000_000.0, machine="m", gate=gate)


def test_the_kept_document_is_read_as_gates_and_nothing_else():
    g = GateKept.from_doc(GATE_FAIL)
    assert g is not None and g.failed and g.job == "42" and g.reason == GATE_REASON
    assert GateKept.from_doc({"command": "health", "verdict": "fail"}) is None
    assert GateKept.from_doc(None) is None and GateKept.from_doc({"verdict": 3}) is None
    assert not GateKept.from_doc({"verdict": "pass", "exit_code": 0}).failed
    # a verdict that judged nothing fails the Prolog only where gate exited non-zero (--on-unknown drain)
    assert GateKept.from_doc({"verdict": "not-judged", "exit_code": 1}).failed
    assert not GateKept.from_doc({"verdict": "not-judged", "exit_code": 0}).failed


def test_a_verdict_kept_for_another_machine_is_not_this_ones():
    """A gate run on a simulated machine (or another) kept in the same folder says nothing of the
    machine health reads; a document that names no machine (could not run) is taken."""
    doc = {**GATE_FAIL, "source": "sim:dgx-h100-unregistered"}
    assert GateKept.from_doc(doc, "sim:dgx-h100-unregistered") is not None
    assert GateKept.from_doc(doc, "nvml") is None
    assert GateKept.from_doc(doc, "sim:dgx-h100") is None
    assert GateKept.from_doc(GATE_FAIL, "nvml") is not None


@pytest.mark.parametrize("verdict", ["pass", "warn", "fail", "not-judged"])
def test_a_prolog_error_drain_is_never_resumed_nor_taken_over(verdict):
    state = NodeState("n1", "drained", PROLOG_ERROR)
    assert is_prolog_error(state.reason)
    action = decide(state, verdict, "gputopo: xid gpu0 79", "drain")
    assert action.kind == "none" and not action.settled  # looked at again next time


def test_the_drain_is_said_explained_only_by_a_failing_gate_verdict():
    said = prolog_drain_text(GateKept.from_doc(GATE_FAIL))
    assert "explained by gate fail at 2026-12-07T21:00:00+00:00 (job 42)" in said and GATE_REASON in said
    said = prolog_drain_text(GateKept.from_doc({**GATE_FAIL, "verdict": "pass", "exit_code": 0, "reason": ""}))
    assert "not explained" in said and "gate pass" in said
    assert "not explained" in prolog_drain_text(None)


@pytest.mark.parametrize("dialect", dialects_of("health"))
def test_every_dialect_says_gates_failure_and_keeps_healths_own_verdict(dialect):
    gate = GateKept.from_doc(GATE_FAIL)
    plain, with_gate = _verdict(), _verdict(gate=gate)
    assert with_gate.verdict == plain.verdict == "pass"
    assert exit_code(dialect, with_gate.verdict) == exit_code(dialect, plain.verdict)
    out = render(dialect, with_gate, "n1 left as it is")
    assert "p2p-unsupported gpus0-1" in out and "p2p-unsupported" not in render(dialect, plain, "n1 left as it is")
    if dialect == "json":
        doc = json.loads(out)
        assert doc["verdict"] == "pass" and doc["gate_kept"]["reason"] == GATE_REASON and doc["gate_kept"]["failed"]
    if dialect == "npd":
        assert len(out.encode()) <= NPD_BYTES and out.startswith("gputopo ok; last gate failed: gputopo: ")
        assert is_reason(out.split("last gate failed: ", 1)[1])
    if dialect == "nagios":
        assert out.startswith("OK - ") and "last gate fail at 2026-12-07T21:00:00+00:00 (job 42)" in out


def test_npd_on_a_failure_keeps_healths_reason_first_and_counts_what_did_not_fit():
    xid = Finding("xid", "error", "Xid 79: GPU has fallen off the bus", gpus=[0])
    line = render("npd", _verdict([xid], GateKept.from_doc(GATE_FAIL)))
    assert len(line.encode()) <= NPD_BYTES and is_reason(line) and line.startswith("gputopo: xid gpu0")
    segs, more = parse(line)
    assert len(segs) + more == 3  # health's one and gate's two: none unsaid


def test_a_passing_gate_verdict_is_said_where_there_is_room_and_changes_nothing_else():
    gate = GateKept.from_doc({"command": "gate", "verdict": "pass", "time": "T", "exit_code": 0})
    v = _verdict(gate=gate)
    assert render("npd", v) == render("npd", _verdict())
    assert "gate" not in render("slurm-healthcheck", v, "x")
    assert json.loads(render("json", v))["gate_kept"]["failed"] is False
    assert "last gate pass at T" in render("nagios", v)
