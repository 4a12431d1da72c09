"""Findings and notes from the NVIDIA driver lines of a kernel log that are no Xid, and from its
lines that could not be read: one rule set for `import kernel-log` (kernel_log.json) and `scan`
(live or ``--kernel-log FILE``: the topology's ``host.kernel_log_facts``), both the document
probe/xid_lines.py's ``kernel_log_document`` makes. The Xids themselves are judged by
health_checks.py, for both.

Judged (a finding, with a remedy):
- ``RmInitAdapter failed`` for a GPU: the driver could not bring it up, it is not usable:
  ``driver-error``, error;
- an NVSwitch SXid by its meaning (model/sxid.py, NVIDIA's Fabric Manager user guide's SXid tables):
  a fatal one (``nvidia-nvswitchN: SXid (PCI:...): 20034, Fatal, ...``), and a non-fatal one whose
  meaning is a configuration fault that stalls NVLink traffic (11004, 12028: "Corresponding GPU
  NVLink traffic will be stalled, and subsequent GPU access will hang"): ``driver-error``, error,
  naming the switch;
- ``NV_ERR_RESET_REQUIRED`` in an NVRM line: a GPU needs a reset: ``driver-error``, error;
- ``The NVIDIA probe routine failed for N device(s)``: a device the driver did not take (which one
  the line does not say): ``driver-error``, warning;
- an NVRM line (no Xid number) saying an uncorrectable ECC error: ``driver-error``, warning;
- nvidia_peermem failing to load (``Unknown symbol ib_register_peer_memory_client``, ``disagrees
  about version of symbol``): GPUDirect RDMA through it is off, so multi-node NCCL traffic goes
  through host memory unless DMA-BUF is used: ``gpudirect-rdma``, warning;
- nvidia-peermem's ``invalid context`` diagnostic: NVIDIA's maintainer calls it harmless, a
  mitigation of driver issue 4272659 whose full fix is in R560 and later (Mellanox/nv_peer_memory
  issue 120): ``gpudirect-rdma``, info; a warning when the log's driver is R560 or later (there it
  "should never appear").

Said (a note): the GPU crash dump notice (what to collect before the module is unloaded), any
other non-fatal NVSwitch SXid with its meaning (a code not in the guide's tables said as unknown), and how many NVIDIA driver lines gputopo read but judges by no rule, with
the first of them: a line read is never dropped silently.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from gputopo.model import Finding, Topology, is_value
from gputopo.model.bus_id import try_parse
from gputopo.model.sxid import GUIDE, sxid_info, sxid_words

from .run_folder import Run

#: How every note of this module begins (the terminal picks them out of a summary's notes).
KERNEL_LOG_NOTE = "kernel log: "
REMEDY_WHOLE_LOG = ("save the whole kernel log (`dmesg -T > kern.log` or `journalctl -k > kern.log`), no lines "
                    "left out, and scan with it again")
#: A GPU's health cell in the scan, for the driver lines that name it.
FLAG_WORDS = {"rm-init-failed": "driver: RmInitAdapter failed", "ecc-uncorrectable": "driver: ECC UE line"}
REMEDY_BUG_REPORT = ("if it comes back, send `nvidia-bug-report.sh` output to NVIDIA or the system's vendor: they "
                     "decide whether the part is replaced")


def _doc(run: Run) -> Optional[Dict[str, Any]]:
    doc = getattr(run, "kernel_log", None)
    return doc if isinstance(doc, dict) else None


def _where(e: Dict[str, Any]) -> str:
    n = e.get("count", 1)
    first, last = e.get("first_line"), e.get("last_line")
    lines = f"line {first}" if first == last or last is None else f"lines {first}-{last}"
    return f"{n} time{'s' if n != 1 else ''}, {lines} of the log" if n != 1 else f"{lines} of the log"


def _gpu_at(topo: Optional[Topology], bus: Optional[str]) -> Optional[List[int]]:
    """The topology's GPU at ``bus`` ([index]), None when none is there (a GPU that never came up is
    not in a topology NVML made)."""
    if not bus or topo is None:
        return None
    for g in topo.gpus:
        addr = try_parse(str(g.pci_bus_id)) if is_value(g.pci_bus_id) else None
        if addr is not None and addr.lspci == bus:
            return [g.nvml_index]
    return None


def _driver_major(doc: Dict[str, Any]) -> Optional[int]:
    versions = doc.get("driver_versions") or []
    try:
        return int(str(versions[-1]).split(".")[0]) if versions else None
    except ValueError:
        return None


def _codes(e: Dict[str, Any]) -> List[int]:
    """The SXid codes a driver-line entry read (as numbers)."""
    return [int(c) for c in e.get("sxids") or [] if str(c).isdigit()]


def _effect(code: int) -> Optional[str]:
    info = sxid_info(code)
    return info.effect if info is not None else None


def _fatal_sxid(e: Dict[str, Any], evidence: Dict[str, Any], where: str) -> Finding:
    """A fatal SXid: an error, said by its meaning (model/sxid.py); an always-fatal one asks for the
    host to be restarted, the others for the GPUs and NVSwitches to be reset."""
    codes = _codes(e)
    always = any(_effect(c) == "always-fatal" for c in codes)
    words = ", ".join(sxid_words(c) for c in codes) or "?"
    return Finding(
        "driver-error", "error",
        f"fatal SXid on NVSwitch {e.get('device', '?')} at {e.get('bus')} ({where}): NVLink traffic through it "
        f"stalls and the GPUs using it may hang (their jobs end with Xid 45); SXid {words}",
        evidence=evidence,
        cause="a fatal error in an NVSwitch: the NVLink fabric through it cannot be trusted until it is reset",
        remedies=[("restart the host: an always-fatal SXid needs the whole fabric reset (" + GUIDE + ")") if always
                  else ("reset the GPUs and NVSwitches: reboot the node (" + GUIDE + " lists each SXid and its "
                        "recovery)"), REMEDY_BUG_REPORT])


def kernel_log_findings(run: Run) -> List[Finding]:
    """An imported kernel log's driver lines (its unreadable lines are the run folder's problems:
    data_findings.py)."""
    return driver_line_findings(_doc(run), run.topology)


def scan_kernel_log_findings(topo: Topology) -> List[Finding]:
    """The driver lines and the unreadable lines ('...' where a paste left lines out, an Xid line
    cut or garbled, a log cut inside its last line) of the kernel log a scan read."""
    doc = topo.host.kernel_log_facts
    if not isinstance(doc, dict):
        return []
    file = doc.get("file", "?")
    # a saved log's unreadable lines are coverage, as on its import (data_findings.IMPORT_TROUBLE)
    out = [Finding("incomplete-data", "info", f"kernel log {file}: {problem}", evidence={"file": file},
                   remedies=[REMEDY_WHOLE_LOG]) for problem in doc.get("problems") or []]
    return driver_line_findings(doc, topo) + out


def scan_kernel_log_notes(topo: Topology) -> List[str]:
    """What the kernel log a scan read says that is no finding (kernel_log_notes)."""
    doc = topo.host.kernel_log_facts
    return driver_line_notes(doc) if isinstance(doc, dict) else []


def gpu_driver_flags(topo: Topology) -> Dict[int, List[str]]:
    """The driver lines naming each GPU of ``topo``, a few words each, for the scan's health cell."""
    doc = topo.host.kernel_log_facts
    flags: Dict[int, List[str]] = {}
    for e in (doc.get("driver_lines") or []) if isinstance(doc, dict) else []:
        gpus = _gpu_at(topo, e.get("bus")) if e.get("kind") in FLAG_WORDS else None
        for i in gpus or []:
            if FLAG_WORDS[e["kind"]] not in flags.setdefault(i, []):
                flags[i].append(FLAG_WORDS[e["kind"]])
    return flags


