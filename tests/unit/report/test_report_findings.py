"""Every finding kind comes from its fault and is absent on the healthy twin; causes follow the
host facts; class verdicts roll up."""

from __future__ import annotations

import pytest

from conftest_report import _m, measurements, numerics, write_run
from gputopo.model import Measurement
from gputopo.report.bandwidth_findings import SLOW_EFFICIENCY, STAGED_RATIO
from gputopo.report.like_gpus import OUTLIER_RATIO
from gputopo.report.summary import summarize_dir

#: fault injected -> finding kind it must produce (and the pair or GPU it must name).
CASES = [
    ("corrupt-sys", "corrupt", [0, 4]),
    ("nan-dp", "nan", [5, 6]),
    ("diverged-dp", "diverged", [6, 7]),
    ("slow-pair", "slow", [0, 2]),
    ("slow-pair", "outlier", [0, 2]),
    ("staged-faster", "p2p-slower-than-staged", [1, 3]),
    ("hang", "hang", [2, 6]),
    ("crash", "crash", [3, 7]),
    ("nvlink-down", "nvlink-down", [2]),
    ("pcie-width", "pcie-downgraded", [1]),
    ("link-errors", "link-errors", [3]),
    ("p2p-ns", "p2p-unsupported", [0, 1]),
    ("iommu", "iommu", None),
    ("acs", "acs", [4, 5, 6, 7]),
]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return summarize_dir(write_run(tmp_path_factory.mktemp("healthy") / "run", []))


def test_healthy_twin_has_no_findings(healthy):
    assert healthy.findings == []
    assert healthy.verdict == "ok"
    assert {c.link_class: c.verdict for c in healthy.classes} == {"NV4": "ok", "NODE": "ok", "SYS": "ok"}


@pytest.mark.parametrize("fault,kind,gpus", CASES, ids=[f"{c[0]}->{c[1]}" for c in CASES])
def test_fault_produces_its_finding(tmp_path, healthy, fault, kind, gpus):
    s = summarize_dir(write_run(tmp_path / "run", [fault]))
    hits = [f for f in s.findings if f.kind == kind]
    assert hits, f"{fault} produced {[f.kind for f in s.findings]}"
    if gpus is not None:
        assert any(f.gpus == gpus for f in hits), [f.gpus for f in hits]
    assert not [f for f in healthy.findings if f.kind == kind]
    for f in hits:
        assert f.message and f.severity in ("error", "warning", "info")


def test_corrupt_on_sys_with_iommu_names_the_cause_and_remedies(tmp_path):
    s = summarize_dir(write_run(tmp_path / "run", ["corrupt-sys", "iommu", "acs"]))
    corrupt = [f for f in s.findings if f.kind == "corrupt"]
    assert len(corrupt) == 16 and all(f.link_class == "SYS" for f in corrupt)
    f = next(f for f in corrupt if f.gpus == [1, 5])
    assert "across the CPU interconnect" in f.cause and "IOMMU" in f.cause and "ACS" in f.cause
    text = " ".join(f.remedies)
    for needle in ("iommu=pt", "NCCL_P2P_DISABLE=1", "DistributedDataParallel", "ACS"):
        assert needle in text
    assert f.evidence["iommu_mode"] == "translated"
    assert f.evidence["acs_redirect_bridges"] == ["0000:80:01.0"]
    assert set(f.evidence["tests"]) == {"p2p.copy", "dp.scatter"}
    assert f.evidence["tests"]["p2p.copy"]["first_bad_index"] == 17
    assert "staged through host memory were correct" in f.message
    # GPUs 1 and 3 sit above no redirecting bridge; 5 does.
    g = next(x for x in corrupt if x.gpus == [1, 4])
    assert g.evidence["acs_redirect_bridges"] == ["0000:80:01.0"]


def test_corrupt_without_host_problems_says_the_platform(tmp_path):
    s = summarize_dir(write_run(tmp_path / "run", ["corrupt-sys"]))
    f = next(f for f in s.findings if f.kind == "corrupt")
    assert "platform's PCIe peer-to-peer path is broken" in f.cause
    assert f.evidence["iommu_mode"] == "passthrough"


def test_corrupt_staged_copy_points_at_the_gpu(tmp_path):
    ms = measurements([], pairs=[(0, 1), (2, 3), (0, 2)])
    ms.append(_m("p2p.staged", (0, 2), 64 << 20, 11.0, "0->2", wrong=5, path="host"))
    d = write_run(tmp_path / "run", [], meas=ms)
    f = next(f for f in summarize_dir(d).findings if f.kind == "corrupt")
    assert f.gpus == [0, 2] and "host memory are corrupted too" in f.cause


