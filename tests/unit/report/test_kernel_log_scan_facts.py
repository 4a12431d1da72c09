"""A folder whose topology came from a scan (a bench run) holds the scan's kernel log facts
(host.kernel_log_facts): `report` says their notes and findings as `scan` did; an imported log's
kernel_log.json is read instead where there is one, and never twice."""

from __future__ import annotations

from types import SimpleNamespace

from gputopo.model import topology_from_json, topology_to_json
from gputopo.probe.xid_lines import kernel_log_document, read_kernel_log_lines
from gputopo.report.health_checks import health_findings
from gputopo.report.kernel_log_findings import kernel_log_findings, kernel_log_notes
from gputopo.sim.scan import scan_simulated

LOG = ["[ 1.0] NVRM: A GPU crash dump has been created. If possible, please run",
       "[ 1.0] NVRM: nvidia-bug-report.sh as root to collect this data before",
       "[ 2.0] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)"]


def test_a_scans_kernel_log_facts_survive_its_json_and_are_judged_once():
    read = read_kernel_log_lines(LOG)
    topo = scan_simulated("pcie-4gpu", saved_kernel_log=(read, "saved kernel log kern.log"))
    topo = topology_from_json(topology_to_json(topo))  # as a run folder's topology.json holds it
    assert topo.host.kernel_log_facts == kernel_log_document(read, "kern.log")
    assert [f.kind for f in health_findings(topo) if f.kind == "gpudirect-rdma"] == ["gpudirect-rdma"]
    bench = SimpleNamespace(kernel_log=None, topology=topo)
    assert kernel_log_findings(bench) == []  # the topology's rules (health_findings) say them, once
    notes = kernel_log_notes(bench)
    assert len(notes) == 1 and "wrote a GPU crash dump" in notes[0]
