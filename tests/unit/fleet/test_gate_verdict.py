"""`gputopo gate`'s verdicts (gputopo/fleet/gate.py) as a table: per simulated machine (each named
cause has one), the copies a gate would measure made here (a rate and a wrong count per pair),
then the verdict, the narrowest scope blamed, its kind, and every dialect's exit code. The scan
is the real probe's on the fake NVML; only the measurements are written by hand, so each row
says which measured fact leads to which verdict (the copies themselves: tests/cli/test_cli_gate.py)."""

import pytest

from gputopo.bench.options import all_pairs
from gputopo.fleet.dialects import gate_exit_code
from gputopo.fleet.gate import best_other_set, judge_gate
from gputopo.fleet.gate_output import gate_npd_line, render_gate
from gputopo.model import Measurement
from gputopo.model.reason import NPD_BYTES, REASON_RE
from gputopo.model.step_failure import StepFailure
from gputopo.report.expected import pair_rate
from gputopo.report.rules import scan_findings
from gputopo.sim.scan import scan_simulated

SIZE = 4 << 20


def copies(topo, pair, gbps=None, wrong=0):
    """The two copies of ``pair`` at ``gbps`` (default: 80 % of its theoretical rate)."""
    a, b = pair
    rate = gbps if gbps is not None else 0.8 * (pair_rate(topo, a, b).gbps or 10.0)
    return [Measurement("p2p.copy", (a, b), SIZE, [SIZE / rate / 1e9], "modeled", "sim", "simulated-gpus",
                        str(topo.link_class(a, b)), d, wrong=wrong) for d in (f"{a}->{b}", f"{b}->{a}")]


def gate(name, gpus=None, rates=None, wrong=None, failures=(), not_measured=None, stands_in=False):
    topo = scan_simulated(name)
    findings = scan_findings(topo)
    gpus = list(range(len(topo.gpus))) if gpus is None else gpus
    ms = []
    for p in all_pairs(gpus):
        if not_measured and p in not_measured:
            continue
        if any(p == tuple(f.gpus) for f in failures):
            continue
        ms += copies(topo, p, (rates or {}).get(p), (wrong or {}).get(p, 0))
    v = judge_gate(topo, findings, gpus, {"gpus": gpus, "source": "test"}, measurements=ms, failures=list(failures),
              not_measured=not_measured, fabric_name="sim", stands_in=stands_in, budget_s=10, used_s=1, time_s=0)
    v.best_other = best_other_set(topo, findings, v)
    return v


def hang(a, b):
    return StepFailure("hang", f"p2p:{a}-{b}", "p2p", [a, b], "NV18", "no progress for 10 s")


def slow_gpu4(topo_name="dgx-h100"):
    return {p: 20.0 for p in all_pairs(range(8)) if 4 in p}


#: name, gpus, rates, wrong, failures, not measured -> verdict, (subject, scope, kind) of the first problem
ROWS = [
    ("dgx-h100", None, None, None, (), None, "pass", None),
    ("dgx-h100-unregistered", None, None, None, (), None, "fail", ("node", "fabric-manager", "nvlink-fabric")),
    ("dgx-h100-unregistered", [3], None, None, (), None, "pass", None),  # a GPU alone: fabric not applicable
    ("dgx-h100-p2p-not-ok", None, None, None, (), None, "warn", ("gpus2,5", "link", "p2p-unsupported")),
    ("dgx-h100-nvlink-at-pcie", None, {(1, 6): 40.0}, None, (), None, "warn", ("gpus1,6", "link", "slow")),
    ("dgx-h100-reset-pending", None, None, None, (), None, "fail", ("gpu3", "gpu", "xid")),
    ("dgx-h100-reset-pending", [0, 1], None, None, (), None, "pass", None),  # GPU 3 is not in the set
    ("dgx-h100", None, slow_gpu4(), None, (), None, "warn", ("gpu4", "gpu", "slow")),
    ("dgx-h100", None, {(2, 3): 150.0}, None, (), None, "warn", ("gpus2,3", "link", "slow")),
    ("dgx-h100", None, None, None, (hang(0, 5),), None, "fail", ("gpus0,5", "link", "hang")),
    ("dgx-h100", None, None, None, (), {(6, 7): "left out by the time model"}, "not-judged", None),
    ("seed-8gpu", [0, 2], None, {(0, 2): 1048}, (), None, "fail", ("host", "host-path", "corrupt")),
    ("seed-8gpu-healthy", [0, 2], None, {(0, 2): 3}, (), None, "fail", ("gpus0,2", "link", "corrupt")),
    ("pcie-4gpu", None, {p: 3.0 for p in all_pairs(range(4))}, None, (), None, "pass", None),  # rate not judged
    ("h100-sxm-1gpu", None, None, None, (), None, "pass", None),
    ("h100-sxm-shared-vm", None, None, None, (), None, "pass", None),  # its fabric mask: one GPU, not applicable
    ("degraded-nvlink", None, None, None, (), None, "fail", ("gpu5", "link", "nvlink-down")),
]
CODES = {"json": {"pass": 0, "warn": 0, "fail": 1, "not-judged": 2},
         "npd": {"pass": 0, "warn": 0, "fail": 1, "not-judged": 2},
         "nagios": {"pass": 0, "warn": 1, "fail": 2, "not-judged": 3},
         "slurm-prolog": {"pass": 0, "warn": 0, "fail": 1, "not-judged": 0}}


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}-{r[6]}-{k}" for k, r in enumerate(ROWS)])
def test_verdict_scope_kind_and_exit_codes(row):
    name, gpus, rates, wrong, failures, nm, verdict, first = row
    v = gate(name, gpus, rates, wrong, failures, nm)
    assert v.verdict == verdict, v.summary()
    problems = v.problems()
    if first is None:
        assert v.reason() == ""
    else:
        subject, j, _ = problems[0]
        assert (subject, j.scope, j.kind) == first, problems
        assert j.action  # an action of that size
        assert REASON_RE.match(v.reason())
        assert v.reason().startswith(f"gputopo: {first[2]} {first[0]} ")
        assert len(gate_npd_line(v).encode()) <= NPD_BYTES
    for dialect, codes in CODES.items():
        assert gate_exit_code(dialect, verdict) == codes[verdict]
        assert render_gate(dialect, v, codes[verdict], "kept")
    if verdict == "not-judged":
        assert gate_exit_code("slurm-prolog", verdict, "drain") == 1
        assert "left out by the time model" in "; ".join(v.not_judged())


