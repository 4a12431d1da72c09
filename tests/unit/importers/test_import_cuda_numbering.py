"""`import p2pbw` / `import nvbandwidth --topo`: the outputs number GPUs as CUDA does (fastest
first by default, reordered by CUDA_VISIBLE_DEVICES), `nvidia-smi topo -m` as NVML does (PCI bus
order). Where the output prints bus ids, its devices are matched to the topology's GPUs by bus id
or bus order, never by number; where it prints none, the by-number match is said as an
assumption; where its bus ids contradict numbering by number and nothing matches them, no link
class is given (said why), so no pair is judged against another pair's link."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gputopo.importers.run import run_import
from gputopo.importers.user_inputs import load_topo_file
from gputopo.model.topology import topology_to_json
from helpers.cli import gputopo_here
from helpers.paths import DATA, FIXTURES

STELLINE = FIXTURES / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt"
STELLINE_TOPO = FIXTURES / "topo" / "stelline_asus-esc8000a_4xrtx6000ada_amd_nics.txt"
A6000 = FIXTURES / "nvbandwidth" / "nvbandwidth-50_6xa6000_d2d_read_ce_v0.8.txt"
RTX4090 = FIXTURES / "nvbandwidth" / "nvbandwidth-15_8xrtx4090_v0.2_excerpt.txt"
SEED_TOPO = FIXTURES / "topo" / "seed-8gpu-nv4-pairs.txt"


def _run(run_dir: Path):
    ms = [json.loads(line) for line in (run_dir / "measurements.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    return ms, summary


def _stelline_reordered(tmp_path: Path) -> Path:
    """WRITTEN from the posted output: its device lines reordered as CUDA_VISIBLE_DEVICES=0,2,1,3
    lists them (CUDA device 1 is the GPU at bus c1, nvidia-smi's GPU 2; device 2 the one at bus
    41, nvidia-smi's GPU 1); the matrices are the posted ones."""
    text = STELLINE.read_text()
    text = text.replace("pciBusID: 41,", "pciBusID: XX,").replace("pciBusID: c1,", "pciBusID: 41,") \
        .replace("pciBusID: XX,", "pciBusID: c1,")
    p = tmp_path / "stelline_cuda-visible-0213.txt"
    p.write_text(text)
    return p


def test_p2pbw_devices_out_of_bus_order_are_matched_by_bus_order(tmp_path):
    """nvidia-smi topo -m (no bus ids): GPU0-1 and GPU2-3 NODE, SYS across. CUDA devices 0 and 1
    of the reordered output are nvidia-smi GPUs 0 and 2 (SYS), not GPUs 0 and 1 (NODE): the
    measurement is of pair 0,2 and gets SYS (before: pair 0,1, NODE, another pair's link)."""
    res = run_import("p2pbw", [str(_stelline_reordered(tmp_path))], out_dir=tmp_path / "run",
                       topology=load_topo_file(str(STELLINE_TOPO)), topology_file=str(STELLINE_TOPO))
    ms, summary = _run(res.run_dir)
    (m,) = [m for m in ms if m["test"] == "p2p.copy" and m["extra"]["cell"] == [0, 1]]
    assert m["gpus"] == [0, 2] and m["link_class"] == "SYS" and m["direction"] == "0->2"
    assert m["extra"]["output_gpus"] == [0, 1]
    (m,) = [m for m in ms if m["test"] == "p2p.copy" and m["extra"]["cell"] == [0, 2]]
    assert m["gpus"] == [0, 1] and m["link_class"] == "NODE"
    gpus = json.loads((res.run_dir / "topology.json").read_text())["gpus"]
    assert [(g["nvml_index"], g["pci_bus_id"], g["cuda_index"]) for g in gpus] == [
        (0, "00000000:01:00.0", 0), (1, "00000000:41:00.0", 2), (2, "00000000:C1:00.0", 1),
        (3, "00000000:E1:00.0", 3)]
    (note,) = [n for n in summary["notes"] if n.startswith("GPU numbers: ")]
    assert "by PCI bus order" in note and "nvidia-smi numbers GPUs in PCI bus order" in note
    assert "CUDA device 1 (00000000:C1:00) is nvidia-smi GPU 2" in note


def test_p2pbw_devices_in_bus_order_say_so(tmp_path):
    """The posted output lists its GPUs in bus order: CUDA device N is nvidia-smi GPU N, said with
    its basis."""
    r = gputopo_here("import", "p2pbw", STELLINE, "--topo", STELLINE_TOPO, "--out", tmp_path / "run", "--no-history")
    assert r.returncode == 0, r.stderr
    assert "GPU numbers: matched by PCI bus order: CUDA device N is nvidia-smi GPU N" in " ".join(r.stdout.split())
    ms, _ = _run(tmp_path / "run")
    (m,) = [m for m in ms if m["test"] == "p2p.copy" and m["extra"]["cell"] == [0, 1]]
    assert m["gpus"] == [0, 1] and m["link_class"] == "NODE"


#: WRITTEN: a 6-GPU `nvidia-smi topo -m` for the A6000 output (none was posted): GPUs 0, 1, 3 on
#: one CPU (NODE), 2, 4, 5 on the other, SYS across; nvidia-smi numbers them by bus (01, 21,
#: 41, 61, 81, a1), and the board's root ports put bus 61 on the first CPU.
A6000_TOPO = (DATA / "topo_written" / "a6000-6gpu_node-sys.txt").read_text()
#: The posted output's CUDA devices 0-2 copy at 26.3 GB/s among themselves, 3-5 too, ~22 across:
#: with these bus ids (the list the post cut, WRITTEN in place of its "..." line, as
#: CUDA_VISIBLE_DEVICES=0,1,3,2,4,5 lists them) CUDA devices 0, 1, 2 are nvidia-smi GPUs 0, 1, 3.
A6000_BUSES = ["01", "21", "61", "41", "81", "a1"]


def _a6000(tmp_path: Path, buses: list[str | None]) -> tuple[Path, Path]:
    lines = [f"Device {k}: NVIDIA RTX A6000" + (f" (00000000:{b}:00)" if b else "") for k, b in enumerate(buses)]
    p = tmp_path / "a6000.txt"
    p.write_text(A6000.read_text().replace("...\n", "\n".join(lines) + "\n"))
    t = tmp_path / "topo.txt"
    t.write_text(A6000_TOPO)
    return p, t


def test_nvbandwidth_reordered_devices_no_healthy_pair_blamed(tmp_path):
    """Matched by bus order, every pair has its own link's class: the 26.3 GB/s pairs are NODE,
    the 22 GB/s ones SYS, no finding. Matched by number (before), CUDA pairs 0,2 and 1,2 (26.3
    GB/s, NODE in truth) were given SYS and pairs 2,3 2,4 2,5 (22 GB/s, SYS in truth) NODE: each
    class mixed both links' figures (the spread, 0.83, stayed above the outlier ratio, so no
    finding showed it)."""
    p, t = _a6000(tmp_path, A6000_BUSES)
    r = gputopo_here("import", "nvbandwidth", p, "--topo", t, "--out", tmp_path / "run", "--no-history")
    assert r.returncode == 0, r.stderr
    ms, summary = _run(tmp_path / "run")
    assert summary["findings"] == [] and summary["verdict"] == "ok"
    classes = {(tuple(m["gpus"]), m["link_class"]) for m in ms if len(m["gpus"]) == 2}
    fast = {tuple(m["gpus"]) for m in ms if len(m["gpus"]) == 2 and m["extra"]["printed"] > 25}
    assert {c for g, c in classes if g in fast} == {"NODE"}
    assert {c for g, c in classes if g not in fast} == {"SYS"}
    assert (( 0, 3), "NODE") in classes  # CUDA devices 0 and 2
    assert "nvidia-smi numbers GPUs in PCI bus order" in " ".join(r.stdout.split())


def test_nvbandwidth_bus_ids_out_of_order_and_one_missing_get_no_link_class(tmp_path):
    """WRITTEN: the same output with device 5's bus id left out: the others show CUDA numbered the
    GPUs otherwise than nvidia-smi, and nothing says which GPU device 5 is: imported without link
    classes, the note saying why (before: classes by number, as above)."""
    p, t = _a6000(tmp_path, A6000_BUSES[:5] + [None])
    r = gputopo_here("import", "nvbandwidth", p, "--topo", t, "--out", tmp_path / "run", "--no-history")
    assert r.returncode == 0, r.stderr
    ms, summary = _run(tmp_path / "run")
    assert all(m["link_class"] is None for m in ms)
    topo = json.loads((tmp_path / "run" / "topology.json").read_text())
    assert topo["pairs"] == []
    (note,) = [n for n in summary["notes"] if n.startswith("GPU numbers: ")]
    assert "not matched to --topo" in note and "not in PCI bus order" in note and "no link class" in note
    assert "only 5 of its 6 devices" in note
    imported = json.loads((tmp_path / "run" / "imported.json").read_text())["imports"][0]
    assert imported["gpu_numbering"]["basis"] == "none" and imported["gpu_numbering"]["link_classes"] is False


def test_nvbandwidth_one_bus_id_twice_gets_no_link_class(tmp_path):
    """WRITTEN: two device lines with one bus id: which GPU is which cannot be told."""
    p, t = _a6000(tmp_path, A6000_BUSES[:5] + ["01"])
    res = run_import("nvbandwidth", [str(p)], out_dir=tmp_path / "run", topology=load_topo_file(str(t)),
                             topology_file=str(t))
    ms, summary = _run(res.run_dir)
    assert all(m["link_class"] is None for m in ms)
    assert any("one bus id for two devices" in n for n in summary["notes"])


def test_nvbandwidth_without_bus_ids_says_the_assumption(tmp_path):
    """v0.2 prints no bus id: CUDA device N is taken as nvidia-smi GPU N, and the report says so
    (before: taken silently)."""
    r = gputopo_here("import", "nvbandwidth", RTX4090, "--topo", SEED_TOPO, "--out", tmp_path / "run",
                     "--no-history")
    assert r.returncode == 0, r.stderr
    ms, summary = _run(tmp_path / "run")
    (note,) = [n for n in summary["notes"] if n.startswith("GPU numbers: ")]
    assert re.search(r"assumed: CUDA device N taken as nvidia-smi GPU N: no bus ids in the nvbandwidth output", note)
    assert "CUDA_DEVICE_ORDER=FASTEST_FIRST" in note
    assert "GPU numbers: assumed: CUDA device N taken as nvidia-smi GPU N" in " ".join(r.stdout.split())
    assert "CUDA device N taken as nvidia-smi GPU N" in (tmp_path / "run" / "report.md").read_text()


def test_p2pbw_no_peer_access_of_a_reordered_output_names_nvidia_smi_pair(tmp_path):
    """WRITTEN from the posted output: reordered as above (CUDA_VISIBLE_DEVICES=0,2,1,3), cut after
    its connectivity matrix (no bandwidth matrix: the peer-access fact comes from the printed
    lines alone), with CUDA devices 0 and 1 made unable to reach each other. CUDA pair 0,1 is
    nvidia-smi pair 0,2 (SYS): the finding names 0,2 (before: 0,1, a pair that has access)."""
    text = _stelline_reordered(tmp_path).read_text()
    text = text[:text.index("Unidirectional P2P=Disabled")]
    text = text.replace("Device=0 CAN Access Peer Device=1", "Device=0 CANNOT Access Peer Device=1") \
        .replace("Device=1 CAN Access Peer Device=0", "Device=1 CANNOT Access Peer Device=0")
    p = tmp_path / "no-peer.txt"
    p.write_text(text)
    r = gputopo_here("import", "p2pbw", p, "--topo", STELLINE_TOPO, "--out", tmp_path / "run", "--no-history")
    assert r.returncode == 0, r.stderr
    _, summary = _run(tmp_path / "run")
    (f,) = [f for f in summary["findings"] if f["kind"] == "no-peer-access"]
    assert f["gpus"] == [0, 2] and f["evidence"]["pairs"] == [[0, 2]] and f["link_class"] == "SYS"


def test_nvbandwidth_multinode_output_with_one_machines_topology_is_refused(tmp_path):
    """WRITTEN: a multinode output of two hosts' GPUs (its Process lines) with a 2-GPU topology:
    a topology is one machine's, so pair 0,1 (across hosts) would get a link class of one host
    (before: imported, classed PIX)."""
    p = tmp_path / "mn.txt"
    p.write_text("nvbandwidth Version: v0.8\n\n"
                 "Process 0 (node-a): device 0: NVIDIA RTX 2080 Ti (00000000:01:00)\n"
                 "Process 1 (node-b): device 0: NVIDIA RTX 2080 Ti (00000000:02:00)\n\n"
                 "Running multinode_device_to_device_memcpy_read_ce.\n"
                 "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)\n           0         1\n"
                 " 0       N/A     10.10\n 1     10.20       N/A\n\n"
                 "SUM multinode_device_to_device_memcpy_read_ce 20.30\n")
    r = gputopo_here("import", "nvbandwidth", p, "--topo", FIXTURES / "topo" / "autodl_2x2080ti_pix.txt",
                     "--out", tmp_path / "run")
    assert r.returncode == 2 and "ran on 2 hosts (node-a, node-b)" in r.stderr and "Traceback" not in r.stderr


def _stelline_subset(tmp_path: Path, keep: list[int]) -> Path:
    """WRITTEN from the posted output: only the devices ``keep`` (CUDA_VISIBLE_DEVICES=<keep>
    lists them as CUDA devices 0, 1, ..., printed in that order), each matrix cut to their rows
    and columns; the figures are the posted ones."""
    new = {old: k for k, old in enumerate(keep)}
    out: list[str] = []
    pending: list[tuple[tuple[int, int], str]] = []  # lines of one block, printed in CUDA's order
    kind = ""
    for line in STELLINE.read_text().splitlines():
        dev = re.match(r"Device: (\d+),(.*)", line)
        peer = re.match(r"Device=(\d+) (CAN|CANNOT) Access Peer Device=(\d+)", line)
        cells = line.split()
        row = len(cells) == 5 and cells[0].isdigit()
        this = "dev" if dev else "peer" if peer else "row" if row else ""
        if this != kind:
            out += [text for _, text in sorted(pending)]
            pending, kind = [], this
        if dev:
            if int(dev.group(1)) in new:
                pending.append(((new[int(dev.group(1))], 0), f"Device: {new[int(dev.group(1))]},{dev.group(2)}"))
        elif peer:
            a, b = int(peer.group(1)), int(peer.group(3))
            if a in new and b in new:
                pending.append(((new[a], new[b]), f"Device={new[a]} {peer.group(2)} Access Peer Device={new[b]}"))
        elif row:
            if int(cells[0]) in new:
                k = new[int(cells[0])]
                pending.append(((k, 0), f"     {k}" + "".join(f"{cells[1 + c]:>7}" for c in keep)))
        elif len(cells) == 5 and cells[0] in ("D\\D", "GPU", "CPU"):
            out.append(f"   {cells[0]}" + "".join(f"{k:>7}" for k in range(len(keep))))
        else:
            out.append(line)
    out += [text for _, text in sorted(pending)]
    p = tmp_path / f"stelline_cuda-visible-{''.join(map(str, keep))}.txt"
    p.write_text("\n".join(out) + "\n")
    return p


def _stelline_scan_json(tmp_path: Path) -> Path:
    """WRITTEN: the posted `nvidia-smi topo -m` as `gputopo scan --json` would give it, with the
    bus ids the p2pBandwidthLatencyTest output printed (nvidia-smi numbers GPUs in bus order)."""
    from dataclasses import replace as dc_replace

    topo = load_topo_file(str(STELLINE_TOPO))
    buses = ["00000000:01:00.0", "00000000:41:00.0", "00000000:C1:00.0", "00000000:E1:00.0"]
    topo = dc_replace(topo, gpus=[dc_replace(g, pci_bus_id=b) for g, b in zip(topo.gpus, buses)])
    p = tmp_path / "scan.json"
    p.write_text(json.dumps(topology_to_json(topo)))
    return p


def test_p2pbw_subset_matched_by_bus_id_says_the_hidden_gpus(tmp_path):
    """CUDA_VISIBLE_DEVICES=3,1 (written): CUDA device 0 is nvidia-smi GPU 3, device 1 GPU 1
    (NODE... across CPUs: SYS). With a scan --json topology (bus ids on both sides) the subset is
    imported, renumbered, classed, and GPUs 0 and 2 are said not in the output (before: refused,
    '4 GPU(s), but ... lists 2')."""
    p = _stelline_subset(tmp_path, [3, 1])
    r = gputopo_here("import", "p2pbw", p, "--topo", _stelline_scan_json(tmp_path), "--out", tmp_path / "run",
                     "--no-history")
    assert r.returncode == 0, r.stderr
    ms, summary = _run(tmp_path / "run")
    (m,) = [m for m in ms if m["test"] == "p2p.copy" and m["extra"]["cell"] == [0, 1]]
    assert m["gpus"] == [1, 3] and m["link_class"] == "SYS" and m["direction"] == "3->1"
    assert {tuple(m["gpus"]) for m in ms} <= {(1,), (3,), (1, 3)}
    (note,) = [n for n in summary["notes"] if n.startswith("GPU numbers: ")]
    assert "lists 2 of the topology's 4 GPUs, matched by bus id" in note
    assert "CUDA device 0 (00000000:E1:00) is nvidia-smi GPU 3" in note
    assert "nvidia-smi GPU(s) 0 (00000000:01:00), 2 (00000000:C1:00) not in the output" in note
    assert "not measured" in note
    numbering = json.loads((tmp_path / "run" / "imported.json").read_text())["imports"][0]["gpu_numbering"]
    assert numbering["basis"] == "bus id" and numbering["not_in_output"] == [0, 2]
    assert numbering["mapping"] == [[0, 3], [1, 1]]
    assert "not in the output" in " ".join(r.stdout.split())


def test_p2pbw_subset_with_smi_text_topology_is_refused_saying_what_to_pass(tmp_path):
    """`nvidia-smi topo -m` names no bus id: which 2 of its 4 GPUs ran cannot be told (bus order
    among hidden GPUs is no match), so one line asks for `gputopo scan --json`."""
    p = _stelline_subset(tmp_path, [3, 1])
    r = gputopo_here("import", "p2pbw", p, "--topo", STELLINE_TOPO, "--out", tmp_path / "run")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "has 4 GPU(s), but the p2pBandwidthLatencyTest output lists 2" in r.stderr
    assert "names no bus id of its GPUs" in r.stderr and "gputopo scan --json" in r.stderr


def test_nvbandwidth_subset_without_bus_ids_is_refused_saying_why(tmp_path):
    """v0.2 prints no bus id: a 4-GPU scan --json topology for its 8 devices' output is another
    machine; its first 2 devices alone (written) cannot be placed: refused in one line."""
    _, t = _a6000(tmp_path, A6000_BUSES)
    r = gputopo_here("import", "nvbandwidth", RTX4090, "--topo", _stelline_scan_json(tmp_path),
                     "--out", tmp_path / "run")
    assert r.returncode == 2 and "it describes another machine" in r.stderr
    p, _ = _a6000(tmp_path, [None] * 6)
    scan = json.loads(_stelline_scan_json(tmp_path).read_text())
    assert len(scan["gpus"]) == 4
    eight = tmp_path / "eight.json"
    topo = load_topo_file(str(SEED_TOPO))
    from dataclasses import replace as dc_replace
    eight.write_text(json.dumps(topology_to_json(dc_replace(topo, gpus=[dc_replace(g, pci_bus_id=f"00000000:{k + 1:02X}:00.0")
                                                         for k, g in enumerate(topo.gpus)]))))
    r = gputopo_here("import", "nvbandwidth", p, "--topo", eight, "--out", tmp_path / "run")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "has 8 GPU(s), but the nvbandwidth output lists 6" in r.stderr
    assert "the output names no bus id" in r.stderr and "nvbandwidth v0.6+" in r.stderr


def test_subset_with_a_bus_id_not_in_the_topology_is_refused(tmp_path):
    p = _stelline_subset(tmp_path, [3, 1])
    p.write_text(p.read_text().replace("pciBusID: e1,", "pciBusID: e2,"))
    r = gputopo_here("import", "p2pbw", p, "--topo", _stelline_scan_json(tmp_path), "--out", tmp_path / "run")
    assert r.returncode == 2 and "the topology has no GPU at 00000000:E2:00" in r.stderr
