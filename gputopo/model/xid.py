"""What NVIDIA Xid codes mean, for the ones that say something about the GPU or its links.

Sources: NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
Ampere and later; "Xid and SXid errors" for older GPUs) and the dynamic page retirement guide
(https://docs.nvidia.com/deploy/dynamic-page-retirement/, Xid 48/63/64). ``hardware`` Xids point
at the GPU, its memory or a link (they become findings); ``application`` ones are most often a
program's fault (illegal address, killed channel) and are only listed. ``log_text`` is the words
the driver writes after the code, used by simulated kernel logs.

``actions`` are the catalog's two "Resolution Bucket" columns for the code, in its order:
Immediate Action, then Investigatory Action (``RESET_GPU``, ``INVESTIGATE_SW``, ...; CATALOG_ACTIONS
says each in words). They were read from NVIDIA's Xid catalog page named above (its table
columns "Resolution Bucket (Immediate Action)" and "Resolution Bucket (Investigatory Action)");
a code whose row was not checked has none, and its findings keep gputopo's generic remedies.
NVIDIA's catalog never says "replace the GPU" for one Xid: CONTACT_SUPPORT is where a
replacement is decided, by NVIDIA or the system's vendor.
"""

from __future__ import annotations

import re
from typing import Dict, NamedTuple, Optional, Tuple


class XidInfo(NamedTuple):
    meaning: str
    hardware: bool  # points at the GPU / its memory / a link rather than at an application
    severity: str  # finding severity when it is seen: "error" | "warning" | "info"
    log_text: str
    #: NVIDIA's Xid catalog's resolution buckets: (immediate, investigatory); () when not checked.
    actions: Tuple[str, ...] = ()


#: What each resolution bucket of NVIDIA's Xid catalog asks for, in words an operator acts on.
#: "IGNORE" asks for nothing and is left out of a finding's remedies.
CATALOG_ACTIONS: Dict[str, str] = {
    "RESTART_APP": "restart the application that was running (NVIDIA's Xid catalog: RESTART_APP)",
    "RESET_GPU": "drain the GPU and reset it (`nvidia-smi -r -i BUS_ID`) or reboot the node (NVIDIA's Xid "
                 "catalog: RESET_GPU)",
    "RESTART_BM": "reboot the node: the driver cannot bring the GPU back without it (NVIDIA's Xid catalog: "
                  "RESTART_BM)",
    "CONTACT_SUPPORT": "if it comes back, send `nvidia-bug-report.sh` output to NVIDIA or the system's vendor: "
                       "they decide whether the GPU is replaced (NVIDIA's Xid catalog: CONTACT_SUPPORT)",
    "INVESTIGATE_SW": "investigate the software: update the NVIDIA driver and GPU firmware, and send "
                      "`nvidia-bug-report.sh` output to NVIDIA if it comes back (NVIDIA's Xid catalog: "
                      "INVESTIGATE_SW)",
    "CHECK_APP/CUDA": "check the application and its CUDA version (`compute-sanitizer` finds bad accesses) "
                      "(NVIDIA's Xid catalog: CHECK_APP/CUDA)",
    "WORKFLOW_XID_13": "if it comes back with one application, debug it (`compute-sanitizer`); with several, "
                       "run `dcgmi diag -r 3` (NVIDIA's Xid catalog: WORKFLOW_XID_13)",
    "WORKFLOW_XID_31": "if it comes back with one application, debug its memory accesses "
                       "(`compute-sanitizer`); with several, run `dcgmi diag -r 3` (NVIDIA's Xid catalog: "
                       "WORKFLOW_XID_31)",
    "WORKFLOW_XID_48": "check `nvidia-smi -q -d ECC,ROW_REMAPPER` (a row remap or page retirement pending or "
                       "failed), then reset the GPU or reboot the node (NVIDIA's Xid catalog: WORKFLOW_XID_48)",
    "WORKFLOW_NVLINK_ERR": "reset the GPU or reboot the node to clear the NVLink error; check its links "
                           "(`nvidia-smi nvlink -s`, `-e`) (NVIDIA's Xid catalog: WORKFLOW_NVLINK_ERR)",
    "WORKFLOW_NVLINK5_ERR": "read the Xid line's unit, Fatal/Nonfatal and status: a Fatal one needs the GPU "
                            "reset; check the links (`nvidia-smi nvlink -s`, `-e`) (NVIDIA's Xid catalog: "
                            "WORKFLOW_NVLINK5_ERR)",
}

#: Xid 154's recovery actions (NVIDIA's Xid catalog): what each asks for, and whether the GPU can
#: be used before it is done. "None" means no recovery is pending (any more).
RECOVERY_ACTIONS: Dict[str, Tuple[str, bool]] = {
    "None": ("nothing: no recovery is pending", True),
    "Drain P2P": ("stop peer-to-peer work on the GPU (NVIDIA's Xid catalog: Xid 154 'Drain P2P')", True),
    "Drain and Reset": ("let the running work finish, schedule no new work, then reset the GPU "
                        "(`nvidia-smi -r -i BUS_ID`) (NVIDIA's Xid catalog: Xid 154 'Drain and Reset')", True),
    "GPU Reset Required": ("reset the GPU (`nvidia-smi -r -i BUS_ID`) or reboot the node before any further "
                           "use (NVIDIA's Xid catalog: Xid 154 'GPU Reset Required')", False),
    "Node Reboot Required": ("reboot the node before any further use of the GPU (NVIDIA's Xid catalog: "
                             "Xid 154 'Node Reboot Required')", False),
}
_RECOVERY_RE = re.compile(r"recovery action changed from .*? to (?:0x[0-9a-fA-F]+ )?\((?P<action>[^)]+)\)")


