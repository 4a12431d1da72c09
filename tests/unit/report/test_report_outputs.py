"""Every output of a run folder: summary.json, results.csv, report.md, report.html, PNGs, terminal."""

from __future__ import annotations

import io
import os
import json
import re

import pytest

from conftest_report import ALL_FAULTS, write_run
from gputopo.report.render import render_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    d = write_run(tmp_path_factory.mktemp("faulty") / "run", ALL_FAULTS)
    return d, render_run(d)


def test_render_writes_every_output(faulty):
    d, _ = faulty
    for name in ("summary.json", "results.csv", "report.md", "report.html", "heatmap_gbps.png",
                 "heatmap_efficiency.png", "heatmap_link_class.png", "heatmap_numerics.png", "loss_curves.png"):
        assert (d / name).is_file(), name
    for png in d.glob("*.png"):
        assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5000


def test_summary_json(faulty):
    d, s = faulty
    doc = json.loads((d / "summary.json").read_text())
    assert doc["schema_version"] == 1 and doc["simulated"] is True and doc["fabric"] == "sim"
    assert doc["verdict"] == "broken"
    assert [c["link_class"] for c in doc["classes"]] == ["NV4", "NODE", "SYS"]
    assert len(doc["pairs"]) == 28
    p = next(p for p in doc["pairs"] if p["gpus"] == [0, 4])
    assert p["link_class"] == "SYS" and p["verdict"] == "broken" and "corrupt" in p["findings"]
    assert p["series"]["p2p.copy"]["directions"] == {"0->4": 20.0, "4->0": 20.4}
    kinds = [f["kind"] for f in doc["findings"]]
    assert kinds[0] == "corrupt" and {"nan", "slow", "iommu", "hang"} <= set(kinds)
    assert all(set(f) >= {"kind", "severity", "gpus", "link_class", "message", "evidence", "cause", "remedies"}
               for f in doc["findings"])


def test_results_csv_one_row_per_measurement(faulty):
    import pandas as pd

    d, s = faulty
    df = pd.read_csv(d / "results.csv")
    assert len(df) == len(s.run.measurements)
    row = df[(df.test == "p2p.copy") & (df.gpus == "0-1") & (df.direction == "0->1") & (df.size_bytes == 64 << 20)].iloc[0]
    assert row.algbw_gbps == pytest.approx(85.0, rel=1e-6)
    assert row.efficiency == pytest.approx(0.85, rel=1e-6)
    assert row.link_class == "NV4" and bool(row.simulated)
    assert df[df.gpus == "0-4"].wrong.max() == 1234


def test_markdown_has_banner_tables_and_causes(faulty):
    d, _ = faulty
    md = (d / "report.md").read_text()
    assert "**SIMULATED**" in md
    assert "## Link classes" in md and "| NV4 |" in md
    assert "likely cause: P2P DMA across the CPU interconnect" in md
    assert "![" in md and "heatmap_gbps.png" in md


def test_html_is_self_contained(faulty):
    d, _ = faulty
    html = (d / "report.html").read_text()
    assert 'id="simulated-banner"' in html and "SIMULATED" in html
    for table in ("findings-table", "class-table", "pair-table"):
        assert f'id="{table}"' in html
    imgs = re.findall(r'<img [^>]*src="([^"]+)"', html)
    assert len(imgs) == 5 and all(src.startswith("data:image/png;base64,") for src in imgs)
    assert not re.search(r'(src|href)="(https?:|//)', html)
    assert "<script" not in html


def test_real_run_has_no_banner(tmp_path):
    from conftest_report import seed_topology

    topo = seed_topology(simulated=False)
    d = write_run(tmp_path / "run", [], topo=topo, fabric="cuda")
    s = render_run(d, plots=False)
    assert s.simulated is False
    assert "SIMULATED" not in (d / "report.html").read_text()
    assert "SIMULATED" not in (d / "report.md").read_text()


