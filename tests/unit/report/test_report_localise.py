"""Localising the fault (gputopo.report.why.localise): from per-pair findings to the smallest culprit,
on synthetic run folders (fast) and on the findings alone."""

from __future__ import annotations

import json

from conftest_report import _m, measurements, seed_topology, write_run
from gputopo.runfolder.writer import append_jsonl
from gputopo.model import Finding
from gputopo.model.finding_kinds import is_culprit
from gputopo.report.why.localise import with_explained, killed, localise, mark_explained
from gputopo.report.render import render_run
from gputopo.report.summary import summarize_dir


def _localised(summary):
    return [f for f in summary.findings if is_culprit(f.kind)]


def _corrupt(i, j, lc="NODE", staged=False):
    tests = {"p2p.copy": {"path": "peer", "wrong": 5}}
    if staged:
        tests["p2p.staged"] = {"path": "staged", "wrong": 5}
    return Finding("corrupt", "error", f"GPUs {i},{j}: wrong", gpus=[i, j], link_class=lc,
                   evidence={"tests": tests, "clean_tests": [] if staged else ["p2p.staged"]})


def _ran(pairs):
    return [_m("p2p.copy", p, 64 << 20, 20.0, f"{p[0]}->{p[1]}") for p in pairs]


ALL8 = [(i, j) for i in range(8) for j in range(i + 1, 8)]


def test_seed_story_is_one_class_fault_tied_to_iommu_and_acs(tmp_path):
    s = summarize_dir(write_run(tmp_path / "run", ["corrupt-sys", "iommu", "acs"]))
    loc = _localised(s)
    assert [(f.kind, f.link_class) for f in loc] == [("class-fault", "SYS")]
    cf = loc[0]
    assert cf.evidence["culprit"] == "host-path"
    explained = {(x["kind"], tuple(x["gpus"] or ())) for x in cf.evidence["explains"]}
    assert {k for k, _ in explained} == {"corrupt", "iommu", "acs"}
    assert len([1 for k, _ in explained if k == "corrupt"]) == 16
    assert "iommu" in cf.cause.lower() and "ACS" in cf.cause
    # every per-pair finding is still there, and says which culprit explains it
    corrupt = [f for f in s.findings if f.kind == "corrupt"]
    assert len(corrupt) == 16 and all(f.evidence["explained_by"] == ["class-fault:SYS"] for f in corrupt)


def test_healthy_run_has_no_culprit(tmp_path):
    assert _localised(summarize_dir(write_run(tmp_path / "run", []))) == []


def test_gpu_that_corrupts_every_path_is_one_gpu_fault():
    fs = [_corrupt(min(2, j), max(2, j), staged=True) for j in range(8) if j != 2]
    loc = localise(fs, seed_topology(), _ran(ALL8), [])
    assert [(f.kind, f.gpus) for f in loc] == [("gpu-fault", [2])]
    f = with_explained(loc)[0]
    assert "every path" in f.message and "memory" in f.message
    assert f.evidence["staged_bad"] is True and len(f.evidence["explains"]) == 7
    assert any("ROW_REMAPPER" in r for r in f.remedies)


def test_gpu_fault_on_peer_paths_only_says_staged_copies_were_correct():
    fs = [_corrupt(min(2, j), max(2, j)) for j in range(8) if j != 2]
    f = localise(fs, seed_topology(), _ran(ALL8), [])[0]
    assert f.kind == "gpu-fault" and "every peer path" in f.message and "correct" in f.message


def test_one_bad_pair_between_good_gpus_is_a_link_fault():
    loc = localise([_corrupt(4, 5, "NV4")], seed_topology(), _ran(ALL8), [])
    assert [(f.kind, f.gpus, f.link_class) for f in loc] == [("link-fault", [4, 5], "NV4")]
    assert any("GPU 4 is fine with" in r for r in loc[0].evidence["reasoning"])


def test_two_independent_faults_give_two_culprits():
    fs = [_corrupt(min(2, j), max(2, j), staged=True) for j in range(8) if j != 2] + [_corrupt(5, 6)]
    loc = localise(fs, seed_topology(), _ran(ALL8), [])
    assert sorted((f.kind, tuple(f.gpus)) for f in loc) == [("gpu-fault", (2,)), ("link-fault", (5, 6))]


