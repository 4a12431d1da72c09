"""Issue 47 item 5: on AWS EFA (the aws-ofi-nccl plugin, NET/AWS Libfabric, rdmap* devices, its
"Running on <type> platform" line) no GPUDirect RDMA is judged by what the instance type offers
(model/efa_platforms.py, aws-ofi-nccl's platform table): info on a type without it, "depends on
the instance type, not known from this log" where the log shows none, never a driver-module
remedy. Posted: NVIDIA/nccl issue 229 (2 EFA hosts, NCCL 2.4 ring lines, no instance type),
and the p4d.24xlarge EKS log that used /GDRDMA; the instance-type lines below are written."""

from __future__ import annotations

from gputopo.importers.nccl_debug import debug_document
from gputopo.importers.run import run_import
from gputopo.model.efa_platforms import instance_type, offers_gdr
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report.nccl_debug_findings import nccl_debug_findings, verdict
from helpers.paths import FIXTURES

N229 = FIXTURES / "nccl-debug" / "nccl-229_aws-efa-2node_aws-libfabric-ring-no-gdrdma_no-instance-type_excerpt.log"
P4D = FIXTURES / "nccl-debug" / "training-on-eks_p4d-24xlarge-1pod-4proc.log"


def _gdr(doc):
    return [f for f in nccl_debug_findings(doc) if f.kind == "nccl-gdr-off"]


def _all_text(f):
    return " ".join([f.message, f.cause or "", *f.remedies])


def test_the_instance_table_follows_aws_ofi_nccl():
    assert [offers_gdr(t) for t in ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
                                    "p6-b200.48xlarge")] == [True] * 6
    assert [offers_gdr(t) for t in ("g5.48xlarge", "p3dn.24xlarge", "p5.4xlarge")] == [False] * 3
    assert offers_gdr("g6e.48xlarge") is None and offers_gdr("P4d") is None  # not in the table / no instance type
    assert instance_type("ml.p4d.24xlarge") == "p4d.24xlarge"


def test_posted_efa_log_without_an_instance_type_says_it_depends_on_the_type():
    found = _gdr(run_import("nccl-debug", [N229]).imported.imports[0])
    assert [f.severity for f in found] == ["warning", "warning"]
    for f in found:
        assert "depends on the instance type, not known from this log" in (f.cause or "")
        assert "peermem" not in _all_text(f) and "nv_peer" not in _all_text(f)


TEMPLATE = """{host}:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.7.4-aws
{host}:1:1 [0] NCCL INFO NET/OFI Running on {itype} platform, Setting NCCL_TOPO_FILE environment variable to x.xml
{host}:1:1 [0] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
{host}:1:1 [0] NCCL INFO Using network AWS Libfabric
{host}:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 10000 commId 0x5 - Init START
{host}:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/AWS Libfabric/0
"""


def _doc(itype):
    return debug_document(parse_nccl_debug(TEMPLATE.format(host="a", itype=itype)), ["w.log"], None)


def test_an_instance_type_without_gdr_is_info_not_a_fault():
    doc = _doc("g5.48xlarge")
    found = _gdr(doc)
    assert [f.severity for f in found] == ["info"] and "g5.48xlarge" in (found[0].cause or "")
    assert "not a fault" in (found[0].cause or "") and "peermem" not in _all_text(found[0])
    assert verdict(doc, nccl_debug_findings(doc)) == "ok"


def test_an_instance_type_with_gdr_that_went_without_it_stays_a_warning():
    found = _gdr(_doc("p4d.24xlarge"))
    assert [f.severity for f in found] == ["warning"] and "offers GPUDirect RDMA" in (found[0].cause or "")
    assert "peermem" not in _all_text(found[0])


def test_the_posted_p4d_job_that_used_gdrdma_raises_nothing():
    doc = run_import("nccl-debug", [P4D]).imported.imports[0]
    assert _gdr(doc) == []
    efa = doc["network"]["hosts"]["llama-3-8b-node-0-0"]["efa"]
    assert efa["instance_type"] == "p4d.24xlarge" and "rdmap16s27" in efa["devices"]