def test_rerender_replaces_outputs_and_keeps_raw_data(tmp_path):
    d = write_run(tmp_path / "run", ["nan-dp"])
    render_run(d)
    assert (d / "loss_curves.png").exists()
    raw = (d / "measurements.jsonl").read_bytes()
    (d / "numerics.jsonl").write_text("")  # the numerics are gone: their plots must go too
    render_run(d)
    assert not (d / "loss_curves.png").exists() and not (d / "heatmap_numerics.png").exists()
    assert (d / "measurements.jsonl").read_bytes() == raw


def test_terminal_prints_class_table_and_findings_worst_first(faulty):
    from rich.console import Console

    from gputopo.report.outputs.terminal import print_summary

    _, s = faulty
    buf = io.StringIO()
    print_summary(s, Console(file=buf, width=200, color_system=None))
    out = buf.getvalue()
    assert "SIMULATED" in out and "Link classes" in out and "Findings (worst first" in out
    # The story comes first: the broken SYS class, its likely cause and the remedies, before the tables.
    story_end = out.index("Link classes")
    # the root cause leads; the class it explains follows as its evidence
    root = out.index("every SYS pair is bad")
    assert out[out.rindex("\n", 0, root) + 1:root].startswith("ROOT CAUSE 1 OF ")  # tagged, and first
    # its likely cause and remedies once, right under it, then its evidence
    assert root < out.index("likely cause: P2P DMA across the CPU interconnect") < out.index(
        "evidence: SYS pairs: broken on all 16") < story_end
    assert out.index("iommu=pt") < story_end
    table = out[out.index("Findings (worst first"):]
    # the culprit first, what it explains nested under it, then the warnings nothing explains
    assert table.index("class-fault") < table.index("└ corrupt") < table.index("└ iommu") < table.index("nvlink-down")


def test_terminal_groups_alike_findings_of_a_class():
    from gputopo.model import Finding
    from gputopo.report.outputs.terminal import group_findings

    fs = [Finding("corrupt", "error", "a", gpus=[0, 4], link_class="SYS"),
          Finding("corrupt", "error", "b", gpus=[1, 5], link_class="SYS"),
          Finding("corrupt", "error", "c", gpus=[0, 1], link_class="NV4"),
          Finding("nan", "error", "d", gpus=[0, 4], link_class="SYS")]
    groups = group_findings(fs)
    assert [[f.message for f in g] for g in groups] == [["a", "b"], ["c"], ["d"]]


def test_render_of_a_run_with_no_measurements(tmp_path):
    d = write_run(tmp_path / "run", [], meas=[], nums=[])
    s = render_run(d)
    assert s.verdict == "not-measured"
    assert (d / "report.html").exists() and (d / "heatmap_link_class.png").exists()


