"""What NVIDIA Xid codes mean, for the ones that say something about the GPU or its links.

Sources, each row citing its own:
- CATALOG: NVIDIA's Xid catalog, https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
  (Ampere and later; its sheets "Xids", "XID 144-150 Decode" and "Guidance Classes"). Every row
  below was checked against it: meaning ("Description" and "Trigger Conditions"), the two
  "Resolution Bucket" columns (Immediate Action, then Investigatory Action: ``actions``) and
  what the trigger text asks beyond them (``advice``).
- MEMORY: NVIDIA's GPU memory error management guide,
  https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html
  ("row-remapping pending ... will happen at the next GPU reset. Even with the flag set, unaffected
  applications can continue running ... and new workloads can be launched") and the dynamic page
  retirement guide, https://docs.nvidia.com/deploy/dynamic-page-retirement/ (Xid 48/63/64 before Ampere).
- OLDER: NVIDIA's "Xid Errors" page for Volta and older GPUs, https://docs.nvidia.com/deploy/xid-errors/index.html
  (r555: Xid 61 "PMU Breakpoint. Report a GPU Issue and Reset GPU(s) reporting the XID", read as
  quoted in leptonai/gpud's Xid table, which cites that page); the catalog lists 61 as unused on
  Ampere and later.

``hardware`` Xids point at the GPU, its memory or a link (they become findings at ``severity``);
``application`` ones are most often a program's fault (illegal address, killed channel) and are
only listed (info). ``log_text`` is the words the driver writes after the code, used by simulated
kernel logs.

``severity`` follows what NVIDIA says the GPU needs:
- ``error``: the catalog's immediate action is RESET_GPU or RESTART_BM, or a workflow that ends in
  one (WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR: "A GPU reset or node reboot is needed to clear this
  error"), or the older page asks for a reset (61): the GPU is not to be trusted until it is done.
- ``warning``: the GPU keeps working but is not whole (94: "reset the GPU when convenient.
  Applications can continue to be run until the reset can be performed"; 157, 159, 54).
- ``info``: NVIDIA asks for nothing on the GPU (IGNORE: 63, 92, 121) or to restart the application.
  Xid 63 is judged by its form (``xid63_by_form``): its pre-Ampere page retirement line ("New page
  retired, reboot to activate") is a warning asking for a reset or a reboot (DPR).
Rows 162-172 name no bucket: their sentence, where the catalog has one, is the ``advice`` and sets
the severity by the same rule; one with no sentence that names a fault of the GPU (167 PCIe fatal
timeout, 169 SEC2 halt) is a warning, judged with the generic health check (no bucket claimed).
The Blackwell NVLink Xids 144-150 are judged per line (report/health_checks.py): the catalog's
"XID 144-150 Decode" gives RESET_GPU for its Fatal and Link Fatal rows and IGNORE (or "follow Xid
154") for the Non-fatal ones, and the driver writes Fatal or Nonfatal in the line
(``nvlink5_fatality``): Fatal is an error, Nonfatal info, except a Nonfatal line the decode may
promote to Fatal (NVLINK5_PROMOTABLE) or whose unit and errorStatus the line does not show
(``nvlink5_unit_status``), a warning; a line that says neither keeps ``severity`` here (warning).

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
    #: What NVIDIA's text for the code asks beyond its buckets, in an operator's words (remedies
    #: after the immediate bucket's, before the investigatory one's; BUS_ID is the GPU's).
    advice: Tuple[str, ...] = ()


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
    "WORKFLOW_XID_13": "if it repeats on the same GPC and TPC, the GPU may be at fault: run DCGM's diagnostics "
                       "(`dcgmi diag -r 3`), then NVIDIA's field diagnostic if they pass; alone, or moving "
                       "around, debug the application (`compute-sanitizer`) (NVIDIA's Xid catalog: "
                       "WORKFLOW_XID_13)",
    "WORKFLOW_XID_31": "if MMU faults repeat on this GPU (its bus id) whatever runs, the GPU may be at fault: run "
                       "DCGM's diagnostics (`dcgmi diag -r 3`), then NVIDIA's field diagnostic if they pass; on "
                       "different GPUs, or alone, debug the application (`compute-sanitizer`) (NVIDIA's Xid "
                       "catalog: WORKFLOW_XID_31)",
    "WORKFLOW_XID_48": "reset the GPU (`nvidia-smi -r -i BUS_ID`; drain it first when Xid 63 or 64 came with it); "
                       "alone, run NVIDIA's field diagnostic; in framebuffer memory, follow Xid 63/64 "
                       "(`nvidia-smi -q -d ECC,ROW_REMAPPER`); in SRAM, run the field diagnostic if the SRAM "
                       "error threshold flag is set (NVIDIA's Xid catalog: WORKFLOW_XID_48)",
    "WORKFLOW_NVLINK_ERR": "reset the GPU or reboot the node to clear the NVLink error; check its links "
                           "(`nvidia-smi nvlink -s`, `-e`) (NVIDIA's Xid catalog: WORKFLOW_NVLINK_ERR)",
    "WORKFLOW_NVLINK5_ERR": "read the Xid line's unit, Fatal/Nonfatal and status: a Fatal one needs the GPU "
                            "reset; check the links (`nvidia-smi nvlink -s`, `-e`) (NVIDIA's Xid catalog: "
                            "WORKFLOW_NVLINK5_ERR)",
    "WORKFLOW_XID_45": "with other Xids, follow theirs; alone, NVIDIA asks to restart Fabric Manager (NVSwitch "
                       "systems); most often it is an application stopped by a user or the system (Ctrl-C, kill, "
                       "a GPU reset), not a fault (NVIDIA's Xid catalog: WORKFLOW_XID_45)",
    "IGNORE (sympathetic)": "follow the remedies of the errors it came with first; if it came alone or they do "
                            "not help, report it to NVIDIA (`nvidia-bug-report.sh`) (NVIDIA's Xid catalog: "
                            "IGNORE (sympathetic))",
    "CHECK_MECHANICALS": "check that the GPU is seated and every power and link connector is secure (NVIDIA's "
                         "Xid catalog: CHECK_MECHANICALS)",
    "CHECK_UVM": "if Unified Memory (UVM) or vGPU is in use on it, reset the GPU (`nvidia-smi -r -i BUS_ID`); "
                 "otherwise nothing (NVIDIA's Xid catalog: CHECK_UVM)",
    "INVESTIGATE_LINK_SI": "investigate the link's signal integrity (cables, connectors, trays: NVIDIA's GB200 "
                           "resiliency service flow) (NVIDIA's Xid catalog: INVESTIGATE_LINK_SI)",
    "INVESTIGATE_SW_USER": "if the link was not taken down on purpose, investigate the software or the user "
                           "that did it (NVIDIA's Xid catalog: INVESTIGATE_SW_USER)",
    "SYMPATHETIC_REPORT_SOLO": "follow the remedies of the errors it came with first; if it came alone, report "
                               "it to NVIDIA (NVIDIA's Xid catalog: SYMPATHETIC_REPORT_SOLO)",
}

#: NVIDIA's pages the rows below were checked against (the module docstring says what each holds).
CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
MEMORY = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html"
OLDER = "https://docs.nvidia.com/deploy/xid-errors/index.html"

#: The Blackwell NVLink Xids whose line says Fatal or Nonfatal (CATALOG, "XID 144-150 Decode").
NVLINK5_XIDS = frozenset(range(144, 151))
_FATALITY_RE = re.compile(r"\b(Non-?fatal|Fatal)\b", re.IGNORECASE)


#: The Non-fatal rows of the decode that "could be non-fatal or fatal" (marked ``Non-fatal*``,
#: promoted to RESET_GPU by bits of the line's intrInfo): (unit, errorStatus). Every other
#: Non-fatal row's immediate action is IGNORE or XID_154_EVAL ("If an XID 154 is seen along with
#: this error, take that action. If no XID 154 present, RESTART_APP").
NVLINK5_PROMOTABLE = frozenset({("RLW_RXPIPE", 0x1), ("RLW_RXPIPE", 0x2), ("RLW_RXPIPE", 0x4)})
_NVLINK5_LINE_RE = re.compile(r"^\s*(?P<unit>[A-Z][A-Z0-9_/]*)\s+(?:Non-?fatal|Fatal)\b[^(]*"
                              r"\(\s*0x[0-9a-fA-F]+\s+(?P<status>0x[0-9a-fA-F]+)", re.IGNORECASE)


def nvlink5_unit_status(text: str) -> Optional[Tuple[str, int]]:
    """The unit and errorStatus (the second register in the parentheses) of an Xid 144-150 line
    ("RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 ...)" -> ("RLW_RXPIPE", 8));
    None when the line does not show both."""
    m = _NVLINK5_LINE_RE.search(text)
    return (m.group("unit").upper(), int(m.group("status"), 16)) if m else None


def nvlink5_fatality(text: str) -> Optional[str]:
    """"Fatal" or "Nonfatal" as an Xid 144-150 line says it ("NETIR_LINK_EVT Fatal XC0 i0 Link 00
    (...)", "RLW_RXPIPE Nonfatal XC0 ..."); None when the line says neither."""
    m = _FATALITY_RE.search(text)
    if m is None:
        return None
    return "Fatal" if m.group(1).lower() == "fatal" else "Nonfatal"

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
#: NVML's nvmlGpuRecoveryAction_t (nvidia-ml-py: NVML_GPU_RECOVERY_ACTION_*), the value of the
#: field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: -> (the enum's name, the action as an Xid 154 line
#: names it, a RECOVERY_ACTIONS key, where it has one; else the enum's name).
NVML_RECOVERY_ACTIONS: Dict[int, Tuple[str, str]] = {
    0: ("NONE", "None"),
    1: ("GPU_RESET", "GPU Reset Required"),
    2: ("NODE_REBOOT", "Node Reboot Required"),
    3: ("DRAIN_P2P", "Drain P2P"),
    4: ("DRAIN_AND_RESET", "Drain and Reset"),
    5: ("RECOVER_IMEX_DOMAIN", "RECOVER_IMEX_DOMAIN"),
    6: ("BUS_RESET", "BUS_RESET"),
    7: ("SYSTEM_REBOOT", "SYSTEM_REBOOT"),
}
_RECOVERY_RE = re.compile(r"recovery action changed from .*? to (?:0x[0-9a-fA-F]+ )?\((?P<action>[^)]+)\)")


def recovery_action(text: str) -> Optional[str]:
    """The recovery action an Xid 154 line changes to ("GPU Reset Required"), as the driver wrote
    it ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"); None when the
    text does not say."""
    m = _RECOVERY_RE.search(text)
    return m.group("action").strip() if m else None


XIDS: Dict[int, XidInfo] = {
    # Each row: NVIDIA's words for the code and its buckets, from the page named in its comment.
    8: XidInfo("GPU stopped processing (a channel timed out: usually the application)", False, "info",  # CATALOG
               "pid=4242, name=python, Channel 0x00000008",
               actions=('RESTART_APP', 'CONTACT_SUPPORT')),
    13: XidInfo("graphics engine exception (usually an application fault, e.g. out-of-range access)",  # CATALOG
                False, "info", "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
                actions=('RESTART_APP', 'WORKFLOW_XID_13')),
    31: XidInfo("GPU memory page fault (usually an application's illegal memory access)", False, "info",  # CATALOG
                "pid=4242, name=python, Ch 00000008, intr 10000000. MMU Fault",
                actions=('RESTART_APP', 'WORKFLOW_XID_31')),
    # CATALOG's trigger text: "These failures primarily involve quality issues on PCI, and are
    # generally not caused by user application actions"; its buckets restart the application.
    32: XidInfo("invalid or corrupted push buffer stream (a DMA fault between driver and GPU: NVIDIA says "
                "mostly PCIe quality issues, generally not the application)",
                False, "info", "Channel ID 00000000 intr 00004000",
                actions=('RESTART_APP', 'CHECK_APP/CUDA')),
    # CATALOG: "a user application hits a software induced fault ... The GPU remains in a healthy state".
    43: XidInfo("GPU stopped processing a channel after an application's fault (the GPU stays healthy)",
                False, "info", "pid=4242, name=python, Ch 00000008",
                actions=('IGNORE', 'CONTACT_SUPPORT')),
    # CATALOG: an application aborted and its channels were torn down (Ctrl-C, GPU resets, sigkill),
    # or "due to previous errors"; "Not Solo: IGNORE (follow other Xid)".
    45: XidInfo("preemptive cleanup of an application's channels (it was stopped, or an earlier error)",
                False, "info", "pid=4242, name=python, Ch 00000008",
                actions=('WORKFLOW_XID_45', 'WORKFLOW_XID_45')),
    46: XidInfo("GPU stopped processing (the GPU timed out: it needs a reset)", True, "error",  # CATALOG
                "GPU stopped processing",
                actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    # CATALOG: "A GPU reset or node reboot is needed to clear this error" (MEMORY: Xid 48/63/64).
    48: XidInfo("double-bit (uncorrectable) ECC error in GPU memory", True, "error",
                "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
                actions=('WORKFLOW_XID_48', 'WORKFLOW_XID_48')),
    54: XidInfo("auxiliary power is not connected to the GPU board (it runs at reduced clocks)", True,  # CATALOG
                "warning", "Auxiliary power is not connected to the GPU board",
                actions=('CHECK_MECHANICALS', 'CONTACT_SUPPORT')),
    # OLDER (r555): "PMU Breakpoint. Report a GPU Issue and Reset GPU(s) reporting the XID";
    # CATALOG: unused on Ampere and later (CONTACT_SUPPORT).
    61: XidInfo("internal micro-controller breakpoint/warning (the GPU's PMU firmware stopped at a breakpoint)",
                True, "error", "Internal micro-controller breakpoint/warning",
                actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    62: XidInfo("internal micro-controller halt (GPU firmware stopped)", True, "error",  # CATALOG
                "Internal micro-controller halt",
                actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    # CATALOG: IGNORE / IGNORE. MEMORY: a pending remap "will happen at the next GPU reset. Even with
    # the flag set, unaffected applications can continue running ... and new workloads can be launched".
    63: XidInfo("GPU memory row remapping (page retirement before Ampere) recorded: it takes effect at the "
                "GPU's next reset; work keeps running meanwhile", True, "info",
                "pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
                actions=('IGNORE', 'IGNORE'),
                advice=("nothing is needed now: the remap is applied at the GPU's next reset and unaffected work "
                        "keeps running (NVIDIA's GPU memory error management guide); with Xid 48, follow Xid 48's "
                        "remedy (drain the GPU, then reset it)",)),
    64: XidInfo("GPU memory row remapping (page retirement before Ampere) FAILED: the bad memory could not be "  # CATALOG
                "taken out of use", True, "error",
                "pid=1896, Row Remapper: Failed to remap a row, reset gpu and run a field diagnostic",
                actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    68: XidInfo("NVDEC0 (video decoder) exception", False, "info", "NVDEC0 Exception",  # CATALOG
                actions=('RESTART_APP', 'CONTACT_SUPPORT')),
    69: XidInfo("graphics engine class error (usually the application or its CUDA version)", False, "info",  # CATALOG
                "Class Error for Subchannel 0 (Class 0x0, Offset 0x0, Data 0x0)",
                actions=('RESTART_APP', 'CHECK_APP/CUDA')),
    # CATALOG: "A GPU reset or node reboot is needed to clear this error. ... may indicate a problem
    # with the device at the remote end of the link".
    74: XidInfo("NVLink error (the link, an NVSwitch, or the GPU at its other end; peer traffic over it may fail)",
                True, "error", "NVLink: fatal error detected on link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
                actions=('WORKFLOW_NVLINK_ERR', 'CONTACT_SUPPORT')),
    79: XidInfo("GPU has fallen off the bus (PCIe link lost: power, riser, slot or a dead GPU)", True, "error",  # CATALOG
                "GPU has fallen off the bus.",
                actions=('RESTART_BM', 'CONTACT_SUPPORT')),
    # CATALOG: IGNORE, then CONTACT_SUPPORT: the errors were corrected.
    92: XidInfo("high single-bit ECC error rate (corrected errors: NVIDIA asks for no immediate action)", True,
                "info", "pid='<unknown>', name=<unknown>, High single-bit ECC error rate",
                actions=('IGNORE', 'CONTACT_SUPPORT')),
    # CATALOG: "contained to one application, and the application that encountered this error must
    # be restarted. All other applications running at the time of the Xid are unaffected. It is
    # recommended to reset the GPU when convenient. Applications can continue to be run until the
    # reset can be performed."
    94: XidInfo("contained uncorrectable memory error: the application that hit it was stopped, others are "
                "unaffected", True, "warning",
                "pid=4242, name=python, Contained: SM (0x1). RST: No, D-RST: No",
                actions=('RESTART_APP', 'IGNORE (sympathetic)'),
                advice=("reset the GPU when convenient (`nvidia-smi -r -i BUS_ID`): work can keep running on it "
                        "until then (NVIDIA's Xid catalog, Xid 94)",)),
    # CATALOG: "these errors affect multiple applications, and the affected GPU must be reset before
    # applications can restart".
    95: XidInfo("uncontained uncorrectable memory error: every application on the GPU is affected", True, "error",
                "pid=4242, name=python, Uncontained: FBHUB. RST: Yes, D-RST: No",
                actions=('RESET_GPU', 'IGNORE (sympathetic)')),
    109: XidInfo("context switch timeout", True, "error",  # CATALOG
                 "pid=4242, name=python, Ch 00000008, errorString CTX SWITCH TIMEOUT",
                 actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    # CATALOG: "uncommon unless there is a hardware failure. To recover, revert any recent system
    # hardware modifications and cold reset the system".
    110: XidInfo("security fault (uncommon unless the hardware failed)", True, "error", "Security Fault Error",
                 actions=('RESET_GPU', 'INVESTIGATE_SW'),
                 advice=("if it comes back: undo recent hardware changes, cold-reset the system, then contact the "
                         "hardware vendor (NVIDIA's Xid catalog, Xid 110)",)),
    # CATALOG (119/120): "A GPU reset or node power cycle may be needed if the error persists".
    119: XidInfo("GSP firmware RPC timeout (the GPU's system processor stopped answering)", True, "error",
                 "Timeout after 6s of waiting for RPC response from GPU0 GSP!",
                 actions=('RESET_GPU', 'INVESTIGATE_SW')),
    120: XidInfo("GSP firmware error", True, "error", "GSP task exception",  # CATALOG
                 actions=('RESET_GPU', 'INVESTIGATE_SW')),
    # CATALOG: "corrected by the system and have no operational impact. Resetting the GPU at an
    # available service window will allow the GPU to retrain the link".
    121: XidInfo("corrected errors on the C2C link to the Grace CPU (no operational impact)", True, "info",
                 "C2C Error",
                 actions=('IGNORE', 'CONTACT_SUPPORT'),
                 advice=("reset the GPU at a service window so it retrains the link (NVIDIA's Xid catalog, "
                         "Xid 121)",)),
    136: XidInfo("NVLink link training failed", True, "error", "Link Training Failed",  # CATALOG
                 actions=('RESET_GPU', 'INVESTIGATE_LINK_SI')),
    # CATALOG: uncorrectable errors "in such a way as to interrupt the GPU driver's ability to mark
    # the pages for dynamic page offlining or row remapping. Reset the GPU".
    140: XidInfo("uncorrectable GPU memory error the driver could not offline or remap", True, "error",
                 "ECC Unrecovered Error",
                 actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    143: XidInfo("GPU initialization error", True, "error", "GPU Initialization Error",  # CATALOG
                 actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    # Blackwell-era NVLink errors (CATALOG 144-150 and its "XID 144-150 Decode"): judged per line by
    # the Fatal / Nonfatal the driver writes (module docstring); "warning" is for a line that says
    # neither (or an Xid 45 "caused by previous Xid 149" whose 149 line is not in the log).
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
    150: XidInfo("NVLink error (MSE unit)", True, "warning", "MSE Fatal XC0 i0 Link 00",
                 actions=('WORKFLOW_NVLINK5_ERR', 'WORKFLOW_NVLINK5_ERR')),
    # CATALOG: "summarizes the recovery action required for other Xids". Its severity and remedy
    # come from the action it names (RECOVERY_ACTIONS); "warning" is for a line that names none.
    154: XidInfo("the driver changed the GPU's recovery action (e.g. to 'GPU Reset Required')", True, "warning",
                 "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
                 actions=('XID_154',)),
    # CATALOG: "Link down events which are flagged as 'intentional' (including transitions to SLEEP)".
    155: XidInfo("NVLink link taken down on purpose (software-defined, e.g. to sleep): the GPU needs a reset to "
                 "bring it back", True, "error", "NVLINK: SW Defined Error",
                 actions=('RESET_GPU', 'INVESTIGATE_SW_USER')),
    156: XidInfo("resource retirement event (a GPU resource was retired: the GPU needs a reset)", True, "error",  # CATALOG
                 "Resource Retirement Event",
                 actions=('RESET_GPU', 'IGNORE')),
    # CATALOG: "No possible repairs are possible due to lack of resources. You may still run
    # workloads or Apps, but may experience the same Xid again."
    157: XidInfo("resource retirement failure (no spare left to repair with: work can run, the error may "
                 "come back)", True, "warning", "Resource Retirement Failure",
                 actions=('IGNORE', 'CONTACT_SUPPORT')),
    158: XidInfo("GPU fatal timeout", True, "error", "GPU Fatal Timeout",  # CATALOG
                 actions=('RESET_GPU', 'CONTACT_SUPPORT')),
    159: XidInfo("CHI non-data error on the C2C link to the CPU", True, "warning", "CHI Non-Data Error",  # CATALOG
                 actions=('CHECK_UVM', 'SYMPATHETIC_REPORT_SOLO')),
    # 162-172 (CATALOG): no Resolution Bucket is named; where the row has a sentence it is the
    # ``advice``. A row with neither that names a fault of the GPU (167, 169) is a warning (module
    # docstring): never passed as info, never called broken on a guess.
    162: XidInfo("power smoothing circuitry capability re-engaged", True, "info",  # CATALOG: no text
                 "Power Smoothing HW Circuitry capability reengaged"),
    # CATALOG: "No GPU reset required. If power smoothing functionality is desired, the customer
    # needs to resolve the thermal events. If disabled due to timeout, reload the driver or reset the GPU."
    163: XidInfo("power smoothing circuitry capability disengaged (the GPU works; its power smoothing is off)",
                 True, "warning", "Power Smoothing HW Circuitry capability disengaged",
                 advice=("no GPU reset is needed; for power smoothing, resolve the thermal events; if it was "
                         "disabled by a timeout, reload the driver or reset the GPU (`nvidia-smi -r -i BUS_ID`) "
                         "(NVIDIA's Xid catalog, Xid 163)",)),
    # CATALOG: "Monitor power swings and expect to replace GPUs if power smoothing is desired. Power
    # smoothing functionality will be disabled soon."
    164: XidInfo("power smoothing circuitry near the end of its lifetime (it will be disabled soon)", True,
                 "warning", "Power Smoothing HW Circuitry low lifetime reached",
                 advice=("watch the power swings; expect to replace the GPU if power smoothing is wanted: the "
                         "driver will disable it soon (NVIDIA's Xid catalog, Xid 164)",)),
    # CATALOG: "Replace GPUs if power swings are not acceptable, and power smoothing is desired. Power
    # smoothing will be disabled by the driver and power swings will occur. Analyze datacenter
    # infrastructure to ensure ability to absorb power swings."
    165: XidInfo("power smoothing circuitry lifetime exhausted: the driver disables power smoothing", True,
                 "warning", "Power Smoothing HW Circuitry lifetime exhausted",
                 advice=("check that the data centre's power can absorb the power swings that now occur; replace "
                         "the GPU if they are not acceptable and power smoothing is wanted (NVIDIA's Xid "
                         "catalog, Xid 165)",)),
    # CATALOG: "Applicable to CC (confidential computing) mode only."
    166: XidInfo("confidential-computing traffic seen before the NVLink was set up for encrypted traffic", True,
                 "info", "CC traffic seen prior to link properly being configured for encrypted traffic",
                 advice=("this applies in confidential computing (CC) mode only (NVIDIA's Xid catalog, Xid 166)",)),
    # CATALOG: PCIE_FATAL_TIMEOUT, no text and no bucket (H100 and later).
    167: XidInfo("PCIe fatal timeout (NVIDIA's catalog gives no action for it)", True, "warning",
                 "PCIE_FATAL_TIMEOUT"),
    # CATALOG: REDUCED_GPU_MEMORY_CAPACITY: "Should only be seen when ECC is disabled. Either ECC
    # should be enabled (to enable row-remapping) or boot re-attempted with shifted WPR."
    168: XidInfo("errors found in the GPU's write-protected region (WPR): GPU memory capacity reduced", True,
                 "warning", "Errors found in WPR (write protected region)",
                 advice=("it should only be seen with ECC off: turn ECC on (`nvidia-smi -e 1`, so rows are "
                         "remapped) or boot again with the WPR shifted (NVIDIA's Xid catalog, Xid 168)",)),
    # CATALOG: SEC2_HALT_ERROR "Internal micro-controller halt", no text and no bucket.
    169: XidInfo("SEC2 internal micro-controller halt (NVIDIA's catalog gives no action for it)", True,
                 "warning", "Internal micro-controller halt"),
    # CATALOG: "Applicable to CC (confidential computing) mode only."
    170: XidInfo("interrupt seen in confidential computing mode (NVLink)", True, "info", "Interrupt seen in CC mode",
                 advice=("this applies in confidential computing (CC) mode only (NVIDIA's Xid catalog, Xid 170)",)),
    # CATALOG (171/172): "Additional to Xid 48 providing more details on particulars of fault to
    # differentiate DRAM/SRAM": the uncorrectable error of an Xid 48, judged as Xid 48 is.
    171: XidInfo("uncorrectable GPU memory (DRAM) error: detail of an Xid 48", True, "error",
                 "Uncorrectable DRAM error",
                 advice=("it adds detail to an Xid 48 (NVIDIA's Xid catalog, Xid 171): follow Xid 48's remedy: "
                         "reset the GPU (`nvidia-smi -r -i BUS_ID`), then `nvidia-smi -q -d ECC,ROW_REMAPPER`",)),
    172: XidInfo("uncorrectable GPU SRAM error: detail of an Xid 48", True, "error", "Uncorrectable SRAM error",
                 advice=("it adds detail to an Xid 48 (NVIDIA's Xid catalog, Xid 172): follow Xid 48's remedy: "
                         "reset the GPU (`nvidia-smi -r -i BUS_ID`); run NVIDIA's field diagnostic if the SRAM "
                         "error threshold flag is set",)),
}


#: Xid 63 in its pre-Ampere form: dynamic page retirement, "Dynamic Page Retirement: New page
#: retired, reboot to activate" (the driver's own words). NVIDIA's dynamic page retirement guide
#: (DPR): a retired page stays in use, and can still be allocated, until the GPU is reattached (the
#: driver reloaded, the GPU reset or the node rebooted), so it asks for a reboot or a reset; the
#: row-remapping form of Ampere and later (XIDS[63]) asks nothing now.
DPR = "https://docs.nvidia.com/deploy/dynamic-page-retirement/"
XID63_PAGE_RETIREMENT = XidInfo(
    "GPU memory page retired (dynamic page retirement, before Ampere): the bad page stays in use until the "
    "GPU is reset or the node rebooted", True, "warning",
    "Dynamic Page Retirement: New page retired, reboot to activate",
    advice=("drain the GPU, then reset it (`nvidia-smi -r -i BUS_ID`) or reboot the node, so the retired page is "
            "taken out of use: until then it can still be allocated (NVIDIA's dynamic page retirement guide; the "
            "driver's line says 'reboot to activate')",
            "watch the retired page count (`nvidia-smi -q -d PAGE_RETIREMENT`); NVIDIA's field diagnostic decides on "
            "replacement when it keeps growing"))
_PAGE_RETIRED_RE = re.compile(r"\bpage retire|\bnew page retired\b", re.IGNORECASE)


def xid63_by_form(texts: "list[str]") -> XidInfo:
    """Xid 63 by the form its lines take: the pre-Ampere page retirement line ("Dynamic Page
    Retirement: New page retired, reboot to activate") asks for a reset or a reboot
    (XID63_PAGE_RETIREMENT); the row-remapping form, or a line that says neither, is XIDS[63]."""
    return XID63_PAGE_RETIREMENT if any(_PAGE_RETIRED_RE.search(t or "") for t in texts) else XIDS[63]


def xid_info(code: int) -> XidInfo:
    """The entry for an Xid code; unknown codes are listed as such (informational)."""
    return XIDS.get(code, XidInfo(f"Xid {code} (not in gputopo's table: see NVIDIA's Xid catalog)",
                                  False, "info", "see NVIDIA's Xid catalog"))
