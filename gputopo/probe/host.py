"""Host facts that decide whether PCIe peer-to-peer DMA works: IOMMU mode and ACS on GPU bridges.

DESIGN.md's story: P2P across PCIe is silently broken when the IOMMU translates DMA addresses
(peer BARs are not mapped for the peer) or when ACS request/completion redirect on a bridge
between two GPUs forces peer traffic up to the root complex. This reader gathers the evidence a
person needs to see that, from files under ``root`` (``/`` on a real machine, a temporary tree on
a simulated one) and from one ``lspci -vvv`` run:

- IOMMU: ``sys/class/iommu`` (any entry: an IOMMU is registered), the ``type`` of the GPUs' IOMMU
  groups (``DMA``/``DMA-FQ``: translated, ``identity``: passthrough; kernels >= 5.11), else of all
  groups, else the kernel command line (``intel_iommu=on|off``, ``amd_iommu=off``, ``iommu=pt``,
  ``iommu.passthrough=1``). Mode "off" when no IOMMU is registered and no group exists.
- ACS: the bridges above each GPU come from the path of its ``sys/bus/pci/devices/<bdf>`` link
  (``../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:07:00.0``); their
  ACS control bits from the ``ACSCtl:`` lines of ``lspci -vvv -D -s BDF``, one call per bridge:
  a whole-machine ``lspci -vvv`` on a big server can outlast any short timeout and lose the
  bridges that matter. Reading capabilities needs root: lspci prints ``Capabilities: <access
  denied>`` otherwise, and ACS is then NotAvailable.

Commands run through ``run(argv) -> (returncode, stdout, stderr)`` with a 2 s timeout each; the
lspci calls together get 2 s plus LSPCI_S_PER_BRIDGE per bridge, so the budget scales with the
machine. A simulated host passes its own ``run``.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from gputopo.model.topology import AcsBridge, HostInfo
from gputopo.model.values import NotAvailable
from gputopo.probe.host_facts import read_cpu_vendor

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]

#: Seconds any host command may take.
COMMAND_TIMEOUT_S = 2.0
#: Seconds added to the lspci budget per bridge queried (on top of COMMAND_TIMEOUT_S).
LSPCI_S_PER_BRIDGE = 0.5

_BDF_RE = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
_HOST_BRIDGE_RE = re.compile(r"^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$")
_LSPCI_HEAD_RE = re.compile(r"^([0-9a-fA-F]{4,8}:)?([0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s")
_TRANSLATED_TYPES = ("DMA", "DMA-FQ")


# ----------------------------------------------------------------------------- PCI addresses


def bus_key(bus_id: str) -> str:
    """Canonical PCI address, sysfs/lspci form: ``"00000000:07:00.0"`` -> ``"0000:07:00.0"``.

    NVML writes an 8-digit domain in upper case, lspci and sysfs a 4-digit one in lower case;
    compare addresses only through this. Raises ValueError for text that is not an address.
    """
    text = str(bus_id).strip()
    m = _BDF_RE.match(text)
    if not m:
        m2 = re.match(r"^([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$", text)
        if not m2:
            raise ValueError(f"not a PCI address: {bus_id!r}")
        return f"0000:{m2.group(1).lower()}:{m2.group(2).lower()}.{m2.group(3)}"
    domain = int(m.group(1), 16)
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def try_bus_key(bus_id) -> Optional[str]:
    """:func:`bus_key`, or None when ``bus_id`` is not an address (e.g. a NotAvailable)."""
    if not isinstance(bus_id, str):
        return None
    try:
        return bus_key(bus_id)
    except ValueError:
        return None


# ----------------------------------------------------------------------------- commands


def default_run(argv: Sequence[str]) -> Tuple[int, str, str]:
    """Run a command with COMMAND_TIMEOUT_S; 127 when missing, 124 on timeout (like coreutils)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                              errors="replace")
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return 124, out, f"{argv[0]}: timed out after {COMMAND_TIMEOUT_S:g} s"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc}"
    return proc.returncode, proc.stdout, proc.stderr


def _call(run: Runner, argv: Sequence[str]) -> Tuple[int, str, str]:
    """``run`` with the same missing-command/timeout mapping for runners that raise."""
    try:
        return run(argv)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc}"


# ----------------------------------------------------------------------------- files


def _path(root: str, rel: str) -> str:
    return os.path.join(root, rel.lstrip("/"))


