"""Host facts that decide whether PCIe peer-to-peer DMA works: IOMMU mode and ACS on GPU bridges.

docs/architecture.md's story: P2P across PCIe is silently broken when the IOMMU translates DMA addresses
(peer BARs are not mapped for the peer) or when ACS request/completion redirect on a bridge
between two GPUs forces peer traffic up to the root complex. This reader gathers the evidence a
person needs to see that, from files under ``root`` (``/`` on a real machine, a temporary tree on
a simulated one) and from one ``lspci -vvv`` run:

- IOMMU: ``sys/class/iommu`` (any entry: an IOMMU is registered), the ``type`` of the GPUs' IOMMU
  groups (``DMA``/``DMA-FQ``: translated, ``identity``: passthrough; kernels >= 5.11), else of all
  groups, else the kernel command line (``intel_iommu=on|off``, ``amd_iommu=off``, ``iommu=pt``,
  ``iommu.passthrough=1``). Mode "off" when no IOMMU is registered and no group exists.
  (gputopo.probe.iommu)
- ACS: the bridges above each GPU come from the path of its ``sys/bus/pci/devices/<bdf>`` link
  (``../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:07:00.0``); their
  ACS control bits from the ``ACSCtl:`` lines of ``lspci -vvv -D -s BDF``, one call per bridge:
  a whole-machine ``lspci -vvv`` on a big server can outlast any short timeout and lose the
  bridges that matter. Reading capabilities needs root: lspci prints ``Capabilities: <access
  denied>`` otherwise, and ACS is then NotAvailable.

Commands run through ``run(argv) -> (returncode, stdout, stderr)`` with a 2 s timeout each; the
lspci calls together get 2 s plus LSPCI_S_PER_BRIDGE per bridge, so the budget scales with the
machine. A simulated host passes its own ``run``.

This module is the entry (read_host, read_acs, the command runner); its parts, each importing
only downwards: bus_id (PCI address forms), host_files (files under the root, hostname,
kernel), iommu (the IOMMU mode), pci_bridges (sysfs bridge chains, lspci ACS blocks).
"""

from __future__ import annotations

import subprocess
from typing import Callable, Dict, List, Sequence, Tuple

from gputopo.model.topology import AcsBridge, HostInfo
from gputopo.model.values import NotAvailable
from gputopo.probe.host_facts import read_cpu_vendor
from gputopo.probe.host_files import host_path, read_hostname, read_kernel
from gputopo.probe.iommu import cmdline_iommu_flags, read_iommu
from gputopo.probe.pci_bridges import parse_acs_controls, parse_lspci_blocks, pci_place, upstream_bridges

__all__ = [
    "COMMAND_TIMEOUT_S", "LSPCI_S_PER_BRIDGE", "Runner", "call_runner", "cmdline_iommu_flags",
    "default_run", "parse_acs_controls", "parse_lspci_blocks", "pci_place", "read_acs", "read_host",
    "read_iommu", "upstream_bridges",
]

Runner = Callable[[Sequence[str]], Tuple[int, str, str]]

#: Seconds any host command may take.
COMMAND_TIMEOUT_S = 2.0
#: Seconds added to the lspci budget per bridge queried (on top of COMMAND_TIMEOUT_S).
LSPCI_S_PER_BRIDGE = 0.5


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


def call_runner(run: Runner, argv: Sequence[str]) -> Tuple[int, str, str]:
    """``run`` with the same missing-command/timeout mapping for runners that raise."""
    try:
        return run(argv)
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: timed out"
    except OSError as exc:
        return 126, "", f"{argv[0]}: {exc}"


# ----------------------------------------------------------------------------- ACS


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
        return NotAvailable(f"GPUs not found under {host_path(root, 'sys/bus/pci/devices')}")
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
        rc, out, err = call_runner(run, ["lspci", "-vvv", "-D", "-s", bdf])
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
    return HostInfo(hostname=read_hostname(root), kernel=read_kernel(root), iommu_mode=mode,
                    iommu_evidence=evidence, acs=read_acs(root, run, gpu_bus_ids),
                    cpu_vendor=read_cpu_vendor(root))
