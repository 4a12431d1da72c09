"""What NVIDIA Xid codes mean, for the ones that say something about the GPU or its links.

Sources: NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
Ampere and later; "Xid and SXid errors" for older GPUs) and the dynamic page retirement guide
(https://docs.nvidia.com/deploy/dynamic-page-retirement/, Xid 48/63/64). ``hardware`` Xids point
at the GPU, its memory or a link (they become findings); ``application`` ones are most often a
program's fault (illegal address, killed channel) and are only listed. ``log_text`` is the words
the driver writes after the code, used by simulated kernel logs.
"""

from __future__ import annotations

from typing import Dict, NamedTuple


class XidInfo(NamedTuple):
    meaning: str
    hardware: bool  # points at the GPU / its memory / a link rather than at an application
    severity: str  # finding severity when it is seen: "error" | "warning" | "info"
    log_text: str


XIDS: Dict[int, XidInfo] = {
    13: XidInfo("graphics engine exception (usually an application fault, e.g. out-of-range access)",
                False, "info", "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address"),
    31: XidInfo("GPU memory page fault (usually an application's illegal memory access)", False, "info",
                "pid=4242, name=python, Ch 00000008, intr 10000000. MMU Fault"),
    43: XidInfo("GPU stopped processing a channel after an application error", False, "info",
                "pid=4242, name=python, Ch 00000008"),
    45: XidInfo("preemptive cleanup of a channel when a process ended (usually benign)", False, "info",
                "pid=4242, name=python, Ch 00000008"),
    48: XidInfo("double-bit (uncorrectable) ECC error in GPU memory", True, "error",
                "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer"),
    61: XidInfo("internal micro-controller breakpoint/warning (GPU firmware fault)", True, "warning",
                "Internal micro-controller breakpoint/warning"),
    62: XidInfo("internal micro-controller halt (GPU firmware stopped)", True, "error",
                "Internal micro-controller halt"),
    63: XidInfo("ECC page retirement or row remapping recorded: reset the GPU to apply it", True, "warning",
                "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate."),
    64: XidInfo("ECC page retirement or row remapping FAILED: the memory cannot be repaired", True, "error",
                "pid=1896, Row Remapper: Failed to remap a row, reset gpu and run a field diagnostic"),
    74: XidInfo("NVLink error (a link or NVSwitch fault; peer traffic over it may fail)", True, "error",
                "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"),
    79: XidInfo("GPU has fallen off the bus (PCIe link lost: power, riser, slot or a dead GPU)", True, "error",
                "GPU has fallen off the bus."),
    92: XidInfo("high single-bit ECC error rate (corrected, but a predictor of failure)", True, "warning",
                "pid='<unknown>', name=<unknown>, High single-bit ECC error rate"),
    94: XidInfo("contained uncorrectable ECC error (the application touching it was stopped)", True, "error",
                "pid=4242, name=python, Contained: SM (0x1). RST: No, D-RST: No"),
    95: XidInfo("uncontained uncorrectable ECC error: every application on the GPU is affected", True, "error",
                "pid=4242, name=python, Uncontained: FBHUB. RST: Yes, D-RST: No"),
    119: XidInfo("GSP firmware RPC timeout (the GPU's system processor stopped answering)", True, "error",
                 "Timeout after 6s of waiting for RPC response from GPU0 GSP!"),
    120: XidInfo("GSP firmware error", True, "error", "GSP task exception"),
    # Blackwell-era NVLink errors (NVIDIA Xid catalog 144-150): the text says Fatal or Nonfatal.
    144: XidInfo("NVLink error (SAW/MVB unit)", True, "warning", "SAW_MVB Nonfatal XC0 i0 Link 00"),
    145: XidInfo("NVLink error (RLW unit)", True, "warning", "RLW_RXPIPE Nonfatal XC0 i0 Link 13"),
    146: XidInfo("NVLink error (TLW unit)", True, "warning", "TLW Nonfatal XC0 i0 Link 00"),
    147: XidInfo("NVLink error (TREX unit)", True, "warning", "TREX Nonfatal XC0 i0 Link 00"),
    148: XidInfo("NVLink error (NVLPW control)", True, "warning", "NVLPW_CTRL Nonfatal XC0 i0 Link 00"),
    149: XidInfo("NVLink error (NETIR: a link or the fabric beyond it)", True, "warning",
                "NETIR_LINK_EVT Fatal XC0 i0 Link 00"),
    150: XidInfo("NVLink error (MSE unit)", True, "warning", "MSE Nonfatal XC0 i0 Link 00"),
    154: XidInfo("the driver changed the GPU's recovery action (e.g. to 'GPU Reset Required')", True, "warning",
                 "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"),
}


def xid_info(code: int) -> XidInfo:
    """The entry for an Xid code; unknown codes are listed as such (informational)."""
    return XIDS.get(code, XidInfo(f"Xid {code} (not in gputopo's table: see NVIDIA's Xid catalog)",
                                  False, "info", "see NVIDIA's Xid catalog"))
