"""What NVSwitch SXid codes mean: NVIDIA's Fabric Manager user guide, appendix "NVSwitch SXid
Errors" (https://docs.nvidia.com/datacenter/tesla/pdf/fabric-manager-user-guide.pdf, DU-09883-001
v1.3), as leptonai/gpud's table (pkg/nvidia-query/sxid/sxid.go) quotes its four tables:
"Non-Fatal NVSwitch SXid Errors", "Fatal NVSwitch SXid Errors", "Always Fatal NVSwitch SXid
Errors" and "Other Notable NVSwitch SXid Errors".

An SXid is judged by its meaning here, not by the Fatal / Non-fatal word of its line alone:

- ``stalls``: a non-fatal SXid whose meaning is a fault of the fabric's configuration that stalls
  NVLink traffic (the guide: "Corresponding GPU NVLink traffic will be stalled, and the subsequent
  GPU access will hang. The GPU driver ... will abort CUDA jobs with Xid 45"): 11004 (ingress
  invalid ACL: "an incorrect FM partition configuration"), 12028 (egress non-posted PRIV error);
- ``corrected``: single-bit ECC errors the NVSwitch corrected ("No ... impact because the NVSwitch
  hardware will auto correct the ECC errors");
- ``throughput``: NVLink throughput of the port may fall (20001 TX replay: "NVLink packet needs to
  be retransmitted"; 20009 RX short error rate; 10004 a thermal event: "might force the specified
  NVSwitch Links to enter power saving mode (Single Lane Mode)"; 10005 the thermal event's end);
- ``follows-fatal``: 19084 ("usually accompanied by a fatal SXid error");
- ``ignore``: 22013 ("This SXid can be safely ignored");
- ``connection``: 20012, 22012 ("a broken/inconsistent connection or uncoordinated shutdown");
- ``port-fatal``: fatal to the NVSwitch port's traffic ("Fatal NVSwitch SXid Errors": recovery
  restarts the VMs or partitions using the port; propagated to the GPU as Xid 74);
- ``always-fatal``: "Always fatal to the entire fabric/system": the host (or the NVSwitches and
  GPUs) must be reset.

A code not in this table is said as unknown.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional

GUIDE = "NVIDIA's Fabric Manager user guide, appendix 'NVSwitch SXid Errors'"


class SxidInfo(NamedTuple):
    name: str  # the guide's name for the code
    effect: str  # stalls | corrected | throughput | follows-fatal | ignore | connection | port-fatal | always-fatal


#: What each effect means, in an operator's words (after the guide).
EFFECTS: Dict[str, str] = {
    "stalls": "NVLink traffic through the switch port stalls and GPU accesses through it hang (CUDA jobs end with "
              "Xid 45): a fault of the fabric's configuration, not corrected by itself",
    "corrected": "a single-bit ECC error the NVSwitch corrected: no impact",
    "throughput": "the port's NVLink throughput may fall (packets retransmitted, or links in power-saving single-lane "
                  "mode after a thermal event)",
    "follows-fatal": "usually comes with a fatal SXid that stalls the GPUs' NVLink traffic",
    "ignore": "NVIDIA says it can be safely ignored",
    "connection": "an NVLink connection broken or inconsistent, or an uncoordinated shutdown",
    "port-fatal": "fatal to the NVSwitch port's traffic: the GPUs using it lose NVLink (Xid 74)",
    "always-fatal": "fatal to the whole NVLink fabric of the system",
}

_CORRECTED = (11012, 11021, 11022, 11023, 12021, 12023, 15008, 15011, 19049, 19055, 19057, 19059, 19062, 19065,
              19068, 19071, 24001, 24002, 24003)
_PORT_FATAL = {
    10001: "host priv error", 10002: "host priv timeout", 11001: "ingress invalid command",
    11009: "ingress invalid VCSet", 11013: "ingress header DBE", 11018: "ingress RID DBE", 11019: "ingress RLAN DBE",
    11020: "ingress control parity", 12001: "egress crossbar overflow", 12002: "egress packet route",
    12022: "egress input ECC DBE error", 12024: "egress output ECC DBE error", 12025: "egress credit overflow",
    12026: "egress destination request ID error", 12027: "egress destination response ID error",
    12030: "egress control parity error", 12031: "egress credit parity error", 12032: "egress flit type mismatch",
    14017: "TS ATO timeout", 15001: "route buffer over/underflow", 15006: "route transdone over/underflow",
    15009: "route GLT DBE", 15010: "route parity", 15012: "route incoming DBE", 15013: "route credit parity",
    19047: "NCISOC HDR ECC DBE error", 19048: "NCISOC DAT ECC DBE error", 19054: "HDR RAM ECC DBE error",
    19056: "DAT0 RAM ECC DBE error", 19058: "DAT1 RAM ECC DBE error", 19060: "CREQ RAM HDR ECC DBE error",
    19061: "CREQ RAM DAT ECC DBE error", 19063: "response RAM HDR ECC DBE error",
    19064: "response RAM DAT ECC DBE error", 19066: "COM RAM HDR ECC DBE error", 19067: "COM RAM DAT ECC DBE error",
    19069: "RSP1 RAM HDR ECC DBE error", 19070: "RSP1 RAM DAT ECC DBE error", 20034: "LTSSM fault up",
    24004: "sourcetrack TCEN0 crumbstore DBE", 24005: "sourcetrack TCEN0 TD crumbstore DBE",
    24006: "sourcetrack TCEN1 crumbstore DBE", 24007: "sourcetrack timeout error",
}
_ALWAYS_FATAL = {
    10003: "host unhandled interrupt", 12020: "egress sequence ID error", 22003: "Minion halt",
    22011: "Minion exterror", 23001: "ingress SRC-VC buffer overflow", 23002: "ingress SRC-VC buffer underflow",
    23003: "egress DST-VC credit overflow", 23004: "egress DST-VC credit underflow",
    23005: "ingress packet burst error", 23006: "ingress packet sticky error", 23007: "possible bubbles at ingress",
    23008: "ingress packet invalid dst error", 23009: "ingress packet parity error",
    23010: "ingress SRC-VC buffer overflow", 23011: "ingress SRC-VC buffer underflow",
    23012: "egress DST-VC credit overflow", 23013: "egress DST-VC credit underflow",
    23014: "ingress packet burst error", 23015: "ingress packet sticky error", 23016: "possible bubbles at ingress",
    23017: "ingress credit parity error",
}

SXIDS: Dict[int, SxidInfo] = {
    11004: SxidInfo("ingress invalid ACL", "stalls"),
    12028: SxidInfo("egress non-posted PRIV error", "stalls"),
    20001: SxidInfo("TX replay error", "throughput"),
    20009: SxidInfo("RX short error rate", "throughput"),
    10004: SxidInfo("host thermal event start", "throughput"),
    10005: SxidInfo("host thermal event end", "throughput"),
    19084: SxidInfo("AN1 heartbeat timeout error", "follows-fatal"),
    22013: SxidInfo("Minion link DLREQ interrupt", "ignore"),
    20012: SxidInfo("broken/inconsistent connection", "connection"),
    22012: SxidInfo("Minion link NA interrupt", "connection"),
    **{c: SxidInfo("single-bit ECC error", "corrected") for c in _CORRECTED},
    **{c: SxidInfo(n, "port-fatal") for c, n in _PORT_FATAL.items()},
    **{c: SxidInfo(n, "always-fatal") for c, n in _ALWAYS_FATAL.items()},
}


def sxid_info(code: int) -> Optional[SxidInfo]:
    """The guide's entry for an SXid code; None for a code not in its tables (said as unknown)."""
    return SXIDS.get(code)


def sxid_words(code: int) -> str:
    """"12028 (egress non-posted PRIV error: NVLink traffic ... stalls ...)", or the code said as
    unknown."""
    info = SXIDS.get(code)
    if info is None:
        return f"{code} (not in {GUIDE} as gputopo carries it: its meaning is unknown here)"
    return f"{code} ({info.name}: {EFFECTS[info.effect]})"
