"""One RDMA NIC port's facts, whoever read them: the sysfs reader of ``gputopo scan``
(``/sys/class/infiniband/<dev>/ports/<n>/``), a simulated machine, or saved ``ibstat`` /
``ibv_devinfo`` text (``gputopo import ibstat``).

Why: a GPU's traffic to other machines leaves through a NIC port; a port down, trained to a
lower rate, taking errors, or whose adapter's PCIe link trained below its maximum slows every
job that crosses the node. One plain record per port keeps the readers and the checks apart:
readers fill a :class:`NicPort`, ``gputopo/report/network_checks.py`` alone judges it.

Every fact is a value or a typed :class:`~gputopo.model.values.NotAvailable` /
:class:`~gputopo.model.values.Failed` (values.py): a reader that cannot see a fact (``ibstat``
knows nothing of PCIe) says so with a reason, never 0 or "". ``sources`` names where each fact
that was read came from (fact name -> a file path, ``"ibstat"``, ``"sim"``), so a verdict can
point at its evidence.

Names, as the InfiniBand spec and both readers spell them:

- ``state`` (logical): one of :data:`PORT_STATES` values, ``Down`` ... ``Active``. sysfs writes
  ``4: ACTIVE``; ibstat writes ``Active``; both become ``"Active"`` (:func:`port_state`).
- ``phys_state``: one of :data:`PHYS_STATES` values. ``Disabled`` (switched off, by an admin or a
  port policy: may be deliberate) is not ``Polling`` (the port is looking for a peer and finds
  none: a cable, transceiver or peer problem). sysfs ``5: LinkUp``, ibstat ``LinkUp``
  (:func:`phys_state`).
- ``rate_gbps``: the port's data rate in Gb/s as the driver reports it (sysfs ``400 Gb/sec (4X
  NDR)``, ibstat ``Rate: 400``) (:func:`rate_gbps`).
- ``link_layer``: ``"InfiniBand"`` or ``"Ethernet"`` (RoCE).
- ``counters``: the port's cumulative error counters by sysfs name (``symbol_error``,
  ``link_downed``, ``port_rcv_errors``, ``link_error_recovery``, ...: :data:`ERROR_COUNTERS`),
  each an int or NotAvailable. Cumulative since the counter was last cleared: a non-zero count is
  a fact, growth between two scans is the warning.
- ``pcie_*``: the adapter's PCIe link (per PCI function, so the same on every port of one
  device): generation 1..6 and lane count, current and maximum.
- ``ca_type``: the adapter model as the HCA reports it (sysfs ``hca_type``, ibstat ``CA type``:
  ``MT4129`` is a ConnectX-7); ports are compared for rate only against ports of the same model.

Do not rename fields or JSON keys (the ibstat importer and scripts read them); add new ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .values import NotAvailable, field_from_json, field_to_json

#: InfiniBand logical port states by number (IB spec; sysfs ``ports/<n>/state`` writes "4: ACTIVE").
PORT_STATES = {0: "NoChange", 1: "Down", 2: "Initializing", 3: "Armed", 4: "Active", 5: "ActiveDefer"}
#: InfiniBand physical port states by number (sysfs ``ports/<n>/phys_state`` writes "5: LinkUp").
PHYS_STATES = {0: "NoStateChange", 1: "Sleep", 2: "Polling", 3: "Disabled",
               4: "PortConfigurationTraining", 5: "LinkUp", 6: "LinkErrorRecovery", 7: "PhyTest"}
#: Error counters of ``ports/<n>/counters/`` read per port (the IB PortCounters errors).
ERROR_COUNTERS = (
    "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "VL15_dropped",
)

#: The counters that count a bad link (bit errors, retraining, link drops, bad packets received):
#: their growth between scans is a warning (history counter-growth). The others of
#: ERROR_COUNTERS also grow on healthy fabrics (``port_xmit_discards`` under congestion,
#: ``VL15_dropped`` while the port comes up, the constraint errors with partition settings) and
#: are stated only.
LINK_ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
                       "port_rcv_remote_physical_errors", "local_link_integrity_errors",
                       "excessive_buffer_overrun_errors")

#: How the readers' spellings of a logical state map to :data:`PORT_STATES` names.
_STATE_WORDS = {
    "nochange": "NoChange", "nop": "NoChange", "down": "Down", "init": "Initializing",
    "initializing": "Initializing", "initialize": "Initializing", "armed": "Armed", "active": "Active",
    "active_defer": "ActiveDefer", "activedefer": "ActiveDefer",
}
_PHYS_WORDS = {v.lower(): v for v in PHYS_STATES.values()}
_PHYS_WORDS.update({"linkup": "LinkUp", "link_up": "LinkUp", "disabled": "Disabled", "polling": "Polling",
                    "sleep": "Sleep", "linkerrorrecovery": "LinkErrorRecovery",
                    "portconfigurationtraining": "PortConfigurationTraining", "phytest": "PhyTest"})
_NUM_PREFIX_RE = re.compile(r"^\s*(\d+)\s*:\s*(.*)$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:Gb/sec|Gb/s|Gbps)?", re.IGNORECASE)

_NOT_READ = NotAvailable("not read")


def _named(text: str, by_number: Dict[int, str], words: Dict[str, str]) -> Any:
    t = text.strip()
    m = _NUM_PREFIX_RE.match(t)
    if m:
        num = int(m.group(1))
        if num in by_number:
            return by_number[num]
        t = m.group(2).strip()
    key = t.lower().replace(" ", "")
    if key in words:
        return words[key]
    if key.isdigit() and int(key) in by_number:
        return by_number[int(key)]
    return NotAvailable(f"unrecognised state {text.strip()!r}")


def port_state(text: str) -> Any:
    """``"4: ACTIVE"`` / ``"Active"`` / ``"ACTIVE"`` -> ``"Active"``; NotAvailable when unknown."""
    return _named(text, PORT_STATES, _STATE_WORDS)


def phys_state(text: str) -> Any:
    """``"5: LinkUp"`` / ``"LinkUp"`` / ``"3: Disabled"`` -> ``"LinkUp"`` / ``"Disabled"``."""
    return _named(text, PHYS_STATES, _PHYS_WORDS)


def rate_gbps(text: str) -> Any:
    """``"400 Gb/sec (4X NDR)"`` / ``"400"`` -> 400.0 (Gb/s); NotAvailable when there is no number."""
    m = _RATE_RE.match(text)
    if not m:
        return NotAvailable(f"unrecognised rate {text.strip()!r}")
    return float(m.group(1))


@dataclass
class NicPort:
    """One port of one RDMA device (see the module docstring for each field's meaning and unit)."""

    device: str  # RDMA device name: "mlx5_0"
    port: int  # port number, from 1
    state: Any = _NOT_READ  # PORT_STATES value: "Active", "Down", ...
    phys_state: Any = _NOT_READ  # PHYS_STATES value: "LinkUp", "Polling", "Disabled", ...
    rate_gbps: Any = _NOT_READ  # float, Gb/s
    link_layer: Any = _NOT_READ  # "InfiniBand" | "Ethernet"
    counters: Dict[str, Any] = field(default_factory=dict)  # ERROR_COUNTERS name -> int | NotAvailable
    pcie_gen_current: Any = _NOT_READ  # int 1..6
    pcie_gen_max: Any = _NOT_READ
    pcie_width_current: Any = _NOT_READ  # lanes
    pcie_width_max: Any = _NOT_READ
    pci_bus_id: Any = _NOT_READ  # "0000:1c:00.0"
    ca_type: Any = _NOT_READ  # adapter model, e.g. "MT4129" (ConnectX-7)
    firmware: Any = _NOT_READ  # e.g. "28.39.1002"
    board_id: Any = _NOT_READ  # e.g. "MT_0000000838"
    netdev: Any = _NOT_READ  # Ethernet interface of a RoCE port, e.g. "eth2", where known
    #: fact name (a field name above, or "counters") -> where it was read: a path, "ibstat", "sim"
    sources: Dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """``mlx5_0:1``, the name NCCL_IB_HCA and NCCL's logs use for a port."""
        return f"{self.device}:{self.port}"

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"device": self.device, "port": self.port, "name": self.name}
        for key in ("state", "phys_state", "rate_gbps", "link_layer"):
            out[key] = field_to_json(getattr(self, key))
        out["counters"] = {k: field_to_json(v) for k, v in self.counters.items()}
        for key in ("pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max",
                    "pci_bus_id", "ca_type", "firmware", "board_id", "netdev"):
            out[key] = field_to_json(getattr(self, key))
        out["sources"] = dict(self.sources)
        return out

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "NicPort":
        kw = {k: field_from_json(v) for k, v in d.items()
              if k not in ("device", "port", "name", "counters", "sources") and k in _FIELDS}
        return cls(device=str(d["device"]), port=int(d["port"]),
                   counters={k: field_from_json(v) for k, v in (d.get("counters") or {}).items()},
                   sources=dict(d.get("sources") or {}), **kw)


