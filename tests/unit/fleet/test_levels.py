"""`health --level quick|pairs` without starting gate (gputopo/fleet/levels.py): which GPUs are
measured (idle ones only), and how gate's answer becomes health's findings."""

import pytest

from gputopo.fleet.checks import NOT_JUDGED
from gputopo.fleet.levels import level_check, split_idle
from gputopo.report.gate_findings import FALLBACK_KIND, gate_findings
from gputopo.model import Finding
from gputopo.probe.nvml_processes import GpuUse


def _use(*pids):
    return [GpuUse(i, f"GPU-{i}", f"00000000:0{i}:00.0", p, "" if p is not None else "NOT_SUPPORTED")
            for i, p in enumerate(pids)]


def test_only_gpus_nvml_lists_no_process_on_are_idle():
    idle = split_idle(_use([], [77], None, []))
    assert idle.gpus == [0, 3]
    assert idle.left == [(1, "in use by pid 77"), (2, "not known to be idle: running processes not read (NOT_SUPPORTED)")]


@pytest.mark.parametrize("level, name", [("quick", "copies"), ("pairs", "allreduce")])
def test_fewer_than_two_idle_gpus_leave_the_level_not_judged_saying_why(level, name):
    c = level_check(level, None, 60.0, [], use=_use([5], [], [6]))
    assert c.name == name and c.applicability == NOT_JUDGED and c.status == NOT_JUDGED
    assert "1 idle GPU(s): no pair to measure" in c.basis
    assert "GPU 0 not judged: in use by pid 5" in c.basis and "GPU 2 not judged: in use by pid 6" in c.basis


def test_a_budget_spent_before_gate_could_start_is_not_judged():
    c = level_check("quick", None, 2.5, [], use=_use([], []))
    assert c.applicability == NOT_JUDGED and "budget left (2.5 s)" in c.basis


DOC = {"verdict": "fail", "selection": {"gpus": [1, 2, 3]},
       "gpus": [{"gpu": 1, "status": "ok"},
                {"gpu": 2, "status": "broken", "kind": "nvlink-down", "detail": "GPU 2: 0 NVLinks active",
                 "action": "reset GPU 2"}],
       "pairs": [{"gpus": [1, 2], "status": "broken", "kind": "corrupt", "detail": "peer copy wrong data"},
                 {"gpus": [1, 3], "status": "degraded", "kind": "p2p-slow-words", "detail": "at the PCIe rate"},
                 {"gpus": [2, 3], "status": "not-judged", "detail": "the budget"}],
       "allreduce": {"status": "broken", "kind": "hang", "detail": "all_reduce over the set: hang"}}


def test_gates_broken_and_degraded_parts_become_findings_once():
    known = [Finding("nvlink-down", "error", "GPU 2: 0 NVLinks active", gpus=[2])]  # the passive check's
    got = gate_findings(DOC, known)
    assert [(f.kind, f.severity, f.gpus) for f in got] == [
        ("corrupt", "error", [1, 2]), (FALLBACK_KIND, "warning", [1, 3]), ("hang", "error", [1, 2, 3])]
    assert got[1].message.startswith("p2p-slow-words ")  # a word that is no finding kind is kept in the text
    assert all(f.evidence["gate"]["status"] in ("broken", "degraded") for f in got)
    assert len(gate_findings(DOC, [])) == 4  # without the passive one, gate's nvlink-down is said
