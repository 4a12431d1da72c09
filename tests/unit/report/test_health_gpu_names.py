"""How health findings name a GPU (report/health_checks.py gpu_who) and where the tables put it
(report/outputs/cell_text.py): the NVML index with the bus id for a machine's own numbering, the
bus id alone (and the host) for a GPU a kernel log numbers. Topologies here are written for the
test, not posted."""

from __future__ import annotations

from gputopo.model import Gpu, HostInfo, Topology
from gputopo.model.finding import Finding
from gputopo.model.health import KERNEL_LOG_NUMBERED, GpuHealth, XidEvent
from gputopo.report.health_checks import gpu_who, health_findings
from gputopo.report.outputs.cell_text import group_where, place_words
from gputopo.report.why.explain import explanations


def _topo(source: str, host="node4", bus="00000000:A1:00.0") -> Topology:
    health = GpuHealth(xid_events=[XidEvent(79, "GPU has fallen off the bus.")])
    return Topology(gpus=[Gpu(nvml_index=0, pci_bus_id=bus, health=health)], pairs=[],
                    host=HostInfo(hostname=host), source=source)


def test_nvml_numbering_keeps_the_index_and_says_the_bus_id():
    who = gpu_who(_topo("nvml"), _topo("nvml").gpus[0])
    assert who.text == "GPU 0 (0000:a1:00.0)" and who.evidence == {"bus_id": "0000:a1:00.0"}
    assert who.smi_id == "00000000:A1:00.0"
    (f,) = health_findings(_topo("nvml"))
    assert f.message.startswith("GPU 0 (0000:a1:00.0): Xid 79") and group_where([f]) == "0"


def test_a_kernel_logs_numbering_is_not_said():
    topo = _topo(KERNEL_LOG_NUMBERED)
    (f,) = health_findings(topo)
    assert f.message.startswith("GPU at 0000:a1:00.0 on node4: Xid 79")
    assert f.gpus == [0] and f.evidence["bus_id"] == "0000:a1:00.0" and f.evidence["host"] == "node4"
    assert group_where([f]) == "0000:a1:00.0 on node4" and place_words(f) == "GPU at 0000:a1:00.0 on node4"
    assert explanations([f])[0].where == "GPU at 0000:a1:00.0 on node4"
    (g,) = health_findings(_topo(KERNEL_LOG_NUMBERED, host=None))
    assert g.message.startswith("GPU at 0000:a1:00.0: Xid 79") and "host" not in g.evidence


def test_a_gpu_without_a_bus_id_keeps_its_number():
    topo = _topo(KERNEL_LOG_NUMBERED, bus=None)
    topo.gpus[0].pci_bus_id = "n/a"
    (f,) = health_findings(topo)
    assert f.message.startswith("GPU 0: Xid 79") and "place" not in f.evidence and group_where([f]) == "0"


def test_places_of_other_findings_are_unchanged():
    pair = Finding("slow", "warning", "GPUs 0,1 (SYS): slow", gpus=[0, 1], link_class="SYS")
    assert group_where([pair]) == "0,1" and place_words(pair) == "GPUs 0,1"
    assert place_words(Finding("xid", "error", "x", gpus=[2])) == "GPU 2"
