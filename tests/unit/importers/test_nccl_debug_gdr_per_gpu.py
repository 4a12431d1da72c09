"""Issue 47 item 4: NCCL's per-GPU GPUDirect RDMA lines (``GPU Direct RDMA Disabled for GPU <g> /
HCA <n> (distance D > L)``), the path numbers read with the path table of the NCCL version the
log states (model/nccl_paths.py, read from NVIDIA/nccl's src/graph/topo.h at each tag), else said
as printed. Posted: NVIDIA/DeepLearningExamples issue 383 (NCCL_NET_GDR_LEVEL=PHB, no version line
in the excerpt). The version lines and the newer forms below are written variants."""

from __future__ import annotations

from gputopo.importers.nccl_debug import debug_document
from gputopo.importers.run import run_import
from gputopo.model.nccl_paths import path_name, path_said
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report.nccl_debug_findings import nccl_debug_findings
from helpers.paths import FIXTURES

DLE = FIXTURES / "nccl-debug" / "dle-383_bert-tf-multinode_gdr-level-phb_per-gpu-gdr-distance-5-gt-4_no-version_excerpt.log"


def _doc(text):
    return debug_document(parse_nccl_debug(text), ["w.log"], None)


def _gdr(doc):
    return [f for f in nccl_debug_findings(doc) if f.kind == "nccl-gdr-off"]


def test_the_path_numbers_changed_meaning_across_nccl_versions():
    # the same number, three meanings (src/graph/topo.h PATH_* at v2.7.8-1, v2.11.4-1, v2.21.5-1, v2.26.2-1)
    assert [path_name([v], 5) for v in ("2.7.8", "2.11.4", "2.21.5", "2.26.2", "2.28.3")] == \
        ["SYS", "PHB", "PXN", "PXB", "PXB"]
    assert path_name(["2.4.8"], 3) == "NODE" and path_name(["2.4.2"], 3) == "SOC"
    assert path_name(["2.27.3"], 6) == "PXN" and path_name(["2.27.5"], 6) == "P2C"  # swapped in 2.27.5
    assert path_name([], 5) is None and path_name(["2.7.8", "2.21.5"], 5) is None  # no single table
    assert path_name(["2.21.5", "2.21.5+cuda12.4"], 7) == "SYS"
    assert path_said([], 7) == "7 (as printed)"


def test_posted_per_gpu_lines_without_a_version_are_said_as_printed_and_info():
    doc = run_import("nccl-debug", [DLE]).imported.imports[0]
    recs = doc["network"]["gdr_gpus"]
    off = [r for r in recs if not r["gdr"]]
    # "3b000" can only be a bus id (hex letters); "18000" could be a rank of NCCL 2.24+: said as printed
    assert sorted((r["label"], r.get("bus_id"), r["distance"], r["level"], r["path"]) for r in off) == [
        ("0000:3b:00.0", "0000:3b:00.0", 5, 4, None), ("GPU 18000", None, 5, 4, None)]
    found = _gdr(doc)
    assert [f.severity for f in found] == ["info"]  # a design fact: no traffic line shows it was used
    assert "5 (as printed) > level 4 (as printed)" in found[0].message
    assert "states no NCCL version" in found[0].message and "2 other combination(s) Enabled" in found[0].message


def test_with_the_version_line_the_numbers_are_named_by_that_versions_table():
    text = "NCCL version 2.7.8+cuda11.0\n" + DLE.read_text()  # written: the posted lines under a 2.7.8 version line
    found = _gdr(_doc(text))
    assert "0000:18:00.0 / HCA 0: path SYS (5 in NCCL 2.7.8's path table" in found[0].message
    assert "level PHB (4 in NCCL 2.7.8's path table" in found[0].message  # = the NCCL_NET_GDR_LEVEL=PHB the log set


# Written: a 2-host job on NCCL 2.21.5 whose GPU 0 went to the NIC without /GDRDMA; NCCL's own
# per-GPU line (2.21's "HCA <netId hex>") says why.
NET_221 = """NCCL version 2.21.5+cuda12.4
a:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>
a:1:1 [0] NCCL INFO Using network IB
a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId ca000 commId 0x5 - Init START
b:2:2 [0] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 0 nvmlDev 0 busId ca000 commId 0x5 - Init START
a:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU ca000 / HCA 1 (distance 7 > 4)
a:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/1
"""


def test_a_connection_without_gdrdma_takes_nccls_per_gpu_line_as_its_cause():
    found = _gdr(_doc(NET_221))
    assert [f.severity for f in found] == ["warning"]  # traffic was staged: a connection line shows it
    cause = found[0].cause or ""
    assert "Disabled for 0000:ca:00.0 / HCA 1 'mlx5_1' (distance 7 > 4)" in cause
    assert "SYS (7 in NCCL 2.21.5's path table" in cause and "PXB (4 in NCCL 2.21.5's path table" in cause
    assert "peermem" not in cause


def test_newer_forms_name_the_gpu_by_rank_and_the_hca_by_its_id():
    # written: NCCL 2.24-2.28 print the rank and the NET id in hex; 2.29 a GPU/NET id pair
    doc = _doc("NCCL version 2.26.2+cuda12.8\n"
               "a:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 3 / HCA 1 (distance 8 > 5)\n")
    r = doc["network"]["gdr_gpus"][0]
    assert (r["rank"], r["hca_index"], r["path"], r["level_path"]) == (3, 1, "SYS", "PXB")
    doc = _doc("NCCL version 2.29.2+cuda13.0\n"
               "a:1:1 [0] NCCL INFO GPU Direct RDMA Disabled for GPU/0-110592 (rank 2) - NET/0-1 (distance 9 > 5)\n")
    r = doc["network"]["gdr_gpus"][0]
    assert (r["rank"], r["bus_id"], r["hca_index"], r["path"], r["level_path"]) == (2, "0000:1b:00.0", 1, "SYS", "PXB")


def test_nccl_24s_form_and_the_no_module_form_are_read():
    doc = _doc("NCCL version 2.4.7+cuda10.0\n"
               "a:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 0[0] / HCA 0 (distance 3 >= 2)\n"
               "a:1:1 [1] NCCL INFO NET/IB : GPU Direct RDMA Disabled for GPU 1[1] / HCA 0 'mlx5_0' (no module or not "
               "supported by GPU)\n")
    recs = {r["gpu"]: r for r in doc["network"]["gdr_gpus"]}
    assert (recs["0[0]"]["path"], recs["0[0]"]["level_path"], recs["0[0]"]["nvml_dev"]) == ("SOC", "PHB", 0)
    assert recs["1[1]"]["why"] == "no module or not supported by GPU"