def test_two_bad_gpus_do_not_blame_a_third_that_only_met_them():
    # GPU 3 was measured only with the two bad GPUs: all its pairs are bad, but they are explained.
    pairs = [(i, j) for i in range(3) for j in range(i + 1, 8) if (i, j) != (0, 1)] + [(3, 4), (0, 1)]
    pairs = sorted({p for p in pairs if 3 not in p} | {(1, 3), (2, 3)})
    fs = [_corrupt(*p, staged=True) for p in pairs if 1 in p or 2 in p]
    loc = localise(fs, seed_topology(), _ran(pairs), [])
    assert sorted(f.gpus[0] for f in loc if f.kind == "gpu-fault") == [1, 2]


def test_failures_that_share_one_gpu_blame_that_gpu():
    hangs = [Finding("hang", "error", "GPUs 2,5: hang", gpus=[2, 5], link_class="SYS"),
             Finding("hang", "error", "GPUs 2,6: hang", gpus=[2, 6], link_class="SYS")]
    loc = localise(hangs, seed_topology(), _ran(ALL8), [])
    assert [(f.kind, f.gpus) for f in loc] == [("gpu-fault", [2])]
    assert "hang" in loc[0].message


def test_every_pair_bad_is_machine_wide_not_eight_gpus():
    fs = [_corrupt(*p) for p in ALL8]
    loc = localise(fs, seed_topology(), _ran(ALL8), [])
    assert [f.kind for f in loc] == ["class-fault"] and loc[0].evidence["culprit"] == "machine"


def test_one_bad_pair_alone_is_not_localised():
    """Nothing contrasts it: the pair could be either GPU or the link."""
    assert localise([_corrupt(5, 6)], seed_topology(), _ran([(5, 6)]), []) == []


def test_slow_pairs_of_a_narrowed_gpu_link_are_its_cause_chain():
    topo = seed_topology(["pcie-width"])  # GPU 1 at x8 of x16
    down = Finding("pcie-downgraded", "warning", "GPU 1: PCIe link x8 of x16", gpus=[1],
                   evidence={"width_current": 8, "width_max": 16})
    slow = [Finding("outlier", "warning", f"GPUs 1,{j}: slow", gpus=[1, j], link_class=lc,
                    evidence={"measured": [{"series": "p2p.copy", "ratio": 0.5, "class_median_gbps": 24.0}]})
            for j, lc in ((2, "NODE"), (3, "NODE"), (4, "SYS"))]
    loc = localise([down] + slow, topo, _ran(ALL8), [])
    assert [(f.kind, f.gpus, f.evidence["culprit"]) for f in loc] == [("gpu-fault", [1], "gpu-pcie-link")]
    assert "x8 of x16" in loc[0].message and "1,2 1,3 (50% of the NODE median)" in loc[0].message
    assert len(loc[0].evidence["_explains"]) == 4  # the scan finding and the three pairs


def test_a_worker_the_kernel_killed_is_never_a_link_fault(tmp_path):
    run = write_run(tmp_path / "run", [])
    append_jsonl(run / "events.jsonl", {
        "type": "finding", "kind": "crash", "severity": "error", "gpus": [3, 7], "link_class": "SYS",
        "message": "GPUs 3,7 (SYS): crash in the p2p step: worker sim0 (pid 12) died: killed by signal SIGKILL",
        "evidence": {"exitcode": -9, "stderr_tail": ""}, "cause": None, "remedies": []})
    s = summarize_dir(run)
    assert [(f.kind, f.gpus) for f in _localised(s)] == [("worker-killed", [3, 7])]
    assert "not a link fault" in _localised(s)[0].message
    crash = next(f for f in s.findings if f.kind == "crash")
    assert "OOM killer" in crash.cause and "IOMMU" not in crash.cause  # its own cause says so too


def test_cuda_out_of_memory_is_gpu_memory_not_the_link():
    f = Finding("crash", "error", "GPUs 0,1: crash: the worker raised torch.OutOfMemoryError: CUDA out of memory",
                gpus=[0, 1], link_class="NV4", evidence={})
    loc = localise([f], seed_topology(), _ran(ALL8), [])
    assert [(x.kind, x.evidence["culprit"]) for x in loc] == [("worker-killed", "gpu-memory")]
    assert "ran out of GPU memory" in loc[0].message