_FIELDS = set(NicPort.__dataclass_fields__)


@dataclass
class GdrKernel:
    """The host kernel side of GPUDirect RDMA (a NIC reading and writing GPU memory directly).

    Two independent ways exist; GPUDirect RDMA is unavailable only when both are known absent:

    - ``peermem``: the ``nvidia_peermem`` module (or the older out-of-tree ``nv_peer_mem``) is
      loaded: True / False, or NotAvailable when the module list cannot be read. ``peermem_module``
      names the one found.
    - ``dmabuf``: dma-buf export of GPU memory can work: True when the kernel is >= 5.12 and the
      GPU driver is the open kernel module (the conditions NCCL's ``ncclIbDmaBufSupport`` depends on
      besides the NIC driver, which only a run can test); False when either is known not to hold;
      NotAvailable when either cannot be read. ``dmabuf_reason`` says which.
    """

    peermem: Any = _NOT_READ  # bool
    peermem_module: Optional[str] = None  # "nvidia_peermem" | "nv_peer_mem"
    dmabuf: Any = _NOT_READ  # bool
    dmabuf_reason: str = ""
    kernel: Any = _NOT_READ  # kernel release the dma-buf verdict used
    open_kernel_module: Any = _NOT_READ  # bool: /proc/driver/nvidia/version says "Open Kernel Module"
    sources: Dict[str, str] = field(default_factory=dict)

    @property
    def available(self) -> Any:
        """True when either way is known present, False when both are known absent, else NotAvailable."""
        if self.peermem is True or self.dmabuf is True:
            return True
        if self.peermem is False and self.dmabuf is False:
            return False
        return NotAvailable("; ".join(
            why for why in (
                self.peermem.reason if isinstance(self.peermem, NotAvailable) else "",
                self.dmabuf.reason if isinstance(self.dmabuf, NotAvailable) else "",
            ) if why) or "not read")

    def to_json(self) -> Dict[str, Any]:
        return {"available": field_to_json(self.available), "peermem": field_to_json(self.peermem),
                "peermem_module": self.peermem_module, "dmabuf": field_to_json(self.dmabuf),
                "dmabuf_reason": self.dmabuf_reason, "kernel": field_to_json(self.kernel),
                "open_kernel_module": field_to_json(self.open_kernel_module),
                "sources": dict(self.sources)}

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "GdrKernel":
        return cls(peermem=field_from_json(d.get("peermem", _NOT_READ.to_json())),
                   peermem_module=d.get("peermem_module"),
                   dmabuf=field_from_json(d.get("dmabuf", _NOT_READ.to_json())),
                   dmabuf_reason=str(d.get("dmabuf_reason", "")),
                   kernel=field_from_json(d.get("kernel", _NOT_READ.to_json())),
                   open_kernel_module=field_from_json(d.get("open_kernel_module", _NOT_READ.to_json())),
                   sources=dict(d.get("sources") or {}))