def _read(root: str, rel: str) -> Optional[str]:
    try:
        with open(_path(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _hostname(root: str):
    for rel in ("proc/sys/kernel/hostname", "etc/hostname"):
        text = _read(root, rel)
        if text:
            return text.splitlines()[0].strip()
    if os.path.abspath(root) == "/":
        import socket

        return socket.gethostname()
    return NotAvailable(f"no hostname under {root} (proc/sys/kernel/hostname, etc/hostname)")


def _kernel(root: str):
    text = _read(root, "proc/sys/kernel/osrelease")
    if text:
        return text
    if os.path.abspath(root) == "/":
        return os.uname().release
    return NotAvailable(f"cannot read {_path(root, 'proc/sys/kernel/osrelease')}")


# ----------------------------------------------------------------------------- IOMMU


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
        link = _path(root, f"sys/bus/pci/devices/{key}/iommu_group")
        try:
            group = os.path.basename(os.readlink(link).rstrip("/"))
        except OSError:
            continue
        out.append((bus, group, _read(root, f"sys/kernel/iommu_groups/{group}/type")))
    return out


def read_iommu(root: str = "/", gpu_bus_ids: Sequence[str] = ()) -> Tuple[object, List[str]]:
    """IOMMU mode ("translated" | "passthrough" | "off" | NotAvailable) and the evidence for it."""
    evidence: List[str] = []
    cmdline = _read(root, "proc/cmdline")
    flags = cmdline_iommu_flags(cmdline) if cmdline is not None else {}
    if cmdline is not None:
        shown = " ".join(f"{k}={v}" if v else k for k, v in flags.items())
        evidence.append(f"kernel cmdline: {shown or 'no IOMMU parameters'}")

    if not os.path.isdir(_path(root, "sys")):
        return NotAvailable(f"cannot read {_path(root, 'sys')} (no sysfs)"), evidence

    try:
        units = sorted(os.listdir(_path(root, "sys/class/iommu")))
    except FileNotFoundError:
        units = []
    except OSError as exc:
        return NotAvailable(f"cannot read /sys/class/iommu: {exc.strerror}"), evidence
    evidence.append(f"/sys/class/iommu: {', '.join(units) if units else 'empty (no IOMMU registered)'}")

    try:
        groups = sorted(os.listdir(_path(root, "sys/kernel/iommu_groups")), key=_num_key)
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
        all_types = [t for t in (_read(root, f"sys/kernel/iommu_groups/{g}/type") for g in groups) if t]
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


# ----------------------------------------------------------------------------- ACS


def upstream_bridges(root: str, gpu_bus_id: str) -> Optional[List[str]]:
    """PCI addresses of the bridges above a GPU, root port first; None when the GPU is not in sysfs.

    Read from the target of ``sys/bus/pci/devices/<bdf>``, whose path under ``sys/devices`` is
    the chain of bridges down to the device.
    """
    place = pci_place(root, gpu_bus_id)
    return None if place is None else place[1]


def pci_place(root: str, bus_id: str) -> Optional[Tuple[Optional[str], List[str]]]:
    """Where a PCI device sits: its host bridge (``"pci0000:17"``; None when sysfs does not say)
    and the bridges above it, root port first. None when the device is not in sysfs."""
    key = try_bus_key(bus_id)
    if key is None:
        return None
    link = _path(root, f"sys/bus/pci/devices/{key}")
    try:
        target = os.readlink(link)
    except OSError:
        if os.path.isdir(link):  # a plain directory (unusual): no chain to read
            return None, []
        return None
    chain, host_bridge = [], None
    for part in target.replace("\\", "/").split("/"):
        if _BDF_RE.match(part):
            chain.append(bus_key(part))
        elif _HOST_BRIDGE_RE.match(part):
            host_bridge = part.lower()
    if chain and chain[-1] == key:
        chain.pop()
    return host_bridge, chain


def parse_lspci_blocks(text: str) -> Dict[str, str]:
    """``lspci -vvv`` output split per device: {"0000:07:00.0": block text}."""
    blocks: Dict[str, List[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            m = _LSPCI_HEAD_RE.match(line)
            if m:
                current = bus_key((m.group(1) or "0000:") + m.group(2))
                blocks[current] = [line]
                continue
        if current is not None:
            blocks[current].append(line)
    return {k: "\n".join(v) for k, v in blocks.items()}


def parse_acs_controls(block: str) -> Optional[Dict[str, bool]]:
    """The ``ACSCtl:`` bits of one device's lspci block, or None when it has no ACS capability."""
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("ACSCtl:"):
            controls = {}
            for tok in line[len("ACSCtl:"):].split():
                if tok.endswith(("+", "-")):
                    controls[tok[:-1]] = tok.endswith("+")
            return controls
    return None


def read_acs(root: str = "/", run: Runner = default_run, gpu_bus_ids: Sequence[str] = ()):
    """ACS control bits of the bridges above the GPUs: List[AcsBridge] or NotAvailable(reason)."""
    if not gpu_bus_ids:
        return NotAvailable("no GPUs to look upstream of")
    below: Dict[str, List[str]] = {}  # bridge -> GPU bus ids below it (as given)
    found = 0
    for bus in gpu_bus_ids:
        chain = upstream_bridges(root, bus)
        if chain is None:
            continue
        found += 1
        for bridge in chain:
            below.setdefault(bridge, []).append(bus)
    if not found:
        return NotAvailable(f"GPUs not found under {_path(root, 'sys/bus/pci/devices')}")
    if not below:
        return []

    blocks = _lspci_bridges(run, sorted(below))
    if isinstance(blocks, NotAvailable):
        return blocks
    bridges = []
    denied = no_caps = 0
    for bdf in sorted(below):
        block = blocks.get(bdf)
        if block is None:
            continue
        if "<access denied>" in block:
            denied += 1
            continue
        if "Capabilities:" not in block:
            no_caps += 1
            continue
        controls = parse_acs_controls(block)
        bridges.append(AcsBridge(bdf=bdf, gpus=list(below[bdf]), controls=controls or {}))
    if denied or (no_caps and not bridges):
        return NotAvailable("lspci needs root to read ACS control bits of the GPUs' bridges "
                            "(it printed 'Capabilities: <access denied>' or no capabilities); "
                            "run gputopo scan as root")
    if not bridges:
        return NotAvailable("lspci did not list the bridges above the GPUs")
    return bridges


def _lspci_bridges(run: Runner, bdfs: Sequence[str]):
    """{bdf: lspci -vvv block} of each bridge, asked one by one (``lspci -vvv -D -s BDF``)
    within a budget that grows with the number of bridges; NotAvailable when lspci is missing
    or no call gave anything."""
    import time

    deadline = time.monotonic() + COMMAND_TIMEOUT_S + LSPCI_S_PER_BRIDGE * len(bdfs)
    blocks: Dict[str, str] = {}
    last_error = ""
    for bdf in bdfs:
        if time.monotonic() > deadline:
            last_error = f"out of time after {len(blocks)} of {len(bdfs)} bridges"
            break
        rc, out, err = _call(run, ["lspci", "-vvv", "-D", "-s", bdf])
        if rc == 127:
            return NotAvailable("lspci not installed (package pciutils); it is needed to read "
                                "ACS control bits, as root")
        if rc != 0 and not out:
            last_error = f"exit {rc}: {(err or '').strip()[:200]}"
            continue
        block = parse_lspci_blocks(out).get(bdf)
        if block is not None:
            blocks[bdf] = block
    if not blocks and last_error:
        return NotAvailable(f"lspci failed ({last_error})")
    return blocks


# ----------------------------------------------------------------------------- all of it


def read_host(root: str = "/", run: Runner = default_run, gpu_bus_ids: Sequence[str] = ()) -> HostInfo:
    """Hostname, kernel, IOMMU mode with evidence, and ACS bridges above ``gpu_bus_ids``.

    ``gpu_bus_ids`` are the GPUs' PCI addresses in any form (NVML's ``00000000:07:00.0`` or
    lspci's ``0000:07:00.0``); AcsBridge.gpus keeps them as given. Driver/NVML/CUDA versions are
    left for the NVML reader. Never raises for missing files or commands: fields become
    NotAvailable(reason).
    """
    gpu_bus_ids = [b for b in gpu_bus_ids if isinstance(b, str)]
    mode, evidence = read_iommu(root, gpu_bus_ids)
    return HostInfo(hostname=_hostname(root), kernel=_kernel(root), iommu_mode=mode,
                    iommu_evidence=evidence, acs=read_acs(root, run, gpu_bus_ids),
                    cpu_vendor=read_cpu_vendor(root))