def recovery_action(text: str) -> Optional[str]:
    """The recovery action an Xid 154 line changes to ("GPU Reset Required"), as the driver wrote
    it ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"); None when the
    text does not say."""
    m = _RECOVERY_RE.search(text)
    return m.group("action").strip() if m else None


XIDS: Dict[int, XidInfo] = {
    13: XidInfo("graphics engine exception (usually an application fault, e.g. out-of-range access)",
                False, "info", "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
                actions=('RESTART_APP', 'WORKFLOW_XID_13')),
    31: XidInfo("GPU memory page fault (usually an application's illegal memory access)", False, "info",
                "pid=4242, name=python, Ch 00000008, intr 10000000. MMU Fault",
                actions=('RESTART_APP', 'WORKFLOW_XID_31')),
    32: XidInfo("invalid or corrupted push buffer stream (a PBDMA error: usually the program or the driver)",
                False, "info", "Channel ID 00000000 intr 00004000",
                actions=('RESTART_APP', 'CHECK_APP/CUDA')),
    43: XidInfo("GPU stopped processing a channel after an application error", False, "info",
                "pid=4242, name=python, Ch 00000008",
                actions=('IGNORE', 'CONTACT_SUPPORT')),
    45: XidInfo("preemptive cleanup of a channel when a process ended (usually benign)", False, "info",
                "pid=4242, name=python, Ch 00000008"),
    48: XidInfo("double-bit (uncorrectable) ECC error in GPU memory", True, "error",
                "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
                actions=('WORKFLOW_XID_48', 'WORKFLOW_XID_48')),
    61: XidInfo("internal micro-controller breakpoint/warning (GPU firmware fault)", True, "warning",
                "Internal micro-controller breakpoint/warning"),
    62: XidInfo("internal micro-controller halt (GPU firmware stopped)", True, "error",
                "Internal micro-controller halt",
                actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    63: XidInfo("ECC page retirement or row remapping recorded: reset the GPU to apply it", True, "warning",
                "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
                actions=('IGNORE', 'IGNORE')),
    64: XidInfo("ECC page retirement or row remapping FAILED: the memory cannot be repaired", True, "error",
                "pid=1896, Row Remapper: Failed to remap a row, reset gpu and run a field diagnostic",
                actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    74: XidInfo("NVLink error (a link or NVSwitch fault; peer traffic over it may fail)", True, "error",
                "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
                actions=('WORKFLOW_NVLINK_ERR', 'CONTACT_SUPPORT')),
    79: XidInfo("GPU has fallen off the bus (PCIe link lost: power, riser, slot or a dead GPU)", True, "error",
                "GPU has fallen off the bus.",
                actions=('RESTART_BM', 'CONTACT_SUPPORT')),
    92: XidInfo("high single-bit ECC error rate (corrected, but a predictor of failure)", True, "warning",
                "pid='<unknown>', name=<unknown>, High single-bit ECC error rate",
                actions=('IGNORE', 'CONTACT_SUPPORT')),
    94: XidInfo("contained uncorrectable ECC error (the application touching it was stopped)", True, "error",
                "pid=4242, name=python, Contained: SM (0x1). RST: No, D-RST: No",
                actions=('RESTART_APP', 'IGNORE')),
    95: XidInfo("uncontained uncorrectable ECC error: every application on the GPU is affected", True, "error",
                "pid=4242, name=python, Uncontained: FBHUB. RST: Yes, D-RST: No",
                actions=('RESET_GPU', 'IGNORE')),
    119: XidInfo("GSP firmware RPC timeout (the GPU's system processor stopped answering)", True, "error",
                 "Timeout after 6s of waiting for RPC response from GPU0 GSP!",
                 actions=('RESET_GPU', 'INVESTIGATE_SW')),
    120: XidInfo("GSP firmware error", True, "error", "GSP task exception",
                 actions=('RESET_GPU', 'INVESTIGATE_SW')),
    # Blackwell-era NVLink errors (NVIDIA Xid catalog 144-150): the text says Fatal or Nonfatal.
    144: XidInfo("NVLink error (SAW/MVB unit)", True, "warning", "SAW_MVB Nonfatal XC0 i0 Link 00",
                 actions=('WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR')),
    145: XidInfo("NVLink error (RLW unit)", True, "warning", "RLW_RXPIPE Nonfatal XC0 i0 Link 13",
                 actions=('WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR')),
    146: XidInfo("NVLink error (TLW unit)", True, "warning", "TLW Nonfatal XC0 i0 Link 00",
                 actions=('WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR')),
    147: XidInfo("NVLink error (TREX unit)", True, "warning", "TREX Nonfatal XC0 i0 Link 00",
                 actions=('WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR')),
    148: XidInfo("NVLink error (NVLPW control)", True, "warning", "NVLPW_CTRL Nonfatal XC0 i0 Link 00",
                 actions=('WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR')),
    149: XidInfo("NVLink error (NETIR: a link or the fabric beyond it)", True, "warning",
                 "NETIR_LINK_EVT Fatal XC0 i0 Link 00",
                 actions=('WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR')),
    150: XidInfo("NVLink error (MSE unit)", True, "warning", "MSE Nonfatal XC0 i0 Link 00",
                 actions=('WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR')),
    # Its severity and remedy come from the action it names (RECOVERY_ACTIONS); "warning" is for a
    # line that names none.
    154: XidInfo("the driver changed the GPU's recovery action (e.g. to 'GPU Reset Required')", True, "warning",
                 "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
                 actions=('XID_154',)),
}


def xid_info(code: int) -> XidInfo:
    """The entry for an Xid code; unknown codes are listed as such (informational)."""
    return XIDS.get(code, XidInfo(f"Xid {code} (not in gputopo's table: see NVIDIA's Xid catalog)",
                                  False, "info", "see NVIDIA's Xid catalog"))