def test_nan_on_dp_with_ddp_ok_blames_the_peer_path(tmp_path):
    s = summarize_dir(write_run(tmp_path / "run", ["nan-dp", "corrupt-sys", "iommu"]))
    f = next(f for f in s.findings if f.kind == "nan")
    assert f.gpus == [5, 6] and f.link_class == "NODE" and f.severity == "error"
    assert f.evidence["way"] == "dp" and f.evidence["step"] == 3 and f.evidence["ddp_verdict"] == "ok"
    assert "raw peer copies" in f.cause and "IOMMU" in f.cause
    assert f.remedies[0].startswith("train with DistributedDataParallel")


def test_nan_on_reference_blames_the_model(tmp_path):
    nums = numerics(["nan-dp"])
    nums.append({"gpus": [5, 6], "way": "reference", "verdict": "nan", "step": 2})
    s = summarize_dir(write_run(tmp_path / "run", [], nums=nums))
    dp = next(f for f in s.findings if f.kind == "nan" and f.evidence["way"] == "dp")
    assert "model or learning rate" in dp.cause
    ref = next(f for f in s.findings if f.kind == "nan" and f.evidence["way"] == "reference")
    assert ref.severity == "warning"


def test_expected_difference_is_info(tmp_path):
    nums = [{"gpus": [6, 7], "way": "dp", "verdict": "diverged", "step": 9,
             "expected_difference": "BatchNorm statistics per replica"},
            {"gpus": [6, 7], "way": "ddp", "verdict": "ok", "step": None}]
    s = summarize_dir(write_run(tmp_path / "run", [], nums=nums))
    f = next(f for f in s.findings if f.kind == "diverged")
    assert f.severity == "info" and "BatchNorm" in f.message
    assert s.verdict == "ok"


def test_thresholds_are_documented_constants():
    assert SLOW_EFFICIENCY == 0.5 and OUTLIER_RATIO == 0.7 and 0 < STAGED_RATIO <= 1


def test_cpu_fabric_makes_no_bandwidth_findings(tmp_path):
    ms = measurements(["slow-pair", "staged-faster"], fabric="cpu")
    for m in ms:
        m.timing = "wall"
    s = summarize_dir(write_run(tmp_path / "run", [], meas=ms, fabric="cpu"))
    kinds = {f.kind for f in s.findings}
    assert not kinds & {"slow", "outlier", "p2p-slower-than-staged"}
    assert any("cpu fabric" in n for n in s.notes)
    assert all(p.efficiency is None for p in s.pairs)


def test_class_verdicts_roll_up(tmp_path):
    s = summarize_dir(write_run(tmp_path / "run", ["corrupt-sys", "slow-pair"]))
    v = {c.link_class: c.verdict for c in s.classes}
    assert v == {"NV4": "ok", "NODE": "degraded", "SYS": "broken"}
    assert s.verdict == "broken"
    sys_row = s.class_row("SYS")
    assert sys_row.pairs == 16 and sys_row.wrong == 16 * (1234 * 2 + 57)
    assert sys_row.median_gbps == pytest.approx(20.0) and sys_row.efficiency == pytest.approx(20 / 31.5, rel=1e-3)
    node = s.class_row("NODE")
    assert node.worst_pair == [0, 2] and node.min_gbps == pytest.approx(24.0 * 0.3, rel=1e-3)
    assert s.pair(0, 2).verdict == "degraded" and s.pair(0, 1).verdict == "ok"


def test_findings_are_worst_first(tmp_path):
    s = summarize_dir(write_run(tmp_path / "run", ["slow-pair", "corrupt-sys", "iommu"]))
    sev = [f.severity for f in s.findings]
    assert sev == sorted(sev, key=["error", "warning", "info"].index)
    assert s.findings[0].kind == "corrupt"


def test_measurement_errors_never_crash_the_analysis(tmp_path):
    from gputopo.model import Failed

    ms = measurements([], pairs=[(0, 1)])
    ms.append(Measurement("p2p.copy", (0, 1), 128 << 20, [], "modeled", "sim", "simulated-gpus",
                          direction="0->1", error=Failed("worker died")))
    s = summarize_dir(write_run(tmp_path / "run", [], meas=ms))
    assert s.pair(0, 1).errors == 1
    assert s.pair(0, 1).series["p2p.copy"]["size_bytes"] == 64 << 20


def test_noisy_measurements_are_info(tmp_path):
    ms = measurements([], pairs=[(0, 1), (2, 3)])
    for m in ms:
        if m.gpus == (2, 3) and m.test == "p2p.copy":
            m.samples_s = [m.samples_s[0] * k for k in (0.6, 1.0, 1.5, 2.0)]
    s = summarize_dir(write_run(tmp_path / "run", [], meas=ms, nums=[]))
    (f,) = [f for f in s.findings if f.kind == "noisy"]
    assert f.severity == "info" and f.gpus == [2, 3] and f.evidence["noisy"] == 4
    assert s.verdict == "ok"  # info findings never degrade a verdict


