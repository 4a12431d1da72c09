"""More `nvidia-smi topo -m` text as people posted it (sources in tests/fixtures/README.md):

- an HGX H100 matrix (8 GPUs NV18, 10 NICs) whose paste ends inside a NIC row: it was refused
  ("the matrix is not square"); every GPU row is whole, so it is read, and what the cut leaves
  out (the classes between the NICs whose rows are missing) is said;
- a GH200 (one GPU, two NICs, GPU NUMA ID 1): nvidia-smi prints its GPU-NIC class as SYS, but a
  GPU whose memory is a NUMA node is attached to its CPU over NVLink-C2C, where NCCL's path is
  P2C, not SYS: the scan no longer says NCCL would not use GPUDirect RDMA there;
- a GB200 tray (4 GPUs NV18, legend cut), 8 V100 in a hybrid cube mesh (NV1 / NV2 / SYS), and
  2 RTX 3090 whose NUMA Affinity is empty with its N/A shifted by an extra tab: read as printed.
"""

from __future__ import annotations

import pytest

from gputopo.errors import InputFileError
from gputopo.model import LinkClass, NotAvailable
from gputopo.probe.smi import parse_topo_matrix, topology_from_smi_file_text
from gputopo.report.network_checks import gpu_network_paths, network_findings
from helpers.paths import FIXTURES

TOPO_DIR = FIXTURES / "topo"
HGX_CUT = "nccl-1264_hgx-h100_8gpu_nv18_10nics_tabs_cut-in-nic3-row_excerpt.txt"
GH200 = "nvbandwidth-23_gh200_1gpu_2nics_indented_gpu-numa-1_no-legend.txt"
GB200 = "k8s-test-infra-371_gb200_4gpu_nv18_legend-cut_excerpt.txt"
V100_CUBE = "nccl-tests-37_8xv100_hybrid-cube-nv1-nv2_sys_tabs.txt"
RTX3090_SYS = "club3090-178_2x3090_sys_numa-na-extra-tab_legend-cut_excerpt.txt"
#: The fixtures this file holds expectations for (test_probe_smi_posted.POSTED includes them).
NEW_POSTED = (HGX_CUT, GH200, GB200, V100_CUBE, RTX3090_SYS)


def fixture(name: str) -> str:
    return (TOPO_DIR / name).read_text()


def C(name: str) -> LinkClass:
    return LinkClass.parse(name)


def test_a_paste_cut_inside_a_nic_row_is_read_and_the_cut_said():
    m = parse_topo_matrix(fixture(HGX_CUT), source=HGX_CUT)
    assert m.gpu_count == 8 and all(c == C("NV18") for c in m.classes.values())
    assert len(m.nic_classes) == 8 * 10
    assert m.nic_classes[(3, "NIC5")] == C("PIX") and m.nic_classes[(7, "NIC9")] == C("PIX")
    assert m.nic_pair_classes[("NIC0", "NIC1")] == C("SYS") and ("NIC3", "NIC4") not in m.nic_pair_classes
    (note,) = m.notes
    assert "line 14: the text ends inside row NIC3" in note and "NIC9" in note


def test_a_cut_gpu_row_or_a_cut_nic_row_with_text_after_it_is_still_refused():
    text = fixture(HGX_CUT)
    cut_gpu = text[:text.index("\nGPU7\t") + 40]  # written: the paste ends inside GPU7's row
    with pytest.raises(InputFileError, match="row GPU7 has"):
        parse_topo_matrix(cut_gpu, source="written")
    with pytest.raises(InputFileError, match="row NIC3 has"):
        parse_topo_matrix(text + "\nNIC4\tSYS\n", source="written")  # written: a line after the short row


def test_a_gpu_whose_memory_is_a_numa_node_gets_no_nccl_path_from_smis_sys_class():
    topo = topology_from_smi_file_text(fixture(GH200), source=GH200)
    assert topo.gpus[0].gpu_memory_numa_node == 1
    (path,) = gpu_network_paths(topo)
    assert str(path.link_class) == "SYS" and path.nics == ["NIC0", "NIC1"]
    assert isinstance(path.nccl_path, NotAvailable) and "NUMA node 1" in path.nccl_path.reason
    assert not [f for f in network_findings(topo) if f.kind == "gpudirect-rdma"]


def test_a_gpu_with_numa_id_na_keeps_the_sys_rule():
    # written: the GH200 text with GPU NUMA ID N/A (a PCIe GPU): SYS is beyond the GDR level
    topo = topology_from_smi_file_text(fixture(GH200).replace("\t0\t\t1\n", "\t0\t\tN/A\n"), source="written")
    (path,) = gpu_network_paths(topo)
    assert path.nccl_path == "SYS" and path.gdr_by_distance is False


def test_gb200_v100_cube_and_shifted_numa_na_read_as_printed():
    gb = parse_topo_matrix(fixture(GB200), source=GB200)
    assert gb.gpu_count == 4 and set(gb.classes.values()) == {C("NV18")}
    assert gb.cpu_affinity == {0: "0-71", 1: "0-71", 2: "72-143", 3: "72-143"}
    assert gb.numa_affinity == {0: 0, 1: 0, 2: 1, 3: 1} and gb.gpu_numa_id == {0: None, 1: None, 2: None, 3: None}
    cube = parse_topo_matrix(fixture(V100_CUBE), source=V100_CUBE)
    assert cube.link_class(0, 1) == C("NV1") and cube.link_class(0, 3) == C("NV2")
    assert cube.link_class(0, 4) == C("SYS") and cube.link_class(6, 7) == C("NV1")
    assert sum(c.is_nvlink for c in cube.classes.values()) == 16
    rtx = parse_topo_matrix(fixture(RTX3090_SYS), source=RTX3090_SYS)
    assert rtx.link_class(0, 1) == C("SYS")
    assert rtx.cpu_affinity == {0: "0-7,16-23", 1: "8-15,24-31"}
    assert rtx.numa_affinity == {0: None, 1: 1} and rtx.gpu_numa_id == {0: None, 1: None}