def test_256_gpu_run_renders_quickly(tmp_path):
    """Report scale: 256 GPUs, 32640 pairs of topology, a sample of measured pairs."""
    from gputopo.model import Gpu, HostInfo, LinkClass, Pair, PcieLink, Topology

    n = 256
    gpus = [Gpu(nvml_index=i, pcie=PcieLink(gen_current=5, gen_max=5, width_current=16, width_max=16))
            for i in range(n)]
    pairs = [Pair((i, j), LinkClass.parse("SYS" if (i // 8) != (j // 8) else "NODE"))
             for i in range(n) for j in range(i + 1, n)]
    topo = Topology(gpus=gpus, pairs=pairs, host=HostInfo(iommu_mode="passthrough", acs=[]),
                    source="sim:gen-256", simulated=True, machine="gen-256")
    from conftest_report import _m

    ms = [_m("p2p.copy", (i, i + 1), 64 << 20, 40.0, f"{i}->{i + 1}") for i in range(0, n - 1)]
    d = write_run(tmp_path / "run", [], topo=topo, meas=ms, nums=[])
    s = render_run(d)
    assert len(s.pairs) == n * (n - 1) // 2
    assert "more pairs without findings" in (d / "report.md").read_text()


def test_markdown_and_html_tell_the_story_first(faulty):
    d, _ = faulty
    md = (d / "report.md").read_text()
    story = md[md.index("## What was found"):md.index("## Link classes")]
    assert "**Root cause 1 of 7:** every SYS pair is bad" in story  # the root causes lead, counted
    assert "evidence: SYS pairs: broken on all 16 (every pair between GPUs 0-3 and GPUs 4-7): wrong data on " \
           "all 16 in dp.scatter, p2p.copy, while copies staged through host memory were correct" in story
    # the one NODE pair that went NaN is localised to its link, with the DataParallel-vs-DDP cause
    assert ":** GPUs 5,6 (NODE): NaN in training on this pair only" in story
    assert "while DDP on the same GPUs trains fine" in story
    assert "likely cause: P2P DMA across the CPU interconnect between sockets (SYS)" in story
    assert "remedy: boot with iommu=pt" in story and "remedy: set NCCL_P2P_DISABLE=1" in story
    assert "Time source: modeled" in md and "| 5,6 | NODE |" in md and "nan@3" in md
    html = (d / "report.html").read_text()
    assert html.index('id="story"') < html.index('id="class-table"') < html.index('id="findings-table"')
    assert "Root cause 1 of 7:" in html and "Time source: modeled" in html


def test_alike_findings_are_explained_once_with_all_their_bridges():
    from gputopo.model import Finding
    from gputopo.report.outputs.tables import explanations, findings_table

    def f(gpus, bridges):
        b = ", ".join(bridges)
        return Finding("corrupt", "error", f"GPUs {gpus}", gpus=list(gpus), link_class="SYS",
                       cause=f"P2P DMA is corrupted; likely ACS redirect on bridge(s) {b}",
                       remedies=[f"disable ACS on bridge(s) {b} (setpci)", "set NCCL_P2P_DISABLE=1"])

    fs = [f((0, 4), ["0000:18:01.0", "0000:86:01.0"]), f((1, 5), ["0000:1a:01.0", "0000:86:01.0"]),
          Finding("corrupt", "error", "x", gpus=[0, 1], link_class="NV4", cause="NVLink fault")]
    ex = explanations(fs)
    assert [(e.kind, e.link_class, len(e.findings)) for e in ex] == [("corrupt", "SYS", 2), ("corrupt", "NV4", 1)]
    assert ex[0].cause.endswith("bridge(s) 0000:18:01.0, 0000:1a:01.0, 0000:86:01.0")
    assert ex[0].remedies == ["disable ACS on bridge(s) 0000:18:01.0, 0000:1a:01.0, 0000:86:01.0 (setpci)",
                              "set NCCL_P2P_DISABLE=1"]
    assert ex[0].where == "2 pairs: 0,4 1,5 (SYS)"
    _, rows = findings_table(fs)
    assert rows[0][:4] == ["error", "corrupt", "SYS", "2 pairs: 0,4 1,5"] and rows[0][4].startswith("e.g. ")


def test_loss_curves_say_how_many_flagged_runs_they_leave_out(tmp_path):
    from gputopo.report.outputs.plots import MAX_LOSS_PANELS, plot_loss_curves
    from gputopo.report.summary import summarize_dir

    pairs = [(i, j) for i in range(4) for j in range(4, 8)] + [(0, 1), (2, 3), (4, 5), (6, 7)]
    nums = []
    for p in pairs:
        losses = [2.0 - 0.1 * k for k in range(10)]
        nums += [{"gpus": list(p), "way": "dp", "verdict": "diverged", "step": 2,
                  "losses": losses[:2] + [1e30] * 8, "tolerance": {"loss_rel": 2e-6}},
                 {"gpus": list(p), "way": "ddp", "verdict": "ok", "step": None, "losses": losses}]
    nums.append({"gpus": [0], "way": "reference", "verdict": "ok", "step": None,
                 "losses": [2.0 - 0.1 * k for k in range(10)]})
    s = summarize_dir(write_run(tmp_path / "run", [], nums=nums))
    plot = plot_loss_curves(s, tmp_path)
    assert f"{MAX_LOSS_PANELS} of {len(pairs)} flagged runs are drawn" in plot.caption
    assert (tmp_path / "loss_curves.png").read_bytes()[:8] == PNG_MAGIC


def test_loss_curves_draw_every_kind_of_failure_before_more_of_one():
    """16 diverged runs on GPU 0-3's SYS pairs come first in GPU order; the NaN runs on NODE and
    SYS pairs of GPUs 4-7 must be drawn all the same (the first 8 in GPU order were all alike)."""
    from gputopo.report.outputs.plots import panels

    runs = [{"gpus": [i, j], "way": "dp", "verdict": "diverged", "link_class": "SYS"}
            for i in range(4) for j in range(4, 8)]
    runs += [{"gpus": [4, 5], "way": "dp", "verdict": "nan", "link_class": "NODE"},
             {"gpus": [6, 7], "way": "dp", "verdict": "nan", "link_class": "NODE"},
             {"gpus": [5, 7], "way": "ddp", "verdict": "nan", "link_class": "SYS"}]
    shown = panels(runs, most=4)
    kinds = {(r["verdict"], r["link_class"], r["way"]) for r in shown}
    assert kinds == {("nan", "NODE", "dp"), ("nan", "SYS", "ddp"), ("diverged", "SYS", "dp")}
    assert len(shown) == 4 and [r["gpus"] for r in shown] == sorted(r["gpus"] for r in shown)
    assert panels(runs[:3], most=8) == runs[:3]  # fewer than the limit: all, in GPU order


def test_heatmap_numbers_read_on_their_cell():
    from gputopo.report.outputs.plots import _text_color

    assert _text_color((0.99, 0.91, 0.14)) == "black"  # viridis yellow
    assert _text_color((0.27, 0.0, 0.33)) == "white"  # viridis purple


def test_grouped_findings_name_each_pair_once():
    from gputopo.model import Finding
    from gputopo.report.outputs.tables import group_where

    one_pair = [Finding("hang", "error", m, gpus=[0, 1], link_class="PXB") for m in "abc"]
    assert group_where(one_pair) == "0,1"
    two = one_pair + [Finding("hang", "error", "d", gpus=[2, 3], link_class="PXB")]
    assert group_where(two) == "2 pairs: 0,1 2,3"


def _captured_figures(monkeypatch):
    """Figures the plot code closes, kept (with their axes) for inspection."""
    import matplotlib.pyplot as plt

    figs = []
    real_close = plt.close

    def close(fig=None):
        figs.append(fig)
        real_close(fig)

    monkeypatch.setattr(plt, "close", close)
    from gputopo.report.outputs import plot_fork  # every figure drawn here, none in a child

    monkeypatch.setattr(plot_fork, "in_child", plot_fork.Later)
    return figs


def test_every_heatmap_paints_pairs_with_wrong_data_as_broken(tmp_path, monkeypatch):
    """seed-8gpu's corrupting SYS pairs were green '71 %' cells in the efficiency heatmap (only a
    thin outline said otherwise): every heatmap paints both cells of a pair with wrong data dark
    and hatched with 'wrong data' written in it, and names it in the legend; healthy pairs keep
    their colour and plain value."""
    from gputopo.report.outputs.wrong_data import WRONG_DATA_LABEL

    d = write_run(tmp_path / "run", ("corrupt-sys", "nan-dp"))
    figs = _captured_figures(monkeypatch)
    render_run(d)
    heatmaps = [f for f in figs if f is not None and f.axes[0].images]  # GB/s, efficiency, class, numerics
    assert len(heatmaps) == 4, [f.axes[0].get_title() for f in figs if f is not None]
    for fig in heatmaps:
        ax = fig.axes[0]
        painted = {(round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in ax.patches
                   if p.get_label() == WRONG_DATA_LABEL}
        # corrupt-sys corrupts every SYS pair (GPUs 0-3 x 4-7), both directions: (column, row)
        sys_cells = {(c, r) for r in range(8) for c in range(8) if (r < 4) != (c < 4)}
        assert painted == sys_cells, ax.get_title()
        texts = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in ax.texts}
        assert all("wrong data" in texts[cell] for cell in sys_cells), ax.get_title()
        assert "wrong data" not in texts.get((1, 0), ""), ax.get_title()  # 0->1 (NV4) is healthy
        legend = ax.get_legend() or fig.legends[0]
        assert any("wrong data" in t.get_text() for t in legend.get_texts()), ax.get_title()


def _without_evidence(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "evidence" not in line)


def test_a_bridge_list_is_named_once_per_section(faulty):
    """seed-8gpu's Causes section listed the same twelve ACS bridges six times (in the cause and
    the ACS remedy of its corrupt, nan and diverged findings): each section of report.md,
    report.html and the terminal names a list once, then says 'the same ... as above'."""
    from rich.console import Console

    from gputopo.report.outputs.terminal import print_summary

    d, s = faulty
    md = (d / "report.md").read_text()
    story = md[md.index("## What was found"):md.index("## Link classes")]
    assert story.count("0000:80:01.0") == 1, story
    assert "disable PCIe ACS request/completion redirect on the same bridge as above" in story
    # the findings below are evidence: a remedy the story told is not told again there
    causes = _without_evidence(md[md.index("### Evidence per finding"):md.index("## Plots")])
    assert causes.count("0000:80:01.0") <= 1 and "disable PCIe ACS" not in causes, causes
    html = (d / "report.html").read_text()
    html_causes = _without_evidence(html[html.index("<h3>Evidence per finding</h3>"):].replace("<li>", "\n<li>"))
    assert html_causes.count("0000:80:01.0") <= 1 and "disable PCIe ACS" not in html_causes
    buf = io.StringIO()
    print_summary(s, Console(file=buf, width=100, color_system=None))
    assert buf.getvalue().count("0000:80:01.0") == 1


def test_terminal_wrapped_lines_keep_their_indent(faulty):
    """A story point, its likely cause and each remedy wrap under their own first character on a
    narrow terminal, never back to column 0."""
    from rich.console import Console

    from gputopo.report.outputs.terminal import STORY_TAGS, print_summary

    _, s = faulty
    buf = io.StringIO()
    print_summary(s, Console(file=buf, width=70, color_system=None))
    lines = buf.getvalue().splitlines()
    tags = tuple(f"{t} " for t in STORY_TAGS.values())
    verdict = next(k for k, line in enumerate(lines) if line.startswith("verdict: "))
    start = next(k for k, line in enumerate(lines) if k > verdict and line.startswith(tags))  # (it may wrap)
    story = lines[start:next(k for k, line in enumerate(lines) if line.startswith("Link classes"))]
    assert len(story) > 10
    prev_indent = 0
    for line in story:
        assert line.startswith(tags) or line.startswith("    "), line
        assert len(line) <= 70 and line == line.rstrip(), line
        tag = next((t for t in tags if line.startswith(t)), None)
        if tag:
            prev_indent = len(tag)
        elif line.startswith(("    - ", "    likely cause: ", "    why: ", "    underneath: ", "    evidence: ")):
            prev_indent = 6 if line.startswith("    - ") else line.index(": ") + 2
        else:  # a continuation: under the first character of what it continues
            assert line.startswith(" " * prev_indent) and line[prev_indent] != " ", line


def test_unmeasured_pairs_show_no_wrong_count(tmp_path):
    """A pair where nothing ran, or where every transfer failed (a hang), compared no data: its
    #wrong is '-' (null in summary.json), not 0; a class with no completed transfer likewise.
    The bench summary table does the same, and check's no_corruption does not pass such a pair."""
    import dataclasses

    from conftest_report import measurements as make_measurements
    from gputopo.report.outputs.tables import class_table, pair_table
    from gputopo.report.summary import summarize_dir

    ok = make_measurements(pairs=[(0, 1)])
    failed = [dataclasses.replace(m, samples_s=[], error="TimeoutError: did not finish in 60 s")
              for m in make_measurements(pairs=[(2, 6)])]
    d = write_run(tmp_path / "run", meas=ok + failed, nums=[])
    s = summarize_dir(d)
    head, rows, _ = pair_table(s, limit=100)
    col = head.index("#wrong")
    cells = {r[0]: r[col] for r in rows}
    assert (cells["0,1"], cells["2,6"], cells["0,2"]) == ("0", "-", "-")
    doc = {tuple(p["gpus"]): p["wrong"] for p in s.to_json()["pairs"]}
    assert (doc[(0, 1)], doc[(2, 6)], doc[(0, 2)]) == (0, None, None)
    head, rows = class_table(s)
    by_class = {r[0]: r[head.index("#wrong")] for r in rows}
    assert by_class == {"NV4": "0", "NODE": "-", "SYS": "-"}


@pytest.mark.slow
def test_figures_drawn_in_a_forked_child_are_written_and_listed(tmp_path):
    """The loss curves and the numerics heatmap are drawn in a child process: their PNGs exist
    and the report lists them in display order, as when everything is drawn in one process."""
    from gputopo.report.outputs.plots import write_plots
    from gputopo.report.run_folder import load_run
    from gputopo.report.summary import summarize

    d = write_run(tmp_path / "run", ("corrupt-sys", "nan-dp"))
    made = write_plots(summarize(load_run(d)), d)
    assert [p.name for p in made] == ["heatmap_gbps.png", "heatmap_efficiency.png",
                                      "heatmap_link_class.png", "heatmap_numerics.png",
                                      "loss_curves.png"]
    assert all((d / p.name).stat().st_size > 10_000 for p in made)


@pytest.mark.slow
def test_a_child_that_fails_leaves_the_work_to_the_parent(tmp_path, monkeypatch):
    """A child that dies (here: its work raises) is not a lost figure: the parent draws it, and
    an error the work raises surfaces in the parent as without the child."""
    from gputopo.report.outputs.plot_fork import in_child

    calls = []

    def work():
        calls.append(os.getpid())
        if os.getpid() != parent:
            raise RuntimeError("child fails")
        return "drawn here"

    parent = os.getpid()
    assert in_child(work).result() == "drawn here"
    assert calls == [parent]  # the child's call was in its own memory; the parent's is here
    assert in_child(os.getpid).result() != parent  # and what a child that succeeds made is used


@pytest.mark.slow
def test_the_drawing_child_leaves_ctrl_c_to_the_parent():
    """A Ctrl-C that reached the child between its fork and its own code unwound the parent's
    stack copied into it (the command's clean-up run twice, from two processes). The signals
    are held across the fork; the child ignores them, the parent gets them (and cancels it),
    and the parent's own signal mask and handlers are as before."""
    import signal

    from gputopo.report.outputs.plot_fork import in_child

    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    handler = signal.getsignal(signal.SIGINT)

    def seen():
        return (os.getpid(), signal.getsignal(signal.SIGINT) == signal.SIG_IGN,
                signal.getsignal(signal.SIGTERM) == signal.SIG_IGN,
                signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set()))

    pid, ignores_int, ignores_term, blocked = in_child(seen).result()
    assert pid != os.getpid() and ignores_int and ignores_term and not blocked
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == mask
    assert signal.getsignal(signal.SIGINT) is handler


@pytest.mark.slow
def test_a_cancelled_child_is_stopped_and_reaped(tmp_path):
    """When the report fails while a child still draws, the child is killed and reaped at once
    (no process left drawing into a folder whose report failed, no zombie)."""
    import time

    from gputopo.report.outputs.plot_fork import in_child

    mark = tmp_path / "child.pid"
    later = in_child(lambda: (mark.write_text(str(os.getpid())), time.sleep(60)))
    deadline = time.monotonic() + 30
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    while not mark.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(mark.read_text())
    t0 = time.monotonic()
    later.cancel()
    assert time.monotonic() - t0 < 5
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped by cancel
    assert not os.path.exists(f"/proc/{pid}")
