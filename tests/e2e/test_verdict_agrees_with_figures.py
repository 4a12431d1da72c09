"""A verdict never contradicts the figures printed under it (issue 37): every real posted output
under tests/fixtures/ whose import writes a run folder with figures (a measured GB/s, an
nccl-tests peak busbw) gets a verdict other than "not-measured".

The case that broke it: a healthy 2-node all_reduce whose "# Using devices" block was not
posted (nccl-tests/aws-ofi-nccl-65_...) printed "verdict: not-measured" above "peak busbw 42.6
GB/s": its figures belong to no GPU pair, and the verdict was taken from the pairs alone. The
rule lives where the run's verdict is decided (report/summary.py), so it holds for every
importer and for `gputopo report`. Since issue 46 such a run is `ok` only where something of it
was judged; figures nothing could judge make it `not-judged`, still never "not-measured".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import fixture_verdicts as fv
from helpers.cli import gputopo_here

#: Fixtures whose command writes a run folder (the others print a scan or a log summary).
WITH_FOLDER = [p for p in fv.fixture_files() if "{out}" in fv.COMMANDS[p.parent.name]]


def _figures(summary: dict) -> list:
    """The figures a report prints: headline GB/s per series, nccl-tests' peak busbw."""
    out = [h.get("gbps") for h in summary.get("headlines") or [] if isinstance(h.get("gbps"), (int, float))]
    out += [lg.get("peak_busbw_gbps") for lg in summary.get("nccl_tests") or []
            if isinstance(lg.get("peak_busbw_gbps"), (int, float))]
    return out


@pytest.mark.parametrize("path", WITH_FOLDER, ids=lambda p: str(p.relative_to(fv.FIXTURES)))
def test_a_fixture_with_figures_is_not_called_not_measured(path: Path, tmp_path):
    out = tmp_path / "run"
    words = [w.format(file=path, out=out) for w in fv.COMMANDS[path.parent.name]]
    ran = gputopo_here(*words, cwd=fv.REPO, env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    if ran.returncode == 2:
        pytest.skip(f"refused: {ran.stderr.strip().splitlines()[-1] if ran.stderr.strip() else ''}")
    summary = json.loads((out / "summary.json").read_text())
    if not _figures(summary):
        pytest.skip("no figures printed")
    assert summary["verdict"] != "not-measured", (summary["verdict"], _figures(summary)[:4])
    assert f"verdict: {summary['verdict']}" in ran.stdout


def test_the_aws_ofi_excerpt_without_devices_is_measured(tmp_path):
    """Posted (aws/aws-ofi-nccl issue 65): rows and footer, no "# Using devices" block."""
    path = fv.FIXTURES / "nccl-tests" / "aws-ofi-nccl-65_2xp4d_all_reduce_dip-recovers_excerpt.txt"
    ran = gputopo_here("import", "nccl-tests", str(path), "--out", str(tmp_path / "run"), "--no-history",
                       env={"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    assert ran.returncode == 0, ran.stderr
    # measured, and nothing to judge a job over two hosts' network by (issue 46): not-judged
    assert "verdict: not-judged" in ran.stdout and "not-measured" not in ran.stdout
    assert "peak busbw 42.6 GB/s" in ran.stdout