def test_every_gpu_is_named_by_uuid_and_bus_id():
    v = gate("dgx-h100-reset-pending")
    g3 = next(g for g in v.gpus if g.index == 3)
    assert g3.uuid == "GPU-3575d804-1a15-0682-1d33-d1427e719f64" and g3.bus_id == "00000000:5D:00.0"
    assert "nvidia-smi -r -i 00000000:5D:00.0" in g3.judgement.action
    # its pairs are broken by it, said once (on the GPU), not on each pair
    pairs3 = [p for p in v.pairs if 3 in p.gpus]
    assert all(p.judgement.status == "broken" and p.judgement.evidence["explained_by"] == "gpu3" for p in pairs3)
    assert [s for s, _, _ in v.problems()] == ["gpu3"]
    assert v.best_other["gpus"] is None and "7 of 8" in v.best_other["why"]


def test_the_fabric_manager_is_named_once_with_its_evidence():
    v = gate("dgx-h100-unregistered")
    (subject, j, also), = v.problems()
    assert subject == "node" and len(also) == 8
    assert "not-started" in j.cause and "systemctl restart nvidia-fabricmanager" in j.action
    assert "service itself was not read" in j.cause  # a cause only as far as the facts read go


def test_nvlink_up_at_pcie_rate_says_both_rates():
    v = gate("dgx-h100-nvlink-at-pcie", rates={(1, 6): 40.0})
    p = next(p for p in v.pairs if p.gpus == (1, 6))
    assert p.judgement.evidence["pcie_gbps"] == 63.0 and p.judgement.evidence["nvlink_gbps"] == 450.0
    assert "18 NVLink(s)" in p.judgement.cause
    assert v.best_other["gpus"] == list(range(8))  # no other set of 8: the checked one, degraded
    four = gate("dgx-h100-nvlink-at-pcie", gpus=[0, 1, 6, 7], rates={(1, 6): 40.0})
    assert four.verdict == "warn" and len(four.best_other["gpus"]) == 4
    assert not {1, 6} <= set(four.best_other["gpus"]) and four.best_other["state"] == "ok"


def test_layers_and_not_applicable():
    alone = gate("h100-sxm-1gpu")
    assert alone.pairs == [] and "not applicable" in alone.gpus[0].layers["measured"]
    pcie = gate("pcie-4gpu", rates={p: 3.0 for p in all_pairs(range(4))})
    assert all("no NVLink bridge (NVLink not applicable)" in p.layers["declared"] for p in pcie.pairs)
    assert all("rate not" in p.judgement.detail for p in pcie.pairs)
    h100 = gate("dgx-h100")
    assert all(set(p.layers) == {"declared", "reported", "measured"} for p in h100.pairs)
    assert all("against NVLink v4 x 18 links" in p.judgement.detail for p in h100.pairs)


def test_stand_in_rates_are_never_judged():
    v = gate("dgx-h100", rates={p: 0.1 for p in all_pairs(range(8))}, stands_in=True)
    assert v.verdict == "pass" and all("stands in" in p.judgement.detail for p in v.pairs)


def test_an_unmeasured_pair_is_never_ok():
    v = gate("dgx-h100", not_measured={(0, 1): "the budget (10 s) was spent before its copies started"})
    p = next(p for p in v.pairs if p.gpus == (0, 1))
    assert p.judgement.status == "not-judged" and "budget" in p.judgement.detail
    assert v.verdict == "not-judged"
