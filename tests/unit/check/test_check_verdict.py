"""`gputopo check`: the shipped PCIe spec fails the seed story and passes its healthy twin; JUnit
names the failing pair; `--init` from a run then `check` on it passes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from conftest_report import ALL_FAULTS, measurements, write_run
from gputopo.check.init_spec import init_spec_text, write_init_spec
from gputopo.check.junit import junit_xml, write_junit
from gputopo.check.spec import load_spec, shipped_spec_path
from gputopo.check.verdict import check_summary, run_check
from gputopo.errors import UsageError
from gputopo.report.summary import summarize_dir

PCIE = shipped_spec_path("pcie-box")
NVSWITCH = shipped_spec_path("nvswitch-8gpu")
#: The seed story as the sim makes it: IOMMU translating + ACS redirect, PCIe P2P corrupts.
SEED_FAULTS = ["corrupt-sys", "nan-dp", "iommu", "acs"]


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("seed") / "run", SEED_FAULTS)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("healthy") / "run", [])


def test_pcie_spec_fails_the_seed_story(seed):
    v = run_check(PCIE, seed)
    assert not v.passed and v.exit_code == 1
    failed = {o.rule for o in v.failed}
    assert "integrity.no_corruption" in failed and "integrity.no_nan" in failed
    corrupt = next(o for o in v.failed if o.rule == "integrity.no_corruption" and o.subject == "0-4")
    assert corrupt.link_class == "SYS" and "IOMMU" in corrupt.message
    assert "FAIL integrity.no_corruption[0-4]" in v.text(max_failures=None)


def test_pcie_spec_passes_the_healthy_twin(healthy):
    v = run_check(PCIE, healthy)
    assert v.passed and v.exit_code == 0, v.text()
    assert v.counts()["passed"] > 28


def test_nvswitch_spec_fails_a_pcie_machine(healthy):
    v = run_check(NVSWITCH, healthy)
    assert v.exit_code == 1
    assert any(o.rule == "topology.all_pairs" and o.subject == "0-2" for o in v.failed)


def test_junit_parses_and_names_the_failing_pair(seed, tmp_path):
    v = run_check(PCIE, seed)
    path = write_junit(v, tmp_path / "out" / "check.xml")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert len(cases) == len(v.outcomes) == int(suite.get("tests"))
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == int(suite.get("failures")) == len(v.failed)
    names = {c.get("name") for c in failed}
    assert "integrity.no_corruption[0-4]" in names and "integrity.no_nan[5-6 dp]" in names
    f = next(c for c in failed if c.get("name") == "integrity.no_corruption[0-4]").find("failure")
    assert "GPUs 0,4 (SYS)" in f.get("message")
    evidence = json.loads(f.text)
    assert evidence["gpus"] == [0, 4] and evidence["evidence"]["evidence"]["total_wrong"] > 0
    assert {p.get("name"): p.get("value") for p in suite.find("properties")}["simulated"] == "true"


def test_junit_of_a_pass_has_no_failures(healthy):
    root = ET.fromstring(junit_xml(run_check(PCIE, healthy)))
    assert root.get("failures") == "0"


def test_verdict_json(seed):
    doc = json.loads(json.dumps(run_check(PCIE, seed).to_json()))
    assert doc["passed"] is False and doc["exit_code"] == 1 and doc["simulated"] is True
    assert doc["counts"]["failed"] == len(doc["failures"]) > 0


def test_init_then_check_passes(healthy, tmp_path):
    spec_path = write_init_spec(healthy, tmp_path / "baseline.toml")
    text = spec_path.read_text()
    assert '"0,1" = "NV4"' in text and "[bandwidth.\"SYS\"]" in text and "margin" not in text.split("\n")[0]
    spec = load_spec(spec_path)
    assert spec.gpu_count == 8 and len(spec.expected_classes) == 28
    v = run_check(spec_path, healthy)
    assert v.passed, v.text()
    assert v.counts()["skipped"] == 0


def test_baseline_catches_a_regression(healthy, tmp_path):
    spec_path = write_init_spec(healthy, tmp_path / "baseline.toml")
    slower = write_run(tmp_path / "slow", ["slow-pair", "pcie-width", "nvlink-down"])
    v = run_check(spec_path, slower)
    failed = {o.name for o in v.failed}
    assert "bandwidth.NODE.min_gbps[0-2]" in failed
    assert "pcie.min_width[GPU1]" in failed and "nvlink.links_up[GPU2]" in failed


def test_init_refuses_a_broken_run_unless_forced(seed, tmp_path):
    with pytest.raises(UsageError, match="not a known-good run"):
        write_init_spec(seed, tmp_path / "x.toml")
    text = init_spec_text(summarize_dir(seed), force=True)
    assert "WARNING: taken with --force" in text
    with pytest.raises(UsageError, match="exists"):
        (tmp_path / "y.toml").write_text("")
        write_init_spec(seed, tmp_path / "y.toml", force=True)


def test_strict_turns_missing_data_into_failures(tmp_path):
    d = write_run(tmp_path / "run", [], meas=measurements([], pairs=[(0, 1)]), nums=[])
    p = tmp_path / "spec.toml"
    p.write_text("[bandwidth.SYS]\nmin_gbps = 5\n[integrity]\nno_nan = true\n")
    assert run_check(p, d).passed
    p.write_text("strict = true\n[bandwidth.SYS]\nmin_gbps = 5\n[integrity]\nno_nan = true\n")
    v = run_check(p, d)
    assert not v.passed and all("strict spec" in o.message for o in v.failed)


def test_cpu_fabric_skips_bandwidth_rules(tmp_path):
    ms = measurements([], fabric="cpu")
    for m in ms:
        m.timing = "wall"
    d = write_run(tmp_path / "run", [], meas=ms, fabric="cpu")
    v = check_summary(load_spec(PCIE), summarize_dir(d))
    assert v.passed
    bw = [o for o in v.outcomes if o.rule.startswith("bandwidth.")]
    assert bw and all(o.status == "skipped" for o in bw)


def test_check_of_a_folder_that_is_not_a_run(tmp_path):
    with pytest.raises(UsageError, match="not a run folder"):
        run_check(PCIE, tmp_path)


def test_every_rule_kind_reports(tmp_path):
    d = write_run(tmp_path / "run", ALL_FAULTS)
    p = tmp_path / "spec.toml"
    p.write_text("""
