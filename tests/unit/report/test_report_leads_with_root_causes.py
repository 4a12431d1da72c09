"""Issue 18, "What a person sees": seed-8gpu's report.html led with a ten-line "Problem" paragraph
ending in "Culprit:", told the same five remedies about seven times under "Causes and
remedies", and its verdict counted "49 errors" for one root cause. Now the reports lead with the
root causes, counted, each once with its remedies once, and the per-pair findings follow as
evidence. Tested on a seed-like run folder, rendered as `gputopo report DIR` renders it."""

from __future__ import annotations

import re

from conftest_report import write_run

from gputopo.report.render import render_run

SEED_FAULTS = ["corrupt-sys", "corrupt-node", "iommu", "acs"]  # one fault of the host's PCIe path
REMEDY = "boot with iommu=pt"


def _no_json(text: str) -> str:
    """The text without the findings' raw evidence (JSON in <code> or backticks)."""
    return re.sub(r"<code>.*?</code>|`\{.*?`", "", text, flags=re.DOTALL)


def test_one_root_cause_leads_counted_with_each_remedy_once(tmp_path):
    run = write_run(tmp_path / "run", SEED_FAULTS)
    render_run(run, plots=False)
    md = (run / "report.md").read_text(encoding="utf-8")
    html = (run / "report.html").read_text(encoding="utf-8")

    verdict = next(line for line in md.splitlines() if "verdict:" in line)
    assert re.search(r"verdict: broken: 1 root cause \(\d+ errors in 24 pairs, \d+ warnings?\)", verdict), verdict

    story = md[md.index("## What was found"):md.index("## Link classes")]
    first = next(line for line in story.splitlines() if line.startswith("- "))
    assert first.startswith("- **Root cause:** every NODE and SYS pair is bad"), first
    assert "Culprit:" not in md and "Culprit:" not in html
    # its remedy first, then why and the per-class evidence
    assert story.index(REMEDY) < story.index("evidence: NODE pairs: broken")

    for text in (_no_json(md), _no_json(html)):
        assert text.count(REMEDY) == 1, text.count(REMEDY)
        assert text.count("train with DistributedDataParallel instead of nn.DataParallel") == 1
    # the per-pair findings are still there, as evidence naming their root cause
    assert "Evidence per finding" in html and "explained by the root cause above" in html
    assert html.index('id="story"') < html.index("Evidence per finding")
    head = html[html.index('id="story"'):]
    assert head.index("Root cause:") < head.index(REMEDY) < head.index("NODE pairs: broken")


def test_a_healthy_run_claims_no_root_cause(tmp_path):
    """Nothing wrong: the verdict names no root cause and no problem."""
    run = write_run(tmp_path / "run", [])
    s = render_run(run, plots=False)
    md = (run / "report.md").read_text(encoding="utf-8")
    verdict = next(line for line in md.splitlines() if "verdict:" in line)
    assert s.verdict == "ok" and "root cause" not in verdict and "problem" not in verdict, verdict
