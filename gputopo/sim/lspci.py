"""``lspci`` as it answers on a simulated host: the GPUs, the bridges above them, NVSwitches.

The text follows pciutils' layout (``lspci -vvv`` as root): one block per device, a header line
``1b:00.0 VGA compatible controller: NVIDIA Corporation GA102GL [RTX A6000] (rev a1)``, then
tab-indented fields. What a host reader needs is where it is on a real machine:

- ``LnkCap:``/``LnkSta:`` with ``Speed 16GT/s (ok), Width x16 (ok)`` or ``(downgraded)``;
- on root ports and switch downstream ports an ACS capability block::

      Capabilities: [148 v1] Access Control Services
          ACSCap: SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
          ACSCtl: SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-

  (ReqRedir+/CmpltRedir+ on the bridges the description lists in ``acs_redirect``);
- without root, capabilities read ``Capabilities: <access denied>``, as pciutils prints them;
- ``IOMMU group: N`` only when an IOMMU is on; ``NUMA node: N``;
- the domain is printed (``0000:1b:00.0``) only with ``-D`` or when devices sit in more than one
  PCI domain, as lspci does; NVML's 8-digit form never appears here.

Supported options: ``-v``/``-vv``/``-vvv``, ``-D``, ``-n``/``-nn``, ``-k``, ``-s [[dom:]bus:]slot[.fn]``,
``-d [vendor]:[device]``. Anything else exits 1 with pciutils' message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from gputopo.model.bus_id import PciAddress

from .nics import NIC_PCI_IDS
from .pcie_tree import ROOT_PORT, SWITCH_DOWN, SWITCH_UP

_SPEED = {1: "2.5GT/s", 2: "5GT/s", 3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}
SYSFS_SPEED = {1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe",
               5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}
_VENDORS = {0x10DE: "NVIDIA Corporation", 0x8086: "Intel Corporation", 0x1022: "Advanced Micro Devices, Inc. [AMD]",
            0x1000: "Broadcom / LSI", 0x10B5: "PLX Technology, Inc.", 0x15B3: "Mellanox Technologies"}
_ACS_BITS = ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir", "UpstreamFwd", "EgressCtrl", "DirectTrans")
_ACS_REDIRECT_ON = {"SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"}


@dataclass
class PciDevice:
    """One device lspci lists, with what its block shows."""

    addr: PciAddress
    class_code: int  # 0x0300, 0x0302, 0x0604, 0x0680, 0x0600
    class_name: str
    vendor_id: int
    device_id: int
    name: str  # after the vendor name, e.g. "GA102GL [RTX A6000] (rev a1)"
    kind: str  # "gpu" | "nic" | root_port | switch_upstream | switch_downstream | "nvswitch" | "host"
    numa_node: Optional[int] = None
    iommu_group: Optional[int] = None
    link_gen: int = 4
    link_width: int = 16
    link_gen_max: int = 4
    link_width_max: int = 16
    primary: int = 0
    secondary: int = 0
    subordinate: int = 0
    acs_ctl: Dict[str, bool] = field(default_factory=dict)
    driver: Optional[str] = None
    modules: Optional[str] = None
    gpu_index: Optional[int] = None


def pci_devices(desc, iommu_groups: Optional[Dict[str, int]] = None) -> List[PciDevice]:
    """Every PCI device the simulated host shows, sorted by address.

    ``iommu_groups`` maps lspci -D addresses to group numbers (None: no IOMMU).
    """
    tree = desc.pcie_tree
    groups = iommu_groups or {}
    redirect = set(desc.host.acs_redirect_bridges)
    devices: List[PciDevice] = []
    for b in tree.bridges:
        acs = {}
        if b.acs_capable:
            on = b.bdf in redirect
            acs = {bit: (on and bit in _ACS_REDIRECT_ON) for bit in _ACS_BITS}
        vendor_name = _VENDORS.get(b.vendor_id, "")
        name = b.lspci_name[len(vendor_name) + 1:] if b.lspci_name.startswith(vendor_name) else b.lspci_name
        devices.append(PciDevice(
            addr=b.addr, class_code=0x0604, class_name="PCI bridge", vendor_id=b.vendor_id,
            device_id=b.device_id, name=name, kind=b.role, numa_node=b.numa_node,
            iommu_group=groups.get(b.bdf), link_gen=b.pcie_gen, link_width=16, link_gen_max=b.pcie_gen,
            link_width_max=16, primary=b.addr.bus, secondary=b.secondary, subordinate=b.subordinate,
            acs_ctl=acs, driver="pcieport", modules=None))
    for g in desc.gpus:
        model = g.sim_model
        addr = g.address
        devices.append(PciDevice(
            addr=addr, class_code=model.pci_class, class_name=model.lspci_class, vendor_id=0x10DE,
            device_id=model.pci_device_id, name=f"{model.lspci_name} (rev a1)", kind="gpu",
            numa_node=g.numa_node, iommu_group=groups.get(addr.lspci), link_gen=g.pcie_gen,
            link_width=g.pcie_width, link_gen_max=g.pcie_gen_max, link_width_max=g.pcie_width_max,
            driver="nvidia", modules="nvidiafb, nouveau, nvidia_drm, nvidia", gpu_index=g.index))
    for nic in desc.nics:
        vendor, device, code, class_name, name = NIC_PCI_IDS
        devices.append(PciDevice(
            addr=nic.address, class_code=code, class_name=class_name, vendor_id=vendor,
            device_id=device, name=name, kind="nic", numa_node=nic.numa_node,
            iommu_group=groups.get(nic.lspci_bdf),
            link_gen=nic.pcie_gen if nic.pcie_gen_now is None else nic.pcie_gen_now,
            link_width=nic.pcie_width if nic.pcie_width_now is None else nic.pcie_width_now,
            link_gen_max=nic.pcie_gen, link_width_max=nic.pcie_width, driver="mlx5_core", modules="mlx5_core"))
    taken = {d.addr for d in devices}
    for sw in desc.nvswitch_bus_ids:
        addr = PciAddress.parse(sw)
        if addr in taken:
            continue
        devices.append(PciDevice(addr=addr, class_code=0x0680, class_name="Bridge", vendor_id=0x10DE,
                                 device_id=0x1AF1, name="Device 1af1 (rev a1)", kind="nvswitch",
                                 iommu_group=groups.get(addr.lspci), driver="nvidia-nvswitch",
                                 modules="nvidia"))
        taken.add(addr)
    for host_bridge in sorted({b.host_bridge for b in tree.bridges}):
        dom, bus = host_bridge[3:].split(":")
        addr = PciAddress(int(dom, 16), int(bus, 16), 0, 0)
        if addr in taken:
            continue
        if desc.host.cpu_vendor == "amd":
            vendor, dev, name = 0x1022, 0x1480, "Starship/Matisse Root Complex"
        else:
            vendor, dev, name = 0x8086, 0x09A2, "Device 09a2 (rev 04)"
        devices.append(PciDevice(addr=addr, class_code=0x0600, class_name="Host bridge", vendor_id=vendor,
                                 device_id=dev, name=name, kind="host", iommu_group=groups.get(addr.lspci)))
        taken.add(addr)
    devices.sort(key=lambda d: d.addr)
    return devices


# --------------------------------------------------------------------------- rendering


def _flags(bits: Dict[str, bool]) -> str:
    return " ".join(f"{b}{'+' if bits.get(b) else '-'}" for b in _ACS_BITS)


def _lnk(dev: PciDevice, port: int) -> List[str]:
    cap_speed, sta_speed = _SPEED.get(dev.link_gen_max, "?"), _SPEED.get(dev.link_gen, "?")
    speed_tag = "(ok)" if dev.link_gen >= dev.link_gen_max else "(downgraded)"
    width_tag = "(ok)" if dev.link_width >= dev.link_width_max else "(downgraded)"
    return [
        f"\t\tLnkCap:\tPort #{port}, Speed {cap_speed}, Width x{dev.link_width_max}, ASPM L0s L1, "
        "Exit Latency L0s <1us, L1 <4us",
        "\t\t\tClockPM+ Surprise- LLActRep- BwNot- ASPMOptComp+",
        "\t\tLnkCtl:\tASPM Disabled; RCB 64 bytes, Disabled- CommClk+",
        "\t\t\tExtSynch- ClockPM+ AutWidDis- BWInt- AutBWInt-",
        f"\t\tLnkSta:\tSpeed {sta_speed} {speed_tag}, Width x{dev.link_width} {width_tag}",
        "\t\t\tTrErr- Train- SlotClk+ DLActive+ BWMgmt- ABWMgmt-",
    ]


def _block(dev: PciDevice, verbosity: int, as_root: bool, show_domain: bool, numeric: int,
           kernel: bool) -> str:
    addr = dev.addr.lspci if show_domain else dev.addr.short
    vendor = _VENDORS.get(dev.vendor_id, f"Device {dev.vendor_id:04x}")
    ids = f"{dev.vendor_id:04x}:{dev.device_id:04x}"
    rev = ""
    name = dev.name
    if name.endswith(")") and "(rev " in name:
        name, rev = name[: name.rindex(" (rev ")], name[name.rindex(" (rev "):]
    if numeric == 1:
        head = f"{addr} {dev.class_code:04x}: {ids}{rev}"
    elif numeric >= 2:
        head = f"{addr} {dev.class_name} [{dev.class_code:04x}]: {vendor} {name} [{ids}]{rev}"
    else:
        head = f"{addr} {dev.class_name}: {vendor} {name}{rev}"
    if dev.class_code == 0x0300 and verbosity:
        head += " (prog-if 00 [VGA controller])"
    elif dev.class_code == 0x0604 and verbosity:
        head += " (prog-if 00 [Normal decode])"
    lines = [head]
    if verbosity == 0:
        if kernel and dev.driver:
            lines.append(f"\tKernel driver in use: {dev.driver}")
            if dev.modules:
                lines.append(f"\tKernel modules: {dev.modules}")
        return "\n".join(lines)
    if dev.kind == "gpu":
        lines.append(f"\tSubsystem: {vendor} {name}")
    if verbosity >= 2:
        lines.append("\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- "
                     "SERR- FastB2B- DisINTx+")
        lines.append("\tStatus: Cap+ 66MHz- UDF- FastB2B- ParErr- DEVSEL=fast >TAbort- <TAbort- "
                     "<MAbort- >SERR- <PERR- INTx-")
        lines.append("\tLatency: 0" + (", Cache Line Size: 32 bytes" if dev.class_code == 0x0604 else ""))
    else:
        lines.append("\tFlags: bus master, fast devsel, latency 0, IRQ 16" + (
            f", NUMA node {dev.numa_node}" if dev.numa_node is not None else "") + (
            f", IOMMU group {dev.iommu_group}" if dev.iommu_group is not None else ""))
    if verbosity >= 2 and dev.numa_node is not None:
        lines.append(f"\tNUMA node: {dev.numa_node}")
    if verbosity >= 2 and dev.iommu_group is not None:
        lines.append(f"\tIOMMU group: {dev.iommu_group}")
    if dev.class_code == 0x0604:
        lines.append(f"\tBus: primary={dev.primary:02x}, secondary={dev.secondary:02x}, "
                     f"subordinate={dev.subordinate:02x}, sec-latency=0")
    if dev.kind == "gpu":
        lines.append(f"\tRegion 0: Memory at {0xb0000000 + (dev.addr.bus << 20):x} (32-bit, non-prefetchable) [size=16M]")
        lines.append(f"\tRegion 1: Memory at {0x38000000000 + (dev.addr.bus << 32):x} (64-bit, prefetchable) [size=64G]")
    if not as_root:
        lines.append("\tCapabilities: <access denied>")
    else:
        lines += _capabilities(dev, verbosity)
    if dev.driver:
        lines.append(f"\tKernel driver in use: {dev.driver}")
    if dev.modules:
        lines.append(f"\tKernel modules: {dev.modules}")
    return "\n".join(lines)


def _capabilities(dev: PciDevice, verbosity: int) -> List[str]:
    detail = verbosity >= 2
    out = []
    if dev.kind == "host":
        return ["\tCapabilities: [90] Express (v2) Root Complex Integrated Endpoint, MSI 00"]
    out.append("\tCapabilities: [60] Power Management version 3")
    if detail:
        out.append("\t\tFlags: PMEClk- DSI- D1- D2- AuxCurrent=0mA PME(D0-,D1-,D2-,D3hot-,D3cold-)")
        out.append("\t\tStatus: D0 NoSoftRst+ PME-Enable- DSel=0 DScale=0 PME-")
    port_type = {
        "gpu": "Legacy Endpoint", "nvswitch": "Endpoint", "nic": "Endpoint", ROOT_PORT: "Root Port (Slot+)",
        SWITCH_UP: "Upstream Port", SWITCH_DOWN: "Downstream Port (Slot-)",
    }[dev.kind]
    out.append(f"\tCapabilities: [78] Express (v2) {port_type}, MSI 00")
    if detail:
        out.append("\t\tDevCap:\tMaxPayload 256 bytes, PhantFunc 0, Latency L0s unlimited, L1 <64us")
        out.append("\t\t\tExtTag+ AttnBtn- AttnInd- PwrInd- RBE+ FLReset+")
        out.append("\t\tDevCtl:\tCorrErr- NonFatalErr- FatalErr- UnsupReq-")
        out.append("\t\t\tRlxdOrd+ ExtTag+ PhantFunc- AuxPwr- NoSnoop+ FLReset-")
        out.append("\t\t\tMaxPayload 256 bytes, MaxReadReq 512 bytes")
        out.append("\t\tDevSta:\tCorrErr- NonFatalErr- FatalErr- UnsupReq- AuxPwr- TransPend-")
        port = dev.addr.device if dev.kind in (ROOT_PORT, SWITCH_DOWN) else 0
        out += _lnk(dev, port)
    out.append("\tCapabilities: [100 v1] Virtual Channel")
    if detail:
        out.append("\t\tCaps:\tLPEVC=0 RefClk=100ns PATEntryBits=1")
    out.append("\tCapabilities: [420 v2] Advanced Error Reporting")
    if detail:
        out.append("\t\tUESta:\tDLP- SDES- TLP- FCP- CmpltTO- CmpltAbrt- UnxCmplt- RxOF- MalfTLP- ECRC- "
                   "UnsupReq- ACSViol-")
        out.append("\t\tCESta:\tRxErr- BadTLP- BadDLLP- Rollover- Timeout- AdvNonFatalErr-")
    if dev.acs_ctl:
        out.append("\tCapabilities: [148 v1] Access Control Services")
        if detail:
            cap = {b: b not in ("EgressCtrl", "DirectTrans") or dev.kind == SWITCH_DOWN for b in _ACS_BITS}
            out.append(f"\t\tACSCap:\t{_flags(cap)}")
            out.append(f"\t\tACSCtl:\t{_flags(dev.acs_ctl)}")
    if dev.kind == "gpu":
        out.append("\tCapabilities: [900 v1] Secondary PCI Express")
        out.append("\tCapabilities: [bb0 v1] Physical Resizable BAR")
        if detail:
            out.append("\t\tBAR 0: current size: 16MB, supported: 16MB")
    return out


def _parse_selector(text: str) -> Optional[Tuple[Optional[int], Optional[int], Optional[int], Optional[int]]]:
    """lspci -s: ``[[[[<domain>]:]<bus>]:][<slot>][.[<func>]]``; None when malformed."""
    func = None
    if "." in text:
        text, _, f = text.partition(".")
        if f:
            try:
                func = int(f, 16)
            except ValueError:
                return None
    parts = text.split(":")
    if len(parts) > 3:
        return None
    padded: List[Optional[str]] = [None] * (3 - len(parts)) + list(parts)
    try:
        dom, bus, slot = (int(p, 16) if p else None for p in padded)
    except ValueError:
        return None
    return dom, bus, slot, func


def run_lspci(desc, args: Sequence[str], as_root: bool = True,
              iommu_groups: Optional[Dict[str, int]] = None,
              devices: Optional[List[PciDevice]] = None) -> Tuple[int, str, str]:
    """Answer ``lspci ARGS`` for a simulated host: (returncode, stdout, stderr). ``devices``:
    the host's ``pci_devices`` when the caller keeps them (a scan asks once per bridge, and
    building them is O(devices))."""
    verbosity = numeric = 0
    show_domain = kernel = False
    selector = vendor_filter = None
    it = iter(args)
    for arg in it:
        if arg in ("-s", "-d"):
            value = next(it, None)
            if value is None:
                return 1, "", f"lspci: option requires an argument -- '{arg[1]}'\n"
            if arg == "-s":
                selector = _parse_selector(value)
                if selector is None:
                    return 1, "", "lspci: -s: Invalid slot number\n"
            else:
                vendor_filter = value
            continue
        if arg.startswith("-") and len(arg) > 1 and not arg.startswith("--"):
            for ch in arg[1:]:
                if ch == "v":
                    verbosity += 1
                elif ch == "n":
                    numeric += 1
                elif ch == "D":
                    show_domain = True
                elif ch == "k":
                    kernel = True
                else:
                    return 1, "", f"lspci: invalid option -- '{ch}'\nFor help, type `lspci --help'.\n"
            continue
        return 1, "", f"lspci: Unexpected argument '{arg}'\nFor help, type `lspci --help'.\n"
    if devices is None:
        devices = pci_devices(desc, iommu_groups)
    if len({d.addr.domain for d in devices}) > 1:
        show_domain = True
    if selector is not None:
        dom, bus, slot, func = selector
        devices = [d for d in devices
                   if (dom is None or d.addr.domain == dom) and (bus is None or d.addr.bus == bus)
                   and (slot is None or d.addr.device == slot) and (func is None or d.addr.function == func)]
    if vendor_filter is not None:
        v, _, dv = vendor_filter.partition(":")
        try:
            vid = int(v, 16) if v else None
            did = int(dv.split(":")[0], 16) if dv.split(":")[0] else None
        except ValueError:
            return 1, "", "lspci: -d: Invalid vendor ID\n"
        devices = [d for d in devices if (vid is None or d.vendor_id == vid) and (did is None or d.device_id == did)]
    blocks = [_block(d, verbosity, as_root, show_domain, numeric, kernel) for d in devices]
    if not blocks:
        return 0, "", ""
    sep = "\n\n" if verbosity else "\n"
    return 0, sep.join(blocks) + ("\n\n" if verbosity else "\n"), ""
