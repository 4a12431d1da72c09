"""`gputopo import p2pbw FILE`: p2pBandwidthLatencyTest outputs import with their exact values,
peer copies slower than staged ones are `p2p-slower-than-staged` on every pair, a healthy box
gets no warning, and `--topo` names the pairs' link classes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputopo.errors import InputFileError, UsageError
from gputopo.importers.user_inputs import load_topo_file
from gputopo.importers.p2pbw_import import p2pbw_measurements, read_p2pbw
from gputopo.importers.run import run_import
from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

P2P = FIXTURES / "p2pbw"
STELLINE = P2P / "stelline_asus-esc8000a_4xrtx6000ada.txt"
STELLINE_TOPO = FIXTURES / "topo" / "stelline_asus-esc8000a_4xrtx6000ada_amd_nics.txt"
NCCL_814 = P2P / "nccl-814_6gpu_pcie_p2p-slower-than-staged_excerpt.txt"


def _findings(run_dir):
    return json.loads((Path(run_dir) / "summary.json").read_text())["findings"]


def _gbps(ms, test, direction):
    (m,) = [m for m in ms if m.test == test and m.direction == direction]
    return round(m.algbw_gbps, 4) if m.size_bytes else round(m.median_s * 1e6, 4)


def test_stelline_every_matrix():
    out = read_p2pbw(str(STELLINE))
    assert [(d.index, d.name, d.bus_id) for d in out.devices] == [
        (0, "NVIDIA RTX 6000 Ada Generation", "00000000:01:00"), (1, "NVIDIA RTX 6000 Ada Generation", "00000000:41:00"),
        (2, "NVIDIA RTX 6000 Ada Generation", "00000000:C1:00"), (3, "NVIDIA RTX 6000 Ada Generation", "00000000:E1:00")]
    assert all(out.access[(i, j)] for i in range(4) for j in range(4) if i != j)
    names = [m.name for m in out.matrices]
    assert names == ["connectivity", "unidirectional p2p-disabled bandwidth", "unidirectional p2p-enabled bandwidth writes",
                     "bidirectional p2p-disabled bandwidth", "bidirectional p2p-enabled bandwidth writes",
                     "p2p-disabled latency gpu", "p2p-disabled latency cpu", "p2p-enabled latency writes gpu",
                     "p2p-enabled latency writes cpu"]
    assert all(m.complete for m in out.matrices) and out.problems == []
    assert out.matrix("unidirectional p2p-disabled bandwidth").cells[0] == [140.75, 22.23, 22.12, 22.21]
    assert out.matrix("p2p-enabled latency writes cpu").cells[3] == [1.74, 1.71, 1.73, 2.05]
    ms = p2pbw_measurements(out)
    assert _gbps(ms, "p2p.copy", "1->0") == 26.32 and _gbps(ms, "p2p.staged", "0->1") == 22.23
    assert _gbps(ms, "p2p.copy_bidir", "2<->3") == 52.12 and _gbps(ms, "p2p.staged_bidir", "3<->0") == 31.39
    assert _gbps(ms, "p2p.latency_staged", "0->1") == 10.73 and _gbps(ms, "p2p.latency_cpu", "2->3") == 1.68
    d2d = [m for m in ms if m.test == "self.d2d"]
    assert [round(m.algbw_gbps, 2) for m in d2d] == [140.75, 813.80, 812.53, 813.80]
    assert all(m.extra["peer_access"] is True for m in ms if m.test == "p2p.copy")
    cpu_timed = [m for m in ms if m.timing == "wall"]  # the latency matrices timed by the CPU
    assert {m.test for m in cpu_timed} == {"p2p.latency_cpu", "p2p.latency_staged_cpu"}
    assert all(m.figures_of == "gpus" for m in ms)  # every figure is of the real GPUs, however timed


def test_healthy_box_gets_no_warning_with_or_without_topo(tmp_path):
    plain = run_import("p2pbw", [str(STELLINE)], out_dir=tmp_path / "a")
    assert _findings(plain.run_dir) == []
    topo = load_topo_file(str(STELLINE_TOPO))
    res = run_import("p2pbw", [str(STELLINE)], out_dir=tmp_path / "b", topology=topo, topology_file=str(STELLINE_TOPO))
    # the topology's own facts come along: its NICs are NODE to the GPUs, beyond NCCL's default
    # GPUDirect RDMA distance (info, not a fault of the GPU pairs)
    assert {(f["kind"], f["severity"]) for f in _findings(res.run_dir)} == {("gpudirect-rdma", "info")}
    classes = {tuple(r["gpus"]): r["link_class"] for r in map(json.loads, (res.run_dir / "measurements.jsonl")
                                                                .read_text().splitlines()) if r["test"] == "p2p.copy"}
    assert classes[(0, 1)] == "NODE" and classes[(0, 2)] == "SYS" and classes[(2, 3)] == "NODE"


def test_peer_slower_than_staged_on_every_pair(tmp_path):
    out = read_p2pbw(str(NCCL_814))
    assert out.devices == [] and out.matrix("unidirectional p2p-enabled bandwidth reads").cells[3][2] == 10.45
    bidir = out.matrix("bidirectional p2p-disabled bandwidth")
    assert bidir.cells == [[918.31, 21.12, 30.53, 29.85]] and not bidir.complete  # the post's excerpt ends mid-row
    res = run_import("p2pbw", [str(NCCL_814)], out_dir=tmp_path / "run")
    fs = _findings(res.run_dir)
    staged = [f for f in fs if f["kind"] == "p2p-slower-than-staged"]
    assert len(staged) == 15  # every pair of the 6 GPUs
    f01 = next(f for f in staged if f["gpus"] == [0, 1])
    worst = min(f01["evidence"]["measured"], key=lambda d: d["ratio"])
    assert (worst["p2p_gbps"], worst["staged_gbps"]) == (pytest.approx(9.9), pytest.approx(20.39))
    assert {f["kind"] for f in fs} <= {"p2p-slower-than-staged", "class-fault", "incomplete-data"}
    assert any(f["kind"] == "incomplete-data" and "cut short" in f["message"] for f in fs)


def test_cli_and_topo_mismatch(tmp_path):
    r = gputopo_here("import", "p2pbw", STELLINE, "--topo",
                     FIXTURES / "topo" / "seed-8gpu-nv4-pairs.txt")
    assert r.returncode == 2 and "another machine" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_older_format_and_prefixes(tmp_path):
    text = ("0: [P2P (Peer-to-Peer) GPU Bandwidth Latency Test]\n"
            "0: Device: 0, Tesla V100-SXM2-16GB, pciBusID: 5d, pciDeviceID: 0, pciDomainID:0\n"
            "0: Device: 1, Tesla V100-SXM2-16GB, pciBusID: 5e, pciDeviceID: 0, pciDomainID:0\n"
            "0: Device=0 CANNOT Access Peer Device=1\n"
            "0: Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n"
            "0:    D\\D     0      1 \n0:      0 750.00   8.50 \n0:      1   8.60 751.00 \n"
            "0: Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)\n"
            "0:    D\\D     0      1\n0:      0 749.00  10.10\n0:      1  10.20 750.00\n")
    p = tmp_path / "old.txt"
    p.write_text(text)
    out = read_p2pbw(str(p))
    assert out.devices[1].bus_id == "00000000:5E:00" and out.access[(0, 1)] is False
    res = run_import("p2pbw", [str(p)], out_dir=tmp_path / "run")
    # Without peer access the P2P=Enabled copies are staged ones (both directions: only 0 -> 1 is
    # printed, and peer access is granted per pair): the fact is said as no-peer-access, a warning
    # between SXM2 modules (NVLink on their board); two staged copies are never compared as
    # "peer slower than staged".
    kinds = [f["kind"] for f in _findings(res.run_dir)]
    assert "p2p-slower-than-staged" not in kinds
    (f,) = [f for f in _findings(res.run_dir) if f["kind"] == "no-peer-access"]
    assert f["gpus"] == [0, 1] and f["severity"] == "warning" and "baseboard" in f["message"]


@pytest.mark.parametrize("content, words", [(b"", "is empty"), (b"\x00\x01\x02", "binary"),
                                            (b"nvbandwidth Version: v0.8\n", "not p2pBandwidthLatencyTest")])
def test_bad_input(tmp_path, content, words):
    p = tmp_path / "in.txt"
    p.write_bytes(content)
    with pytest.raises(InputFileError, match=words):
        read_p2pbw(str(p))


def test_out_folder_never_overwritten(tmp_path):
    run_import("p2pbw", [str(STELLINE)], out_dir=tmp_path / "run", render=False)
    with pytest.raises(UsageError, match="never overwritten"):
        run_import("p2pbw", [str(STELLINE)], out_dir=tmp_path / "run", render=False)


def _scan_json_topo(tmp_path, buses):
    from gputopo.model import topology_to_json

    topo = load_topo_file(str(STELLINE_TOPO))
    for g, bus in zip(topo.gpus, buses):
        g.pci_bus_id, g.name = bus, "NVIDIA RTX 6000 Ada Generation"
    p = tmp_path / "scan.json"
    p.write_text(json.dumps(topology_to_json(topo)))
    return p


def test_topo_with_bus_ids_renumbers_cuda_devices_to_nvml(tmp_path):
    # NVML (the topology) numbers by bus id; here the topology lists the buses in the opposite order.
    p = _scan_json_topo(tmp_path, ["00000000:E1:00.0", "00000000:C1:00.0", "00000000:41:00.0", "00000000:01:00.0"])
    res = run_import("p2pbw", [str(STELLINE)], out_dir=tmp_path / "run", topology=load_topo_file(str(p)),
                       topology_file=str(p), render=False)
    rows = [json.loads(x) for x in (res.run_dir / "measurements.jsonl").read_text().splitlines()]
    (m,) = [r for r in rows if r["test"] == "p2p.copy" and r["extra"]["output_gpus"] == [0, 2] and r["extra"]["cell"] == [2, 0]]
    assert m["gpus"] == [1, 3] and m["direction"] == "1->3" and m["extra"]["printed"] == 26.32
    wrong = _scan_json_topo(tmp_path, ["00000000:E1:00.0", "00000000:C1:00.0", "00000000:42:00.0", "00000000:01:00.0"])
    with pytest.raises(UsageError, match="no GPU at 00000000:41:00"):
        run_import("p2pbw", [str(STELLINE)], out_dir=tmp_path / "run2", topology=load_topo_file(str(wrong)),
                     topology_file=str(wrong), render=False)


def test_utf16_file_from_a_windows_shell(tmp_path):
    p = tmp_path / "p2p-utf16.txt"
    p.write_bytes(STELLINE.read_text().encode("utf-16"))
    out = read_p2pbw(str(p))
    assert out.matrix("bidirectional p2p-enabled bandwidth writes").cells[1] == [52.10, 805.20, 52.12, 52.11]


def test_latency_excerpt_pasted_with_editor_line_numbers(tmp_path):
    path = P2P / "cuda-samples-230_4gpu_latency_vim-line-numbers_excerpt.txt"
    out = read_p2pbw(str(path))
    assert [m.name for m in out.matrices] == ["p2p-disabled latency gpu", "p2p-disabled latency cpu",
                                              "p2p-enabled latency writes gpu", "p2p-enabled latency writes cpu"]
    assert out.problems == [] and any("line numbers" in n for n in out.notes)
    assert out.matrix("p2p-disabled latency gpu").cells[2] == [13.34, 16.44, 2.06, 16.80]
    assert out.matrix("p2p-enabled latency writes cpu").cells[3] == [1.84, 1.91, 1.88, 2.55]
    ms = p2pbw_measurements(out)
    assert _gbps(ms, "p2p.latency_staged", "0->2") == 19.61 and _gbps(ms, "p2p.latency_cpu", "2->1") == 1.76
    assert all(m.timing == "wall" for m in ms if m.test.endswith("_cpu"))
    res = run_import("p2pbw", [str(path)], out_dir=tmp_path / "run")
    assert _findings(res.run_dir) == []  # latency alone: nothing to judge, nothing wrong


def test_place_ranks_an_import_without_topo_by_measured_gbps(tmp_path):
    res = run_import("p2pbw", [str(NCCL_814)], out_dir=tmp_path / "run", render=False)
    r = gputopo_here("place", "2", "--from", res.run_dir, "--json")
    assert r.returncode == 0, r.stderr
    best = json.loads(r.stdout)["sets"][0]
    # the pair whose slower peer-copy direction is fastest: 3,5 (10.23 / 10.22 GB/s)
    assert best["gpus"] == [3, 5] and best["worst_gbps"] == pytest.approx(10.22, abs=0.01)
    assert best["worst_link_class"] is None


@pytest.mark.parametrize("name, cut", [("stelline_asus-esc8000a_4xrtx6000ada.txt", 0),
                                       ("nccl-814_6gpu_pcie_p2p-slower-than-staged_excerpt.txt", 1)])
def test_every_printed_number_is_read_in_order(name, cut):
    """All matrix cells, read independently (every number after a row label), in file order; an
    excerpt's last value (cut mid-number) is the one the importer leaves out."""
    import re

    text = (P2P / name).read_text().splitlines()
    naive = [float(t) for ln in text if re.match(r"^\s*\d+\s+[\d.]", ln) for t in ln.split()[1:]]
    read = [v for m in read_p2pbw(str(P2P / name)).matrices for row in m.cells for v in row]
    assert read == naive[: len(naive) - cut] and len(read) > 50


