"""The host side of a machine description: ``[host]`` (IOMMU, ACS redirect, driver and kernel
facts), the ``[link_model]`` overrides of the healthy path models and the ``[p2p]`` status rules.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

from gputopo.model.linkclass import PCIE_KINDS
from gputopo.model.topology import P2P_CAPS

from .description_context import DescContext, check_int, check_keys, check_label, check_num, check_str
from .description_pairs import parse_class, parse_pair_ref
from .records import PAIR_KEY_RE
from .pci import PciAddress
from .records import CPU_VENDORS, DEFAULT_EFFICIENCY, IOMMU_MODES, P2P_STATUSES, HostDesc, MachineDesc

HOST_KEYS = {"iommu", "acs_redirect", "driver_version", "nvml_version", "cuda_driver_version",
             "hostname", "kernel", "cmdline", "cpu_vendor", "iommu_group_type"}


def build_host(ctx: DescContext, raw: Dict[str, Any], machine: str) -> HostDesc:
    """The host facts of [host] (``raw``), with defaults that match its IOMMU mode and CPU vendor."""
    iommu = raw.get("iommu", "off")
    if iommu not in IOMMU_MODES:
        raise ctx.error(f"expected one of {', '.join(IOMMU_MODES)}, got {iommu!r}", "host", "iommu")
    vendor = raw.get("cpu_vendor", "intel")
    if vendor not in CPU_VENDORS:
        raise ctx.error(f"expected one of {', '.join(CPU_VENDORS)}, got {vendor!r}", "host", "cpu_vendor")
    group_types = {"translated": ("DMA", "DMA-FQ"), "passthrough": ("identity",), "off": ()}[iommu]
    gtype = raw.get("iommu_group_type", group_types[0] if group_types else None)
    if gtype not in group_types and not (gtype is None and not group_types):
        allowed = ", ".join(group_types) if group_types else "nothing (no IOMMU groups when iommu = \"off\")"
        raise ctx.error(f"with iommu = {iommu!r} the group type is {allowed}; got {gtype!r}",
                        "host", "iommu_group_type")
    driver = check_label(ctx, raw.get("driver_version", "535.154.05"), "host", "driver_version")
    cuda = raw.get("cuda_driver_version", 12020)
    if isinstance(cuda, str):
        m = re.match(r"^(\d+)\.(\d+)$", cuda.strip())
        if not m:
            raise ctx.error(f"expected e.g. 12040 or \"12.4\", got {cuda!r}", "host", "cuda_driver_version")
        cuda = int(m.group(1)) * 1000 + int(m.group(2)) * 10
    cuda = check_int(ctx, cuda, 1000, 99990, "host", "cuda_driver_version")
    nvml = check_label(ctx, raw.get("nvml_version", f"{cuda // 1000}.{driver}"), "host", "nvml_version")
    kernel = check_label(ctx, raw.get("kernel", "5.15.0-91-generic"), "host", "kernel")
    if "cmdline" in raw:
        cmdline = check_label(ctx, raw["cmdline"], "host", "cmdline")
    else:
        flags = {
            ("intel", "translated"): "intel_iommu=on", ("intel", "passthrough"): "intel_iommu=on iommu=pt",
            ("intel", "off"): "", ("amd", "translated"): "amd_iommu=on", ("amd", "passthrough"): "iommu=pt",
            ("amd", "off"): "amd_iommu=off",
        }[(vendor, iommu)]
        cmdline = f"BOOT_IMAGE=/boot/vmlinuz-{kernel} root=/dev/mapper/vg0-root ro quiet splash"
        cmdline += f" {flags}" if flags else ""
    return HostDesc(iommu=iommu, acs_redirect_bridges=[], driver_version=driver, nvml_version=nvml,
                    cuda_driver_version=cuda,
                    hostname=check_label(ctx, raw.get("hostname", f"sim-{machine}"), "host", "hostname"),
                    kernel=kernel, cmdline=cmdline, cpu_vendor=vendor, iommu_group_type=gtype)


def acs_redirect_bridges(ctx: DescContext, raw: Dict[str, Any], desc: MachineDesc) -> List[str]:
    """The bridges (lspci form) with ACS redirect on: ``acs_redirect = true`` is every ACS-capable
    bridge of the machine's PCIe tree, a list names some of them, false (the default) none."""
    acs = raw.get("acs_redirect", False)
    if acs is True:
        return [b.bdf for b in desc.pcie_tree.bridges if b.acs_capable]
    if isinstance(acs, list):
        known = desc.pcie_tree.by_bdf
        out = []
        for bdf in acs:
            try:
                key = PciAddress.parse(check_str(ctx, bdf, "host", "acs_redirect")).lspci
            except ValueError as exc:
                raise ctx.error(str(exc), "host", "acs_redirect") from None
            if key not in known or not known[key].acs_capable:
                names = ", ".join(b.bdf for b in desc.pcie_tree.bridges if b.acs_capable)
                raise ctx.error(f"{bdf!r} is not an ACS-capable bridge above the GPUs; they are: {names}",
                                "host", "acs_redirect")
            out.append(key)
        return out
    if acs is not False:
        raise ctx.error("expected true, false or a list of bridge addresses", "host", "acs_redirect")
    return []


def parse_link_model(ctx: DescContext, table: Any) -> Tuple[float, Dict[str, Dict[str, float]]]:
    """(efficiency, per-class/host/device overrides) of [link_model]."""
    if not isinstance(table, dict):
        raise ctx.error("expected a table", "link_model")
    eff = DEFAULT_EFFICIENCY
    rules: Dict[str, Dict[str, float]] = {}
    for key, value in table.items():
        if key == "efficiency":
            eff = check_num(ctx, value, "link_model", key)
            if eff > 1:
                raise ctx.error(f"efficiency is a fraction of the theoretical rate (0..1], got {value!r}",
                                "link_model", key)
            continue
        if key in ("host", "device") or key in PCIE_KINDS:
            allowed = {"gbps", "latency_us"}
        elif key == "NV":
            allowed = {"gbps_per_link", "latency_us"}
        elif re.match(r"^NV\d+$", key):
            allowed = {"gbps", "latency_us"}
        else:
            raise ctx.error(f"unknown key {key!r}; use efficiency, NV (per link), NV<n>, "
                            f"{', '.join(PCIE_KINDS)}, host or device", "link_model", key)
        check_keys(ctx, value, allowed, "link_model", key)
        rules[key] = {k: check_num(ctx, v, "link_model", key, k) for k, v in value.items()}
    return eff, rules


def parse_p2p(ctx: DescContext, table: Any, n: int) -> Dict[str, Dict[str, str]]:
    """The [p2p] rules by "default", "NV", a class or a pair "I,J": capability -> status."""
    if not isinstance(table, dict):
        raise ctx.error("expected a table", "p2p")
    rules: Dict[str, Dict[str, str]] = {}
    for key, value in table.items():
        if key == "default" or key == "NV":
            rule = key
        elif PAIR_KEY_RE.match(key):
            i, j = parse_pair_ref(ctx, key, n, "p2p", key)
            rule = f"{i},{j}"
        else:
            rule = str(parse_class(ctx, key, False, "p2p", key))
        if isinstance(value, str):
            value = {c: value for c in P2P_CAPS}
        check_keys(ctx, value, set(P2P_CAPS), "p2p", key)
        for cap, status in value.items():
            if status not in P2P_STATUSES:
                raise ctx.error(f"unknown P2P status {status!r}; statuses: {', '.join(P2P_STATUSES)}",
                                "p2p", key, cap)
        rules.setdefault(rule, {}).update(value)
    return rules