def driver_line_findings(doc: Optional[Dict[str, Any]], topo: Optional[Topology]) -> List[Finding]:
    """The findings of a kernel log document's driver lines, on ``topo``'s GPUs where they name one."""
    if doc is None:
        return []
    file = doc.get("file", "?")
    out: List[Finding] = []
    for e in doc.get("driver_lines") or []:
        kind, bus, text = e.get("kind"), e.get("bus"), str(e.get("text", ""))
        evidence = {"file": file, "driver_line": kind, "count": e.get("count"), "first_line": e.get("first_line"),
                    "last_line": e.get("last_line"), "text": text,
                    **({"bus_id": bus} if bus else {}),
                    **{k: e[k] for k in ("module", "device", "symbols", "sxids", "n") if e.get(k)}}
        where = _where(e)
        if kind == "rm-init-failed":
            out.append(Finding(
                "driver-error", "error",
                f"the NVIDIA driver could not initialise the GPU at {bus} ({where}): it is not usable (no CUDA "
                f"work, not listed by nvidia-smi); the driver wrote {text!r}",
                gpus=_gpu_at(topo, bus), evidence=evidence,
                cause="the driver failed to bring the GPU up (RmInitAdapter): its firmware (GSP) or VBIOS boot "
                      "failing, a GPU this driver does not support, or PCIe / power trouble",
                remedies=["read the NVRM lines just before it in the log: they say which step failed (GSP firmware, "
                          "GFW/VBIOS boot, mapping the GPU's memory)",
                          "power-cycle the node; if it stays, reseat the GPU and its power cables",
                          REMEDY_BUG_REPORT]))
        elif kind == "nvswitch-sxid-fatal":
            out.append(_fatal_sxid(e, evidence, where))
        elif kind == "nvswitch-sxid-nonfatal":
            stalls = [c for c in _codes(e) if _effect(c) == "stalls"]
            if stalls:
                out.append(Finding(
                    "driver-error", "error",
                    f"NVSwitch {e.get('device', '?')} at {bus} stalls NVLink traffic, although its non-fatal SXid line "
                    f"says Non-fatal ({where}; {GUIDE}): SXid {', '.join(sxid_words(c) for c in stalls)}",
                    evidence={**evidence, "sxid_effect": "stalls"},
                    cause="a fault of the NVLink fabric's configuration (its partition routing or access control): "
                          "it does not correct itself",
                    remedies=["check the fabric's partition and routing (NVIDIA's `nvswitch-audit` tool; Fabric "
                              "Manager's log and configuration), then restart the jobs or VMs that use this NVSwitch; "
                              "reboot the node if it comes back (" + GUIDE + ")", REMEDY_BUG_REPORT]))
        elif kind == "reset-required":
            out.append(Finding(
                "driver-error", "error",
                f"the NVIDIA driver says a GPU needs a reset (NV_ERR_RESET_REQUIRED, {where}): work on it fails "
                "until it is reset; the line does not name the GPU",
                evidence=evidence, cause="the driver (its GSP firmware) put a GPU in a state only a reset clears",
                remedies=["find the GPU whose work fails ('CUDA-capable device(s) is/are busy or unavailable') or "
                          "whose Xid lines come before it, then reset it (`nvidia-smi -r -i <bus id>`) or reboot "
                          "the node", REMEDY_BUG_REPORT]))
        elif kind == "probe-failed":
            n = e.get("n", "?")
            out.append(Finding(
                "driver-error", "warning",
                f"the NVIDIA driver did not take {n} device(s) (probe routine failed, {where}): a GPU of this "
                "machine may be missing from nvidia-smi; the line does not say which",
                evidence=evidence,
                cause="the driver's probe of a PCI device failed: a GPU that fell off the bus, one this driver "
                      "does not support, or one another driver (nouveau, vfio-pci) holds",
                remedies=["compare `lspci -d 10de:` with `nvidia-smi -L` to find the GPU, and read the NVRM lines "
                          "before this one for why"]))
        elif kind == "ecc-uncorrectable":
            out.append(Finding(
                "driver-error", "warning",
                f"the NVIDIA driver wrote an uncorrectable ECC error without an Xid number ({where}): {text!r}",
                gpus=_gpu_at(topo, bus), evidence=evidence,
                cause="an uncorrectable error in GPU memory: data it held was lost",
                remedies=["`nvidia-smi -q -d ECC,ROW_REMAPPER`: uncorrectable counts, a row remap pending (reset the "
                          "GPU) or failed (NVIDIA's field diagnostic)", REMEDY_BUG_REPORT]))
        elif kind == "peermem-load-failed":
            symbols = ", ".join(e.get("symbols") or []) or "the InfiniBand peer-memory symbols"
            out.append(Finding(
                "gpudirect-rdma", "warning",
                f"{e.get('module', 'nvidia_peermem')} could not be loaded, so GPUDirect RDMA through it is off "
                f"({where}; symbols it could not use: {symbols}): NCCL moves inter-node data through host memory "
                "unless it uses DMA-BUF",
                evidence=evidence,
                cause="the module was built against another InfiniBand stack (MLNX_OFED / DOCA ib_core) than the one "
                      "running: its symbols do not match",
                remedies=["rebuild nvidia_peermem against the running InfiniBand stack (reinstall the NVIDIA driver, "
                          "or the GPU Operator's driver container, after MLNX_OFED/DOCA), then `modprobe "
                          "nvidia_peermem`",
                          "or use DMA-BUF instead (open GPU kernel modules on a kernel >= 5.12): NCCL needs no "
                          "nvidia_peermem then"]))
        elif kind == "peermem-invalid-context":
            major = _driver_major(doc)
            fixed = major is not None and major >= 560
            out.append(Finding(
                "gpudirect-rdma", "warning" if fixed else "info",
                f"nvidia-peermem's 'invalid context' diagnostic ({where})" +
                (f": with driver {major} it should never appear (NVIDIA's full fix is in R560 and later)" if fixed
                 else ": NVIDIA calls it harmless, a mitigation of driver issue 4272659 (Mellanox/nv_peer_memory "
                      "issue 120)"),
                evidence=evidence,
                remedies=[REMEDY_BUG_REPORT] if fixed else
                ["update the NVIDIA driver to R560 or later, where the full fix makes it go away"]))
    return out