def test_the_same_output_twice_is_refused(tmp_path):
    copy = tmp_path / "copy.txt"
    copy.write_bytes(STELLINE.read_bytes())
    with pytest.raises(UsageError, match="counted twice"):
        run_import("p2pbw", [str(STELLINE), str(copy)], out_dir=tmp_path / "run", render=False)


def test_topo_text_keeps_the_gpu_models_and_bus_ids_the_output_prints(tmp_path):
    """`nvidia-smi topo -m` text names no model and no bus id; the output's "Device: 0, NVIDIA RTX
    6000 Ada Generation, pciBusID: 1, ..." lines do, and the run folder keeps them (they were
    dropped when --topo was given, so no reference rate could match the GPU)."""
    topo = load_topo_file(str(STELLINE_TOPO))
    assert not any(isinstance(g.name, str) for g in topo.gpus)  # the text itself has none
    res = run_import("p2pbw", [str(STELLINE)], out_dir=tmp_path / "run", topology=topo, topology_file=str(STELLINE_TOPO),
                       render=False)
    gpus = json.loads((res.run_dir / "topology.json").read_text())["gpus"]
    assert [(g["nvml_index"], g["name"], g["pci_bus_id"], g["cuda_index"]) for g in gpus] == [
        (0, "NVIDIA RTX 6000 Ada Generation", "00000000:01:00.0", 0),
        (1, "NVIDIA RTX 6000 Ada Generation", "00000000:41:00.0", 1),
        (2, "NVIDIA RTX 6000 Ada Generation", "00000000:C1:00.0", 2),
        (3, "NVIDIA RTX 6000 Ada Generation", "00000000:E1:00.0", 3)]
    assert gpus[0]["numa_node"] == 0 and gpus[0]["cpu_affinity"] == "0-31"  # the topology's own facts stay