def test_rerun_numerics_supersede_earlier_records(tmp_path):
    nums = numerics(["nan-dp"]) + [{"gpus": [5, 6], "way": "dp", "verdict": "ok", "step": None}]
    s = summarize_dir(write_run(tmp_path / "run", [], nums=nums))
    assert not [f for f in s.findings if f.kind == "nan"]
    assert s.pair(5, 6).numerics == {"dp": "ok", "ddp": "ok"}
    assert any("superseded" in n for n in s.notes)


def test_a_written_finding_the_analysis_also_derives_is_not_doubled(tmp_path):
    from gputopo.runfolder.writer import append_jsonl

    d = write_run(tmp_path / "run", ["corrupt-sys"])
    append_jsonl(d / "events.jsonl", {"type": "finding", "kind": "corrupt", "severity": "error", "gpus": [0, 4],
                                      "link_class": "SYS", "message": "bench: wrong elements", "evidence": {}})
    s = summarize_dir(d)
    mine = [f for f in s.findings if f.kind == "corrupt" and f.gpus == [0, 4]]
    assert len(mine) == 1 and mine[0].cause


def test_a_gpus_own_link_finding_flags_the_pairs_over_that_link(tmp_path):
    """nvlink-down on GPU 2 (link 3, wired to GPU 3) flags pair 2,3 only; a PCIe link trained at
    x8 on GPU 1 flags its PCIe pairs, not its NVLink pair; the class verdict follows."""
    s = summarize_dir(write_run(tmp_path / "run", ["nvlink-down", "pcie-width"]))
    assert "nvlink-down" in {f.kind for f in s.pair(2, 3).findings} and s.pair(2, 3).verdict == "degraded"
    assert s.pair(0, 2).findings == [] and s.pair(2, 4).findings == [] and s.pair(0, 2).verdict == "ok"
    assert {f.kind for f in s.pair(1, 2).findings} == {"pcie-downgraded"} and s.pair(1, 2).verdict == "degraded"
    assert s.pair(0, 1).findings == [] and s.pair(0, 1).verdict == "ok"
    assert {c.link_class: c.verdict for c in s.classes} == {"NV4": "degraded", "NODE": "degraded", "SYS": "degraded"}


def test_nvswitch_gpu_without_nvlinks_flags_all_its_pairs(tmp_path):
    """degraded-nvlink: GPU 5's NVLinks to the NVSwitches are all down, so its 7 pairs fell back
    to PCIe (NODE/SYS): each is broken by the nvlink-down error, the NV12 pairs are not."""
    from gputopo.sim.scan import scan_simulated

    topo = scan_simulated("degraded-nvlink")
    s = summarize_dir(write_run(tmp_path / "run", [], topo=topo, meas=[], nums=[]))
    flagged = {p.gpus for p in s.pairs if any(f.kind == "nvlink-down" for f in p.findings)}
    assert flagged == {tuple(sorted((5, g))) for g in range(8) if g != 5}
    assert all(s.pair(*g).verdict == "broken" for g in flagged)
    assert {c.link_class: c.verdict for c in s.classes}["NODE"] == "broken"
    assert all(p.verdict == "not-measured" for p in s.pairs if 5 not in p.gpus)


@pytest.mark.parametrize("vendor,route,needle", [
    ("intel", "host", "NCCL (DDP) already avoids this path"),  # SYS beyond PXB on Intel
    ("amd", "p2p", "set NCCL_P2P_DISABLE=1: NCCL uses peer-to-peer"),  # AMD, 2 GPUs: up to SYS
])
def test_corrupt_remedies_say_which_route_nccl_takes(tmp_path, monkeypatch, vendor, route, needle):
    """Issue 8: NCCL's P2P level depends on the host's CPU; the remedy says which route it takes."""
    from conftest_report import seed_topology

    for k in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"):
        monkeypatch.delenv(k, raising=False)
    topo = seed_topology(["iommu"])
    topo.host.cpu_vendor = vendor
    s = summarize_dir(write_run(tmp_path / "run", ["corrupt-sys", "iommu"], topo=topo))
    f = next(f for f in s.findings if f.kind == "corrupt" and f.gpus == [1, 5])
    assert f.evidence["nccl_route"] == route
    assert vendor in f.evidence["nccl_route_reason"].lower()
    assert any(r.startswith(needle) for r in f.remedies), f.remedies
