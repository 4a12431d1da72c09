"""Issue 18, "What a person sees": `gputopo diff FULL SUBSET` listed "finding gone" for pairs the
subset run never measured. A finding on a pair B did not measure is "not measured in B"; one on
a pair B measured clean is gone. As a user runs it: the CLI on two run folders."""

from __future__ import annotations

import json

from conftest_report import measurements, write_run
from helpers.cli import gputopo_here


def test_diff_of_a_full_run_and_a_subset_says_not_measured_not_gone(tmp_path):
    full = write_run(tmp_path / "full", ["corrupt-sys"])  # every SYS pair corrupts
    # B measured two pairs only: NV4 pair 0,1 and SYS pair 0,4, which is clean now
    subset = write_run(tmp_path / "subset", [], meas=measurements([], pairs=[(0, 1), (0, 4)]), nums=[])

    proc = gputopo_here("diff", full, subset)
    assert "Traceback" not in proc.stderr, proc.stderr
    out = proc.stdout
    gone = [line for line in out.splitlines() if "finding gone:" in line]
    unmeasured = [line for line in out.splitlines() if "not measured in B:" in line]
    assert any("GPUs 0,4" in line for line in gone), out  # measured clean in B: gone
    assert not any("GPUs 0,5" in line or "class-fault" in line for line in gone), out
    assert any("corrupt: 15 findings (B did not measure pairs 0,5 " in line for line in unmeasured), out
    assert any("class-fault" in line for line in unmeasured), out  # B measured 1 of its 16 pairs

    doc = json.loads(gputopo_here("diff", full, subset, "--json").stdout)
    gone_pairs = {tuple(f["gpus"]) for f in doc["gone_findings"] if f["kind"] == "corrupt"}
    not_measured = {tuple(f["gpus"]) for f in doc["not_measured_in_b"] if f["kind"] == "corrupt"}
    assert gone_pairs == {(0, 4)}
    assert len(not_measured) == 15 and (0, 4) not in not_measured
