"""`gputopo gate --allocated` on the cuda fabric, as a Slurm prolog on a GPU node runs it, with
the node's NVML and the copies stood in (no GPU here): the device numbers Slurm gives are mapped
through the minor numbers, the workers are started with the GPUs' UUIDs in
CUDA_VISIBLE_DEVICES (never the device numbers, which CUDA would read as its own indices), and
the copies they return are judged against the NVLink rate. The copies themselves are
bench/gate_copies.py's (tests/cli/test_cli_gate.py runs them on the sim fabric)."""

import json
import os

from gputopo.bench.gate_copies import GateMeasured
from gputopo.model import Measurement
from gputopo.sim.scan import scan_simulated
from helpers.cli import gputopo_here


def test_a_prolog_starts_the_workers_with_uuids(monkeypatch, tmp_path):
    import gputopo.bench.gate_copies as gate_copies
    import gputopo.cli.gate as cli_gate
    import gputopo.fleet.allocation as allocation
    import gputopo.probe.scan as probe_scan

    topo = scan_simulated("dgx-h100")
    topo.simulated = False  # as a real node's scan: the cuda fabric takes it
    monkeypatch.setattr(probe_scan, "scan_real", lambda **kw: topo)
    # /dev/nvidia<7-k> is NVML GPU k on this node: device numbers are not indices
    monkeypatch.setattr(allocation, "minor_numbers", lambda sim=None: {k: 7 - k for k in range(8)})
    monkeypatch.setattr(cli_gate, "_start_forkserver", lambda gpus_text: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # as Slurm sets it in the prolog: device numbers
    seen = {}

    def fake_run(topology, steps, fabric, run_dir, description=None, deadline=None, timeout_s=10.0, argv=None):
        seen["cvd"], seen["fabric"] = os.environ["CUDA_VISIBLE_DEVICES"], fabric.name
        seen["steps"] = [s.id for s in steps]
        ms = [Measurement("p2p.copy", s.gpus, c.size_bytes, [c.size_bytes / 300e9], "cuda-events", "cuda", "gpus",
                          s.link_class, c.direction) for s in steps for c in s.cases]
        return GateMeasured(measurements=ms)

    monkeypatch.setattr(gate_copies, "run_gate_steps", fake_run)
    r = gputopo_here("gate", "--allocated", "--as", "slurm-prolog", "--state-dir", tmp_path,
                     env={"SLURM_JOB_GPUS": "0,1", "NVIDIA_VISIBLE_DEVICES": None})
    assert r.returncode == 0, (r.stdout, r.stderr)
    # device numbers 0 and 1 are NVML GPUs 7 and 6; the workers see them by UUID, in that order
    assert seen == {"cvd": f"{topo.gpu(6).uuid},{topo.gpu(7).uuid}", "fabric": "cuda", "steps": ["p2p:6-7"]}
    assert r.stdout.startswith("gputopo gate: pass: 2 GPU(s) ok, 1 pair(s) verified; GPUs 6,7 (SLURM_JOB_GPUS=0,1)")
    kept = json.loads((tmp_path / "gate-last.json").read_text())
    assert kept["plan"]["costs"]["measured"] is False and "unmeasured" in " ".join(kept["notes"])
    assert kept["fabric"] == "cuda" and not kept["simulated"]
