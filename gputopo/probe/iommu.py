"""IOMMU mode of a host, with the evidence for it (see gputopo.probe.host for why it matters).

Read from files under ``root``: ``sys/class/iommu`` (any entry: an IOMMU is registered), the
``type`` of the GPUs' IOMMU groups (``DMA``/``DMA-FQ``: translated, ``identity``: passthrough;
kernels >= 5.11), else of all groups, else the kernel command line (``intel_iommu=on|off``,
``amd_iommu=off``, ``iommu=pt``, ``iommu.passthrough=1``). Mode "off" when no IOMMU is
registered and no group exists.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from gputopo.model.values import NotAvailable
from gputopo.model.bus_id import try_bus_key
from gputopo.probe.host_files import host_path, read_host_file

_TRANSLATED_TYPES = ("DMA", "DMA-FQ")


def cmdline_iommu_flags(cmdline: str) -> Dict[str, str]:
    """The IOMMU-related kernel parameters of a command line, e.g. {"intel_iommu": "on", "iommu": "pt"}."""
    flags = {}
    for tok in cmdline.split():
        key, _, val = tok.partition("=")
        if key in ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict"):
            flags[key] = val
    return flags


def _cmdline_mode(flags: Dict[str, str]) -> Optional[str]:
    """What the command line alone says: "passthrough", "off", "translated" or None."""
    intel = set(flags.get("intel_iommu", "").split(","))
    if flags.get("iommu") == "pt" or flags.get("iommu.passthrough") in ("1", "y", "on") or "pt" in intel:
        return "passthrough"
    if "off" in intel or flags.get("amd_iommu") == "off" or flags.get("iommu") == "off":
        return "off"
    if "on" in intel or flags.get("iommu.passthrough") in ("0", "n", "off") or flags.get("iommu") == "force":
        return "translated"
    return None


def _gpu_group_types(root: str, gpu_bus_ids: Iterable[str]) -> List[Tuple[str, str, Optional[str]]]:
    """(gpu bus id, iommu group number, group type or None) for GPUs that have an IOMMU group."""
    out = []
    for bus in gpu_bus_ids:
        key = try_bus_key(bus)
        if key is None:
            continue
        link = host_path(root, f"sys/bus/pci/devices/{key}/iommu_group")
        try:
            group = os.path.basename(os.readlink(link).rstrip("/"))
        except OSError:
            continue
        out.append((bus, group, read_host_file(root, f"sys/kernel/iommu_groups/{group}/type")))
    return out


def read_iommu(root: str = "/", gpu_bus_ids: Sequence[str] = ()) -> Tuple[object, List[str]]:
    """IOMMU mode ("translated" | "passthrough" | "off" | NotAvailable) and the evidence for it."""
    evidence: List[str] = []
    cmdline = read_host_file(root, "proc/cmdline")
    flags = cmdline_iommu_flags(cmdline) if cmdline is not None else {}
    if cmdline is not None:
        shown = " ".join(f"{k}={v}" if v else k for k, v in flags.items())
        evidence.append(f"kernel cmdline: {shown or 'no IOMMU parameters'}")

    if not os.path.isdir(host_path(root, "sys")):
        return NotAvailable(f"cannot read {host_path(root, 'sys')} (no sysfs)"), evidence

    try:
        units = sorted(os.listdir(host_path(root, "sys/class/iommu")))
    except FileNotFoundError:
        units = []
    except OSError as exc:
        return NotAvailable(f"cannot read /sys/class/iommu: {exc.strerror}"), evidence
    evidence.append(f"/sys/class/iommu: {', '.join(units) if units else 'empty (no IOMMU registered)'}")

    try:
        groups = sorted(os.listdir(host_path(root, "sys/kernel/iommu_groups")), key=_num_key)
    except FileNotFoundError:
        groups = []
    except OSError as exc:
        return NotAvailable(f"cannot read /sys/kernel/iommu_groups: {exc.strerror}"), evidence

    if not units and not groups:
        evidence.append("/sys/kernel/iommu_groups: none")
        return "off", evidence

    # The GPUs' own groups decide; all groups when the GPUs' cannot be found.
    gpu_groups = _gpu_group_types(root, gpu_bus_ids)
    types = [t for _, _, t in gpu_groups if t]
    by_type: Dict[str, List[str]] = {}
    for _, group, typ in gpu_groups:
        by_type.setdefault(typ or "unknown (no type file)", []).append(group)
    for typ, nums in by_type.items():
        shown = ", ".join(nums[:16]) + (", ..." if len(nums) > 16 else "")
        evidence.append(f"iommu groups of {len(nums)} GPU(s): type {typ} (groups {shown})")
    if not types:
        all_types = [t for t in (read_host_file(root, f"sys/kernel/iommu_groups/{g}/type") for g in groups) if t]
        if all_types:
            counts = {t: all_types.count(t) for t in sorted(set(all_types))}
            evidence.append("iommu group types: " + ", ".join(f"{t} x{c}" for t, c in counts.items()))
            types = all_types
    if types:
        if any(t in _TRANSLATED_TYPES for t in types):
            return "translated", evidence
        if all(t == "identity" for t in types):
            return "passthrough", evidence
    if not groups:
        evidence.append("/sys/kernel/iommu_groups: none (IOMMU registered but no device behind it)")
        return "off", evidence
    # Groups exist but no type file (kernel < 5.11): the command line tells.
    from_cmdline = _cmdline_mode(flags)
    if from_cmdline in ("passthrough", "translated"):
        evidence.append(f"iommu groups have no type (kernel < 5.11): {from_cmdline} per kernel cmdline")
        return from_cmdline, evidence
    return NotAvailable(f"IOMMU present ({len(groups)} groups) but its mode cannot be told: no group "
                        "type in sysfs and no iommu=pt / intel_iommu=on on the kernel cmdline"), evidence


def _num_key(name: str):
    return (0, int(name), "") if name.isdigit() else (1, 0, name)
