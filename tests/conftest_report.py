"""Synthetic run folders for the report/check/import tests (no bench, no sim needed).

`seed_topology(faulty=...)` is the docs/architecture.md story machine: 8 GPUs, NV4 pairs 0-1, 2-3, 4-5, 6-7,
NODE inside a socket (GPUs 0-3 | 4-7), SYS across; the faulty twin has the IOMMU translating and
ACS redirect above GPUs 4-7. `write_run(dir, topo, faults=...)` writes a run folder in the
docs/run-folder.md layout with modeled measurements; each fault name injects one symptom so every
finding kind can be produced and shown absent on the healthy twin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, List, Optional

from gputopo.bench.fabrics.fabric import fabric_named
from gputopo.model import (AcsBridge, Gpu, HostInfo, LinkClass, Measurement, NvLink, Pair,
                           PcieLink, Topology, topology_to_json)
from gputopo.runfolder.writer import append_jsonl, run_info, write_json

BUS = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0",
       "00000000:87:00.0", "00000000:90:00.0", "00000000:B7:00.0", "00000000:BD:00.0"]
NV_PAIRS = {(0, 1), (2, 3), (4, 5), (6, 7)}
#: Modeled GB/s per class (theoretical: NV4 v3 = 100, PCIe Gen4 x16 = 31.5).
CLASS_GBPS = {"NV4": 85.0, "NODE": 24.0, "SYS": 20.0}
STAGED_GBPS = 11.0
SIZES = [65536, 64 << 20]

ALL_FAULTS = ("corrupt-sys", "nan-dp", "diverged-dp", "slow-pair", "staged-faster", "hang", "crash",
              "nvlink-down", "pcie-width", "link-errors", "p2p-ns", "iommu", "acs")
#: Not in ALL_FAULTS (whose story the tests pin): corrupt-node, the seed story's NODE half.
MORE_FAULTS = ("corrupt-node",)


def _class(i, j):
    if (min(i, j), max(i, j)) in NV_PAIRS:
        return "NV4"
    return "NODE" if (i < 4) == (j < 4) else "SYS"


def seed_topology(faults: Iterable[str] = (), simulated: bool = True) -> Topology:
    faults = set(faults)
    gpus = []
    for i in range(8):
        peer = i ^ 1
        links = [NvLink(link=k, active=not ("nvlink-down" in faults and i == 2 and k == 3), version=3,
                        remote_bus_id=BUS[peer], remote_type="GPU",
                        errors={"replay": 0, "recovery": 0, "crc_flit": 7 if ("link-errors" in faults and i == 3) else 0,
                                "crc_data": 0})
                 for k in range(4)]
        width = 8 if ("pcie-width" in faults and i == 1) else 16
        gpus.append(Gpu(nvml_index=i, name="NVIDIA A100-SXM4-40GB", uuid=f"GPU-{i:08d}",
                        pci_bus_id=BUS[i], cuda_index=i, numa_node=0 if i < 4 else 1,
                        cpu_affinity="0-31" if i < 4 else "32-63",
                        pcie=PcieLink(gen_current=1, gen_max=4, width_current=width, width_max=16,
                                      replay_counter=0),
                        mig_mode="disabled", nvlinks=links))
    pairs = []
    for i in range(8):
        for j in range(i + 1, 8):
            lc = LinkClass.parse(_class(i, j))
            p2p = {c: "OK" for c in ("read", "write", "atomics", "pci")}
            p2p["nvlink"] = "OK" if lc.is_nvlink else "NS"
            if "p2p-ns" in faults and (i, j) == (0, 1):
                p2p["read"] = p2p["write"] = "NS"
            pairs.append(Pair(gpus=(i, j), link_class=lc, nvlink_count=lc.nvlinks, p2p=p2p))
    acs = [AcsBridge(bdf="0000:80:01.0", gpus=BUS[4:], controls={"ReqRedir": True, "CmpltRedir": True})] \
        if "acs" in faults else []
    host = HostInfo(hostname="seed", kernel="6.1", iommu_mode="translated" if "iommu" in faults else "passthrough",
                    iommu_evidence=["/sys/class/iommu/dmar0"], acs=acs, driver_version="550.54",
                    nvml_version="12.550", cuda_driver_version="12.4")
    name = "seed-8gpu" if faults else "seed-8gpu-healthy"
    return Topology(gpus=gpus, pairs=pairs, host=host, source=f"sim:{name}", simulated=simulated, machine=name)


def _m(test, gpus, size, gbps, direction=None, wrong=0, fabric="sim", timing="modeled", **extra):
    t = size / (gbps * 1e9)
    return Measurement(test=test, gpus=tuple(gpus), size_bytes=size, samples_s=[t * 0.99, t, t * 1.01],
                       timing=timing, fabric=fabric, figures_of=fabric_named(fabric).figures_of,
                       link_class=_class(*gpus[:2]) if len(gpus) >= 2 else None,
                       direction=direction, wrong=wrong, first_bad_index=(17 if wrong else None),
                       busbw_factor=1.0, extra={"count": size // 4, **extra})


def measurements(faults: Iterable[str] = (), pairs: Optional[List[tuple]] = None,
                 fabric: str = "sim") -> List[Measurement]:
    faults = set(faults)
    out = []
    pairs = pairs or [(i, j) for i in range(8) for j in range(i + 1, 8)]
    for i, j in pairs:
        lc = _class(i, j)
        gbps = CLASS_GBPS[lc]
        if "slow-pair" in faults and (i, j) == (0, 2):
            gbps *= 0.3
        staged = STAGED_GBPS
        if "staged-faster" in faults and (i, j) == (1, 3):
            gbps = STAGED_GBPS * 0.6
        corrupt = ("corrupt-sys" in faults and lc == "SYS") or ("corrupt-node" in faults and lc == "NODE")
        for size in SIZES:
            wrong = 1234 if (corrupt and size == SIZES[-1]) else 0
            out.append(_m("p2p.copy", (i, j), size, gbps, f"{i}->{j}", wrong=wrong, fabric=fabric, peer_access=True))
            out.append(_m("p2p.copy", (i, j), size, gbps * 1.02, f"{j}->{i}", wrong=wrong, fabric=fabric, peer_access=True))
            out.append(_m("p2p.staged", (i, j), size, staged, f"{i}->{j}", fabric=fabric, path="host"))
            out.append(_m("p2p.staged", (i, j), size, staged, f"{j}->{i}", fabric=fabric, path="host"))
        out.append(_m("dp.scatter", (i, j), SIZES[-1], gbps * 0.8, f"{i}->{j}", wrong=57 if corrupt else 0, fabric=fabric))
        cm = _m("collective.all_reduce", (i, j), SIZES[-1], gbps * 0.8, fabric=fabric)
        out.append(cm)
    return out


def numerics(faults: Iterable[str] = (), pairs=((5, 6), (6, 7))) -> List[dict]:
    faults = set(faults)
    recs = []
    for p in pairs:
        losses = [2.0 - 0.1 * k for k in range(10)]
        dp_verdict, step = "ok", None
        if "nan-dp" in faults and p == (5, 6):
            dp_verdict, step = "nan", 3
            losses_dp = losses[:3] + [float("nan")] * 7
        elif "diverged-dp" in faults and p == (6, 7):
            dp_verdict, step = "diverged", 5
            losses_dp = losses[:5] + [3.0 + k for k in range(5)]
        else:
            losses_dp = losses
        recs.append({"gpus": list(p), "way": "dp", "verdict": dp_verdict, "step": step,
                     "losses": [x if x == x else None for x in losses_dp], "lr": 0.1})
        recs.append({"gpus": list(p), "way": "ddp", "verdict": "ok", "step": None, "losses": losses, "lr": 0.1})
    recs.append({"gpus": [5], "way": "reference", "verdict": "ok", "step": None,
                 "losses": [2.0 - 0.1 * k for k in range(10)]})
    return recs


def write_run(run_dir, faults: Iterable[str] = (), topo: Optional[Topology] = None,
              meas: Optional[List[Measurement]] = None, nums: Optional[List[dict]] = None,
              fabric: str = "sim", truncate_last: bool = False) -> Path:
    """A complete run folder (without outputs) at ``run_dir``."""
    faults = set(faults)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    topo = topo or seed_topology(faults)
    write_json(run_dir / "run.json", run_info(fabric=fabric, simulated=topo.simulated, machine=topo.machine,
                                              argv=["bench", "--sim", topo.machine]))
    write_json(run_dir / "topology.json", {"schema_version": 1, **topology_to_json(topo)})
    for m in (meas if meas is not None else measurements(faults, fabric=fabric)):
        append_jsonl(run_dir / "measurements.jsonl", m.to_json())
    for rec in (nums if nums is not None else numerics(faults)):
        append_jsonl(run_dir / "numerics.jsonl", rec)
    if "hang" in faults:
        append_jsonl(run_dir / "events.jsonl", {
            "type": "finding", "kind": "hang", "severity": "error", "gpus": [2, 6], "link_class": None,
            "message": "GPUs 2,6: collective.all_reduce did not finish in 60 s", "evidence": {"timeout_s": 60},
            "cause": None, "remedies": []})
    if "crash" in faults:
        append_jsonl(run_dir / "events.jsonl", {
            "type": "finding", "kind": "crash", "severity": "error", "gpus": [3, 7], "link_class": "SYS",
            "message": "GPUs 3,7: worker died with SIGSEGV", "evidence": {"signal": 11},
            "cause": None, "remedies": []})
    append_jsonl(run_dir / "events.jsonl", {"type": "step-done", "step": "p2p"})
    if truncate_last:
        with open(run_dir / "measurements.jsonl", "a") as f:
            f.write('{"test": "p2p.copy", "gpus": [0, ')
    return run_dir


def read_json(path) -> dict:
    with open(path) as f:
        return json.load(f)
