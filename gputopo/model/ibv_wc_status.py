"""RDMA completion statuses (libibverbs ``enum ibv_wc_status``, verbs.h): the one table that
perftest's and NCCL's readers both judge a completion error by, and the three forms NCCL has printed
its completion error in (src/transport/net_ib.cc):

- NCCL <= 2.18: ``NET/IB : Got completion from peer A<p> with error 12, opcode 0, len 0, vendor err 129 (Send)``
- NCCL 2.19-2.27: ``... with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ... remoteGids ...``
- NCCL 2.28+: ``... with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) ... vendor_err=129 ...``
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

#: ibv_wc_status numbers -> (name, what it usually means)
WC_STATUS = {
    1: ("local length error", "a message longer than the receive buffer posted for it"),
    2: ("local QP operation error", "the local QP was in a wrong state or misconfigured"),
    4: ("local protection error", "the buffer's memory registration does not cover the access: with "
        "--use_cuda, GPU memory the NIC cannot reach (GPUDirect RDMA, dma-buf)"),
    5: ("work request flushed error", "an earlier error moved the QP to the error state; the first error "
        "is the cause"),
    8: ("local access error", "a protection error on a local buffer"),
    9: ("remote invalid request error", "the peer refused the request (opcode, size or state)"),
    10: ("remote access error", "the peer's memory key or access rights refused the RDMA read/write"),
    11: ("remote operation error", "the peer could not complete the operation"),
    12: ("transport retry counter exceeded", "no acknowledgement from the peer: the peer process gone, the "
         "path broken (port down, cable, switch), or on RoCE a lossy network without PFC/ECN or a GID index / "
         "traffic class the fabric drops"),
    13: ("RNR retry counter exceeded", "the receiver had no receive posted in time (send tests): the peer "
         "too slow or gone"),
    19: ("fatal error", "the adapter reported a fatal error: check dmesg for mlx5 errors"),
    20: ("response timeout error", "no response from the peer in time"),
}

#: ibv_wc_status numbers -> the enum's name (verbs.h), as NCCL >= 2.28 prints it
WC_NAMES = {0: "IBV_WC_SUCCESS", 1: "IBV_WC_LOC_LEN_ERR", 2: "IBV_WC_LOC_QP_OP_ERR", 3: "IBV_WC_LOC_EEC_OP_ERR",
            4: "IBV_WC_LOC_PROT_ERR", 5: "IBV_WC_WR_FLUSH_ERR", 6: "IBV_WC_MW_BIND_ERR", 7: "IBV_WC_BAD_RESP_ERR",
            8: "IBV_WC_LOC_ACCESS_ERR", 9: "IBV_WC_REM_INV_REQ_ERR", 10: "IBV_WC_REM_ACCESS_ERR",
            11: "IBV_WC_REM_OP_ERR", 12: "IBV_WC_RETRY_EXC_ERR", 13: "IBV_WC_RNR_RETRY_EXC_ERR",
            14: "IBV_WC_LOC_RDD_VIOL_ERR", 15: "IBV_WC_REM_INV_RD_REQ_ERR", 16: "IBV_WC_REM_ABORT_ERR",
            17: "IBV_WC_INV_EECN_ERR", 18: "IBV_WC_INV_EEC_STATE_ERR", 19: "IBV_WC_FATAL_ERR",
            20: "IBV_WC_RESP_TIMEOUT_ERR", 21: "IBV_WC_GENERAL_ERR"}

_OLD = re.compile(r"Got completion (?:from peer (?P<peer>\S+) )?with error (?P<st>\d+), opcode (?P<op>\d+), "
                  r"len (?P<len>-?\d+), vendor err (?P<ve>\d+)")
_MID = re.compile(r"Got completion (?:from peer (?P<peer>\S+) )?with status=(?P<st>\d+) opcode=(?P<op>\d+)"
                  r"(?: len=(?P<len>-?\d+))? vendor err (?P<ve>\d+)")
_NEW = re.compile(r"Got completion (?:from peer (?P<peer>\S+) )?with status=(?P<name>[A-Z_]+)\((?P<st>\d+)\) "
                  r"opcode=(?:(?P<opname>[A-Z_]+)\()?(?P<op>\d+)\)?.*?vendor_err=(?P<ve>\d+)")
_FORMS = ((_OLD, "NCCL <= 2.18"), (_MID, "NCCL 2.19-2.27"), (_NEW, "NCCL >= 2.28"))


def status_words(status: int) -> str:
    """``IBV_WC_RETRY_EXC_ERR (12, transport retry counter exceeded)``; an unknown number said as such."""
    name = WC_NAMES.get(status)
    words = WC_STATUS.get(status, (None, ""))[0]
    return f"{name or 'an ibv_wc_status not in verbs.h'} ({status}" + (f", {words})" if words else ")")


def completion_error(text: str) -> Optional[Dict[str, Any]]:
    """NCCL's ``Got completion ... `` WARN read in any of its three forms: {"status", "name",
    "meaning", "opcode", "vendor_err", "peer", "form"}; None for another line."""
    for rx, form in _FORMS:
        m = rx.search(text)
        if m is None:
            continue
        st = int(m.group("st"))
        return {"status": st, "name": WC_NAMES.get(st), "meaning": WC_STATUS.get(st, (None, None))[1],
                "opcode": int(m.group("op")), "vendor_err": int(m.group("ve")), "peer": m.group("peer"),
                "form": form}
    return None