[topology]
gpu_count = 8
[topology.pairs]
"0,1" = "NV4"
"0,2" = "SYS"
[nvlink]
min_links_up = 4
max_errors = 0
[pcie]
min_gen = 4
min_width = 16
max_replay = 0
[bandwidth.NV]
min_efficiency = 0.8
[busbw.all_reduce]
"NV4" = 70
"*" = 1
[integrity]
no_corruption = true
no_nan = true
no_divergence = true
no_hang = true
no_crash = true
[findings]
fail_on = ["iommu"]
""")
    v = run_check(p, d)
    failed = {o.name for o in v.failed}
    for name in ("topology.link_class[0-2]", "nvlink.min_links_up[GPU2]", "nvlink.max_errors[GPU3]",
                 "pcie.min_width[GPU1]", "busbw.all_reduce.NV4[0-1]", "integrity.no_divergence[6-7 dp]",
                 "integrity.no_hang[2-6]", "integrity.no_crash[3-7]", "findings.fail_on.iommu[machine]"):
        assert name in failed, name
    passed = {o.name for o in v.outcomes if o.status == "passed"}
    assert {"topology.gpu_count[machine]", "topology.link_class[0-1]", "pcie.min_gen[GPU0]",
            "bandwidth.NV.min_efficiency[0-1]", "busbw.all_reduce[0-1]"} <= passed


def test_interrupted_run_cannot_pass(tmp_path):
    """A run cut short would count what it never measured as clean: check fails it."""
    import json
    import shutil

    from gputopo.check.spec import shipped_spec_path
    from gputopo.check.verdict import run_check

    src = tmp_path / "src"
    from conftest_report import write_run

    d = write_run(src, [])
    info = json.loads((d / "run.json").read_text())
    info["status"] = "complete"
    (d / "run.json").write_text(json.dumps(info))
    complete = run_check(shipped_spec_path("pcie-box"), d)
    assert [o.status for o in complete.outcomes if o.rule == "run.complete"] == ["passed"]
    cut = tmp_path / "cut"
    shutil.copytree(d, cut)
    info["status"] = "interrupted"
    (cut / "run.json").write_text(json.dumps(info))
    v = run_check(shipped_spec_path("pcie-box"), cut)
    assert not v.passed and v.exit_code == 1
    assert [o.rule for o in v.failed if o.rule == "run.complete"] == ["run.complete"]
