"""Where no published reference figure applies (the GPU model is unknown: a headerless nccl-tests
log names no GPU; or the model / class / test is not in data/reference_rates.csv), the summary
says so in a "not known: no reference rate ..." note, with what the series was judged on instead,
and a series no figure applies to is not judged: the verdict says `not-judged`, never `ok` (issue 46).
"""

from __future__ import annotations

import json
from itertools import combinations

from gputopo.bench.fabrics.fabric import fabric_named
from gputopo.model import Gpu, HostInfo, LinkClass, Measurement, Pair, PcieLink, Topology
from gputopo.report.bandwidth_findings import slow_findings
from gputopo.report.expected_basis import NO_REFERENCE, expected_notes, judge_rate, no_reference_notes
from gputopo.report.headline import headlines
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

L40S, H100 = "NVIDIA L40S", "NVIDIA H100 80GB HBM3"
HEADERLESS = FIXTURES / "nccl-tests" / "oci-hpc-oke_gb200-2node-mnnvl_all_reduce_tail20_noheader.txt"


def machine(name, n: int, cls=None, vendor=None, gen=4) -> Topology:
    gpus = [Gpu(nvml_index=i, name=name, uuid=f"GPU-{i}", pci_bus_id=f"00000000:{16 + i:02X}:00.0",
                cuda_index=i, pcie=PcieLink(gen_current=gen, gen_max=gen, width_current=16, width_max=16))
            for i in range(n)]
    pairs = ([] if cls is None else
             [Pair(gpus=(i, j), link_class=LinkClass.parse(cls), nvlink_count=LinkClass.parse(cls).nvlinks)
              for i, j in combinations(range(n), 2)])
    return Topology(gpus=gpus, pairs=pairs, host=HostInfo(cpu_vendor=vendor), machine="t")


def measured(test, gpus, gbps, busbw_factor=1.0, cls=None, fabric="cuda", size=1 << 30):
    t = size * busbw_factor / (gbps * 1e9)
    return Measurement(test=test, gpus=tuple(gpus), size_bytes=size, samples_s=[t, t, t], timing="cuda-events",
                       fabric=fabric, figures_of=fabric_named(fabric).figures_of, link_class=cls, direction=None, wrong=0, busbw_factor=busbw_factor)


def test_headerless_nccl_tests_log_says_no_reference_rate_because_the_model_is_unknown(tmp_path):
    """The posted GB200 tail names no GPU: nothing in the table can be chosen for it, and the
    summary now says so (summary.json notes, report.md and the terminal); its verdict is not-judged."""
    rc, out, err = gputopo_here("import", "nccl-tests", HEADERLESS, "--out", tmp_path / "run", "--no-history")
    assert rc == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["verdict"] == "not-judged" and summary["findings"] == []  # nothing to judge it by (issue 46)
    [note] = [n for n in summary["notes"] if n.startswith(NO_REFERENCE)]
    assert "no reference rate" in note and "GPU model unknown" in note
    assert "collective.all_reduce" in note and "847 GB/s busbw" in note
    assert "not judged against any rate" in note
    assert note in (tmp_path / "run" / "report.md").read_text()
    flat = " ".join(out.split())
    assert "not known: no reference rate for collective.all_reduce" in flat and "GPU model unknown" in flat


def test_a_model_missing_from_the_table_is_named_and_nothing_is_judged_by_it():
    topo = machine(L40S, 4, "NODE")
    heads = headlines([measured("collective.all_reduce", range(4), 20.0, 1.5, "NODE")], topo)
    assert judge_rate(heads[0], topo) is None and slow_findings(heads, topo) == []
    [note] = no_reference_notes(heads, topo)
    assert note.startswith(NO_REFERENCE)
    assert "no reference rate for collective.all_reduce on GPUs 0-3 (NODE)" in note
    assert f"none published for {L40S} NODE on 4 GPUs" in note
    assert "not judged against any rate" in note


def test_a_peer_copy_without_a_row_says_it_was_judged_on_the_theoretical_rate_only():
    topo = machine(L40S, 2, "SYS")
    heads = headlines([measured("p2p.copy", (0, 1), 20.0, cls="SYS")], topo)
    j = judge_rate(heads[0], topo)
    assert j is not None and j.basis == "theoretical"
    [note] = no_reference_notes(heads, topo)
    assert f"none published for {L40S} SYS on 2 GPUs" in note
    assert "judged against the link's theoretical rate only" in note


def test_link_class_unknown_is_named_as_the_reason():
    topo = machine(L40S, 2, None)
    heads = headlines([measured("p2p.copy", (0, 1), 20.0)], topo)
    [note] = no_reference_notes(heads, topo)
    assert "link class unknown" in note and L40S in note


def test_series_with_a_reference_get_no_not_known_note():
    topo = machine(H100, 8, "NV18", gen=5)
    heads = headlines([measured("collective.all_reduce", range(8), 360, 2 * 7 / 8, "NV18")], topo)
    assert no_reference_notes(heads, topo) == []
    assert len(expected_notes(heads, topo)) == 1


def test_many_series_of_one_model_and_class_are_said_in_one_line():
    topo = machine(L40S, 4, "NODE")
    ms = [measured(t, p, 20.0, cls="NODE") for p in combinations(range(4), 2) for t in ("p2p.copy", "dp.scatter")]
    ms += [measured("p2p.copy_bidir", p, 40.0, cls="NODE") for p in combinations(range(4), 2)]
    [note] = no_reference_notes(headlines(ms, topo), topo)
    assert "3 series on 6 pairs (NODE)" in note
    assert "theoretical rate only: p2p.copy, p2p.copy_bidir;" in note and note.endswith("as expected): dp.scatter")


def test_cpu_fabric_series_are_not_link_rates_and_get_no_note():
    topo = machine(L40S, 2, "NODE")
    heads = headlines([measured("p2p.copy", (0, 1), 5.0, cls="NODE", fabric="cpu")], topo)
    assert no_reference_notes(heads, topo) == []