def kernel_log_notes(run: Run) -> List[str]:
    """What the NVIDIA driver lines of an imported log (kernel_log.json), else of the log the
    folder's scan read (a bench run's topology), say that is no finding (driver_line_notes)."""
    doc = _doc(run)
    if doc is None and run.topology is not None:
        return scan_kernel_log_notes(run.topology)
    return driver_line_notes(doc)


def driver_line_notes(doc: Optional[Dict[str, Any]]) -> List[str]:
    """What the log's NVIDIA driver lines say that is no finding, and how many lines no rule judges."""
    if doc is None:
        return []
    notes = []
    for e in doc.get("driver_lines") or []:
        if e.get("kind") == "crash-dump":
            notes.append(f"{KERNEL_LOG_NOTE}the NVIDIA driver wrote a GPU crash dump ({_where(e)}): run "
                         "`nvidia-bug-report.sh` as root before the NVIDIA kernel module is unloaded to keep it")
        elif e.get("kind") == "nvswitch-sxid-nonfatal":
            said = [c for c in _codes(e) if _effect(c) != "stalls"]
            if said or not _codes(e):
                notes.append(f"{KERNEL_LOG_NOTE}NVSwitch {e.get('device', '?')} at {e.get('bus')}: non-fatal SXid "
                             f"{', '.join(str(c) for c in said) or '?'} ({_where(e)}): "
                             + ("; ".join(sxid_words(c) for c in said) or "its code was not read"))
    other = doc.get("other_nvidia_lines") or {}
    count = other.get("count") or 0
    if count:
        examples = "; ".join(f"line {x.get('line')} {x.get('text')!r}" for x in other.get("examples") or [])
        routine = doc.get("routine_nvidia_lines") or 0
        besides = f" (besides {routine} routine line(s) of the module loading and GPUs enabled)" if routine else ""
        notes.append(f"{KERNEL_LOG_NOTE}{count} other NVIDIA driver line(s) read but judged by no gputopo rule{besides} "
                     f"(first: {examples}): read them in the log")
    return notes