def test_topo_text_and_devices_out_of_bus_order_are_matched_by_bus_order(tmp_path):
    """WRITTEN: the posted output with devices 0 and 1 swapped (as CUDA_VISIBLE_DEVICES=1,0,2,3
    lists them): nvidia-smi numbers GPUs in PCI bus order, so CUDA device 0 (bus 41) is
    nvidia-smi GPU 1 and device 1 (bus 01) GPU 0; each keeps its bus id and CUDA number (before:
    the model only, and the measurements kept CUDA's numbers as if they were nvidia-smi's)."""
    text = STELLINE.read_text().replace("pciBusID: 1,", "pciBusID: XX,").replace("pciBusID: 41,", "pciBusID: 1,") \
        .replace("pciBusID: XX,", "pciBusID: 41,")
    p = tmp_path / "swapped.txt"
    p.write_text(text)
    res = run_import("p2pbw", [str(p)], out_dir=tmp_path / "run", topology=load_topo_file(str(STELLINE_TOPO)),
                       topology_file=str(STELLINE_TOPO), render=False)
    gpus = json.loads((res.run_dir / "topology.json").read_text())["gpus"]
    assert {g["name"] for g in gpus} == {"NVIDIA RTX 6000 Ada Generation"}
    assert [(g["nvml_index"], g["pci_bus_id"], g["cuda_index"]) for g in gpus] == [
        (0, "00000000:01:00.0", 1), (1, "00000000:41:00.0", 0), (2, "00000000:C1:00.0", 2),
        (3, "00000000:E1:00.0", 3)]