def test_killed_reads_exit_code_and_out_of_memory_text():
    assert killed(Finding("crash", "error", "x", evidence={"exitcode": -9}))
    assert killed(Finding("crash", "error", "x", evidence={"error": "torch.OutOfMemoryError: CUDA out of memory"}))
    assert not killed(Finding("crash", "error", "x", evidence={"exitcode": -6, "stderr_tail": "abort"}))
    from gputopo.report.step_failures import kill_reason_cause as killed_cause

    assert killed_cause(killed(Finding("crash", "error", "RuntimeError: CUDA out of memory. Tried")))[0] == "gpu-memory"
    assert killed_cause(killed(Finding("crash", "error", "x", evidence={"error": "MemoryError"})))[0] == "host-memory"


def test_one_culprit_over_two_classes_tells_each_class_once(tmp_path):
    """The seed story: NODE and SYS both corrupt; one class-fault explains both, and the story
    point leads with the root cause once, then tells each class once as its evidence."""
    run = write_run(tmp_path / "run", ["corrupt-sys", "corrupt-node", "iommu", "acs"])
    render_run(run, plots=False)
    md = (run / "report.md").read_text()
    story = md[md.index("## What was found"):md.index("## Link classes")]
    assert story.count("**Root cause:**") == 1, story
    assert story.count("NODE pairs: broken on all 8") == 1 and story.count("SYS pairs: broken on all 16") == 1
    assert story.index("**Root cause:** every NODE and SYS pair is bad") < story.index("evidence: SYS pairs: broken")
    assert ("P2P DMA between PCIe host bridges inside one CPU socket and across the CPU interconnect "
            "between sockets (NODE, SYS) is corrupt") in story  # its cause names both classes


def test_mark_explained_keeps_every_finding():
    fs = [_corrupt(4, 5, "NV4"), Finding("noisy", "info", "n", gpus=[0, 1])]
    loc = localise(fs, seed_topology(), _ran(ALL8), [])
    marked = mark_explained(fs, loc)
    assert len(marked) == 2 and marked[0].evidence["explained_by"] == ["link-fault:4,5"]
    assert "explained_by" not in marked[1].evidence


def test_outputs_show_the_culprit_with_its_pairs_underneath(tmp_path):
    run = write_run(tmp_path / "run", ["corrupt-sys", "iommu", "acs"])
    render_run(run, plots=False)
    doc = json.loads((run / "summary.json").read_text())
    cf = next(f for f in doc["findings"] if f["kind"] == "class-fault")
    assert len(cf["evidence"]["explains"]) >= 16
    md = (run / "report.md").read_text()
    story = md[md.index("## What was found"):md.index("## Link classes")]
    assert "evidence: SYS pairs: broken on all 16" in story and "**Root cause:** every SYS pair is bad" in story
    table = md[md.index("## Findings"):]
    assert table.index("| class-fault |") < table.index("└ corrupt |") < table.index("└ iommu |")
    html = (run / "report.html").read_text()
    assert "Root cause:</span>every SYS pair is bad" in html and "└ corrupt" in html


def test_gpu_fault_story_lists_the_pairs_underneath(tmp_path):
    ms = measurements()
    for m in ms:
        if 2 in m.gpus and m.test == "p2p.copy":
            m.wrong = 7
    run = write_run(tmp_path / "run", [], meas=ms, nums=[])
    render_run(run, plots=False)
    md = (run / "report.md").read_text()
    story = md[md.index("## What was found"):md.index("## Link classes")]
    assert "**Root cause:** GPU 2 corrupts on every peer path" in story
    assert "underneath: corrupt on 7 pairs: 0,2 1,2 2,3 2,4 2,5 2,6 2,7" in story
    assert "NODE pairs:" not in story  # the pairs are told under their culprit, not again per class


def test_class_story_tells_only_what_no_culprit_explains(tmp_path):
    from conftest_report import ALL_FAULTS
    from gputopo.report.outputs.tables import story
    from gputopo.report.run_folder import load_run
    from gputopo.report.summary import summarize

    s = summarize(load_run(write_run(tmp_path / "run", ALL_FAULTS)))
    texts = [it.text for it in story(s)]
    # 6,7's divergence is told by its link-fault; the NV4 class point keeps only NVML's P2P status
    assert "NV4 pairs: degraded on 1 of 4 (0,1): P2P not OK in NVML on 1." in texts
    assert any(t.startswith("GPUs 6,7 (NV4): diverging training on this pair only") for t in texts)
    root = next(it for it in story(s) if it.text.startswith("every SYS pair is bad"))
    sys_point = next(d for d in root.details if d.startswith("evidence: SYS pairs:"))
    assert "hung" not in sys_point
