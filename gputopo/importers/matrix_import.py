"""The one flow of `import nvbandwidth` and `import p2pbw`: each output read, its devices matched
against ``--topo`` and renumbered to the topology's NVML indices, its measurements given their
pairs' link classes, then written as a run folder by importers/run.py (runfolder/imported.py) and rendered, so
`report`, `check`, `diff` and `place` read it like any run.

Both tools number GPUs as CUDA does (fastest first by default, reordered or hidden by
CUDA_VISIBLE_DEVICES); ``nvidia-smi topo -m`` as NVML does, in PCI bus order. So a device is
matched (:func:`match_devices`) by bus id where both name it, else by the output's bus ids'
order, else by number as an assumption the report says; where the output's bus ids show another
order and nothing tells which GPU is which, the import gets no link class (said why), never a
class guessed by number.

What each importer parsed goes to ``imported.json`` (one summary per file: versions, devices,
every matrix as printed, failed testcases, problems); its measurements go to
``measurements.jsonl``. The topology is ``--topo``'s (`nvidia-smi topo -m` text or `gputopo scan
--json`), which gives the pairs their link classes; without it, the GPUs the output lists (model,
bus id) and no pairs, so the report judges the pairs against each other only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gputopo.errors import InputFileError, UsageError
from gputopo.model.bus_id import PciAddress, from_matrix_output, matrix_device_id, matrix_nvml_id
from gputopo.model.topology import class_of
from gputopo.model import (
    Gpu,
    HostInfo,
    Measurement,
    NotAvailable,
    Topology,
    is_value,
)

from .contract import Imported


@dataclass
class ImportedDevice:
    """A GPU as the output names it: its device number there, model, bus id (either may be None)."""

    index: int
    name: str | None
    bus_id: str | None
    host: str | None = None  # the host it ran on, where the output says (nvbandwidth multinode)


def topology_from_devices(devices: Sequence[ImportedDevice], tool: str, hostname: str | None) -> Topology:
    """The GPUs an output names (its device numbers, which are CUDA's; model and bus id where
    printed, else not available); no pairs, so link classes stay unknown."""
    gpus = [Gpu(nvml_index=d.index, name=d.name or NotAvailable(f"not printed by {tool}"),
                pci_bus_id=matrix_nvml_id(d.bus_id) or NotAvailable(f"not printed by {tool}"),
                cuda_index=d.index) for d in devices]
    machine = hostname or tool
    return Topology(gpus=gpus, pairs=[], host=HostInfo(hostname=hostname or NotAvailable(f"not printed by {tool}")),
                    source=tool, simulated=False, machine=machine)


def device_renumbering(topo: Topology, devices: Sequence[ImportedDevice]) -> dict[int, int]:
    """{output's device number: the topology's NVML index}, matched by bus id where the output and
    the topology both have every GPU's (CUDA numbers GPUs fastest first, NVML by bus id, so they
    can differ); {} when they cannot be matched that way."""
    by_bus = {matrix_device_id(str(g.pci_bus_id)): g.nvml_index for g in topo.gpus if is_value(g.pci_bus_id)}
    mapping = {}
    for d in devices:
        k = matrix_device_id(d.bus_id)
        if k is None or k not in by_bus:
            return {}
        mapping[d.index] = by_bus[k]
    return mapping


#: Why CUDA's device numbers need not be nvidia-smi's, said wherever they are matched.
CUDA_ORDER = ("CUDA numbers GPUs fastest first by default (CUDA_DEVICE_ORDER=FASTEST_FIRST) and "
              "CUDA_VISIBLE_DEVICES can reorder them, while nvidia-smi numbers them in PCI bus order")


@dataclass
class GpuMatch:
    """How an output's device numbers (CUDA's) were matched to ``--topo``'s GPUs (nvidia-smi's
    NVML indices). ``basis``: "one GPU" (each has one), "bus id" (both name every GPU's bus id),
    "bus order" (the output names every GPU's bus id, the topology none: nvidia-smi numbers GPUs
    in PCI bus order), "number" (the output names no bus id, or too few: taken as the same
    number, an assumption said in ``note``), or "none" (the output's bus ids contradict numbering
    by number and nothing else matches them: the import gets no link class). ``mapping`` is None
    for "none"."""

    basis: str
    mapping: dict[int, int] | None
    note: str
    #: The topology's GPUs (NVML indices) the output did not list (CUDA_VISIBLE_DEVICES hid them):
    #: matched by bus id only, so not measured, said in ``note``.
    not_in_output: list[int] = field(default_factory=list)

    @property
    def certain(self) -> bool:
        return self.basis in ("bus id", "bus order", "one GPU")

    def to_json(self) -> dict[str, Any]:
        return {"basis": self.basis, "link_classes": self.mapping is not None,
                "mapping": None if self.mapping is None else [[k, v] for k, v in sorted(self.mapping.items())],
                "not_in_output": list(self.not_in_output), "note": self.note}


def _address_key(bus: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a whole PCI address the output printed; None for none, or a bus
    number alone (its domain and device unknown)."""
    decoded = from_matrix_output(bus)
    if not isinstance(decoded, PciAddress):
        return None
    return decoded.domain, decoded.bus, decoded.device


def _moves(mapping: dict[int, int], devices: Sequence[ImportedDevice]) -> str:
    by_index = {d.index: d for d in devices}
    moved = [(k, v) for k, v in sorted(mapping.items()) if k != v]
    return ", ".join(f"CUDA device {k} ({matrix_device_id(by_index[k].bus_id)}) is nvidia-smi GPU {v}" for k, v in moved)


def match_devices(topo: Topology, devices: Sequence[ImportedDevice], tool: str) -> GpuMatch:
    """Which of ``topo``'s GPUs (NVML indices) each device of the output (CUDA numbers) is: by bus
    id, else by the bus ids' order, else by number, said as an assumption; never by number where
    the output's bus ids show CUDA numbered the GPUs otherwise (then basis "none")."""
    if len(devices) == 1 and len(topo.gpus) == 1:  # one GPU each: nothing to tell apart
        return GpuMatch("one GPU", {devices[0].index: topo.gpus[0].nvml_index}, "")
    if len(devices) < len(topo.gpus):  # some hidden: only whole bus ids on both sides tell which
        subset = subset_by_bus_id(topo, devices)
        if isinstance(subset, str):
            return GpuMatch("none", None, f"the {tool} output lists {len(devices)} of the topology's "
                                          f"{len(topo.gpus)} GPUs; {subset}: no link class was given to its "
                                          "pairs (judged against each other only)")
        hidden = sorted(g.nvml_index for g in topo.gpus if g.nvml_index not in subset.values())
        moves = _moves(subset, devices)
        return GpuMatch("bus id", subset,
                        f"the {tool} output lists {len(devices)} of the topology's {len(topo.gpus)} GPUs, matched "
                        f"by bus id{': ' + moves if moves else ' (CUDA device N is nvidia-smi GPU N)'}; "
                        f"nvidia-smi GPU(s) {', '.join(_gpu_and_bus(topo, k) for k in hidden)} not in the output "
                        "(CUDA_VISIBLE_DEVICES hid them?): not measured, not judged", hidden)
    by_bus = device_renumbering(topo, devices)
    if by_bus and len(set(by_bus.values())) == len(by_bus):
        if all(k == v for k, v in by_bus.items()):
            return GpuMatch("bus id", by_bus, "CUDA device N is nvidia-smi GPU N for every GPU: matched by the "
                                              f"bus ids of the {tool} output and the topology")
        return GpuMatch("bus id", by_bus, f"the {tool} output's GPUs renumbered to nvidia-smi's by bus id: "
                                          f"{_moves(by_bus, devices)} ({CUDA_ORDER})")
    keys = [_address_key(d.bus_id) for d in devices]
    known = [(d.index, k) for d, k in zip(devices, keys) if k is not None]
    pins = {d.index: g for d in devices for g in [_pinned(topo, d)] if g is not None}
    if len({k for _, k in known}) < len(known):
        return GpuMatch("none", None, f"the {tool} output names one bus id for two devices, so which nvidia-smi "
                                      "GPU each CUDA device is cannot be told: no link class was given to its pairs "
                                      "(judged against each other only)")
    if known and len(known) == len(devices):
        ranked = [d.index for _, d in sorted(zip(keys, devices), key=lambda kd: kd[0] or (0, 0, 0))]
        nvml = sorted(g.nvml_index for g in topo.gpus)
        order = dict(zip(ranked, nvml))
        if len(nvml) == len(devices) and all(order.get(k) == v for k, v in pins.items()):
            if all(k == v for k, v in order.items()):
                return GpuMatch("bus order", order, f"CUDA device N is nvidia-smi GPU N: the {tool} output lists its "
                                                    "GPUs in PCI bus order (its bus ids), the order nvidia-smi "
                                                    "numbers GPUs in")
            return GpuMatch("bus order", order, f"the {tool} output's GPUs renumbered to nvidia-smi's by PCI bus "
                                                f"order (nvidia-smi numbers GPUs in PCI bus order; the topology "
                                                f"names no bus id): {_moves(order, devices)} ({CUDA_ORDER})")
    out_of_order = [k for _, k in sorted(known)] != sorted(k for _, k in known)
    if any(k != v for k, v in pins.items()) or out_of_order:
        why = ("its bus ids are not in PCI bus order" if out_of_order else
               "its bus ids place some devices at other nvidia-smi numbers than their own")
        partial = (f", and it names the bus id of only {len(known)} of its {len(devices)} devices"
                   if len(known) < len(devices) else ", and the topology's bus ids do not match them one to one")
        return GpuMatch("none", None, f"the {tool} output numbers its GPUs in another order than nvidia-smi ({why}; "
                                      f"{CUDA_ORDER}){partial}, so which nvidia-smi GPU each CUDA device is cannot "
                                      "be told: no link class was given to its pairs (judged against each other "
                                      "only)")
    if not known:
        return GpuMatch("number", {d.index: d.index for d in devices},
                        f"CUDA device N taken as nvidia-smi GPU N: no bus ids in the {tool} output ({CUDA_ORDER}; "
                        "a run with CUDA_DEVICE_ORDER=PCI_BUS_ID and no CUDA_VISIBLE_DEVICES numbers them alike)")
    return GpuMatch("number", {d.index: d.index for d in devices},
                    f"CUDA device N taken as nvidia-smi GPU N: the {tool} output names the bus id of only "
                    f"{len(known)} of its {len(devices)} devices (those in PCI bus order) ({CUDA_ORDER})")


def _gpu_and_bus(topo: Topology, nvml_index: int) -> str:
    g = next(g for g in topo.gpus if g.nvml_index == nvml_index)
    return f"{nvml_index} ({matrix_device_id(str(g.pci_bus_id))})" if is_value(g.pci_bus_id) else str(nvml_index)


def subset_by_bus_id(topo: Topology, devices: Sequence[ImportedDevice]) -> dict[int, int] | str:
    """{output's device number: the topology's NVML index} for an output that lists fewer GPUs
    than the topology (CUDA_VISIBLE_DEVICES hid some): certain only where the output prints every
    device's whole PCI address (domain, bus, device) and the topology every GPU's (`gputopo scan
    --json`), each device at one GPU of its own. Else why not, as a clause (with what to pass)."""
    missing = [d.index for d in devices if _address_key(d.bus_id) is None]
    if missing:
        what = ("the output names no bus id" if len(missing) == len(devices) else
                f"the output names no whole bus id (domain:bus:device) for device(s) {', '.join(map(str, missing))}")
        return (f"{what}, so which of the topology's GPUs it ran on cannot be told (by number or by bus order "
                "it would be a guess): rerun it with every GPU visible, or use a version that prints the "
                "devices' bus ids (nvbandwidth v0.6+)")
    if not all(is_value(g.pci_bus_id) and matrix_device_id(str(g.pci_bus_id)) for g in topo.gpus):
        return ("the topology names no bus id of its GPUs (`nvidia-smi topo -m` prints none), so which of them "
                "the output ran on cannot be told (its bus order among hidden GPUs is no match): pass "
                "`gputopo scan --json` of that machine as --topo (it has every GPU's bus id)")
    by_bus = {matrix_device_id(str(g.pci_bus_id)): g.nvml_index for g in topo.gpus}
    mapping: dict[int, int] = {}
    for d in devices:
        k = matrix_device_id(d.bus_id)
        if k not in by_bus:
            return f"the topology has no GPU at {k}, where the output's device {d.index} is: it describes another machine"
        mapping[d.index] = by_bus[k]
    if len(set(mapping.values())) < len(mapping):
        return "the output names one bus id for two devices, so which GPU each is cannot be told"
    return mapping


def _pinned(topo: Topology, d: ImportedDevice) -> int | None:
    """The topology's NVML index of the GPU at the device's bus id, where both name it."""
    k = matrix_device_id(d.bus_id)
    if k is None:
        return None
    return next((g.nvml_index for g in topo.gpus if is_value(g.pci_bus_id) and matrix_device_id(str(g.pci_bus_id)) == k),
                None)


def check_topology_matches(topo: Topology, devices: Sequence[ImportedDevice], topo_file: str, tool: str,
                           match: GpuMatch | None = None) -> None:
    """A --topo of another machine would name other hardware's link classes: exit 2 when its GPU
    count differs from the output's, a GPU's model differs, or a bus id the output prints is not
    in the topology (where the topology has bus ids: `gputopo scan --json`)."""
    if not devices:
        return
    hosts = sorted({d.host for d in devices if d.host})
    if len(hosts) > 1:
        raise UsageError(f"{topo_file}: is one machine's topology, but the {tool} output ran on {len(hosts)} hosts "
                         f"({', '.join(hosts[:4])}{', ...' if len(hosts) > 4 else ''}): import it without --topo")
    if len(topo.gpus) < len(devices):
        raise UsageError(f"{topo_file}: has {len(topo.gpus)} GPU(s), but the {tool} output lists {len(devices)}: "
                         "it describes another machine; import without --topo or give the topology of the "
                         "machine it ran on")
    if len(topo.gpus) > len(devices):  # CUDA_VISIBLE_DEVICES hid some, or another machine
        subset = subset_by_bus_id(topo, devices)
        if isinstance(subset, str):
            raise UsageError(f"{topo_file}: has {len(topo.gpus)} GPU(s), but the {tool} output lists "
                             f"{len(devices)} (CUDA_VISIBLE_DEVICES hid some, or another machine); {subset}; "
                             "or import it without --topo")
    topo_buses = {matrix_device_id(str(g.pci_bus_id)) for g in topo.gpus if is_value(g.pci_bus_id)}
    for d in devices:
        bus = matrix_device_id(d.bus_id)
        if bus and topo_buses and bus not in topo_buses:
            raise UsageError(f"{topo_file}: has no GPU at {bus}, where the {tool} output's device {d.index} is: "
                             "it describes another machine")
    match = match or match_devices(topo, devices, tool)
    by_index = {g.nvml_index: g for g in topo.gpus}
    models = [str(g.name) for g in topo.gpus if is_value(g.name) and g.name]
    for d in devices:
        if match.mapping is None:  # not matched: each model the output names is one the topology has
            if d.name and models and not any(_same_model(d.name, n) for n in models):
                raise UsageError(f"{topo_file}: has no {d.name!r}, which the {tool} output's device {d.index} is: "
                                 "it describes another machine")
            continue
        g = by_index.get(match.mapping.get(d.index, d.index))
        if g is None:
            raise UsageError(f"{topo_file}: has no GPU {d.index}, which the {tool} output uses")
        name = str(g.name) if is_value(g.name) else ""
        if d.name and name and not _same_model(d.name, name):
            raise UsageError(f"{topo_file}: GPU {g.nvml_index} is {name!r}, but the {tool} output's device "
                             f"{d.index} ran on {d.name!r}: it describes another machine"
                             + ("" if match.certain else f" (or CUDA numbered the GPUs otherwise: {CUDA_ORDER})"))


def with_output_devices(topo: Topology, devices: Sequence[ImportedDevice], match: GpuMatch | None = None,
                        tool: str = "output") -> Topology:
    """The topology with each GPU's model, bus id and CUDA number from the output where the
    topology lacks them (`nvidia-smi topo -m` text prints none), so the report, its reference
    rates and findings name the GPU. A GPU is matched as :func:`match_devices` matched it: by bus
    id or bus order, all three; by number only (an assumption) or not at all, the model alone and
    only where every GPU is the same model."""
    match = match or match_devices(topo, devices, tool)
    one_model = len({d.name for d in devices}) == 1 and devices[0].name is not None
    if not match.certain:
        if not one_model:
            return topo
        return replace(topo, gpus=[g if is_value(g.name) else replace(g, name=devices[0].name) for g in topo.gpus])
    mapping = match.mapping or {}
    gpus = []
    for g in topo.gpus:
        d = next((x for x in devices if mapping.get(x.index) == g.nvml_index), None)
        if d is not None:
            bus = matrix_nvml_id(d.bus_id)
            g = replace(g, name=g.name if is_value(g.name) or not d.name else d.name,
                        pci_bus_id=g.pci_bus_id if is_value(g.pci_bus_id) or not bus else bus,
                        cuda_index=g.cuda_index if is_value(g.cuda_index) else d.index)
        gpus.append(g)
    return replace(topo, gpus=gpus)


def renumber(ms: list[Measurement], mapping: dict[int, int]) -> list[Measurement]:
    """Measurements with the output's device numbers turned into the topology's NVML indices
    (the output's own numbers kept in ``extra["output_gpus"]``)."""
    if not mapping or all(k == v for k, v in mapping.items()):
        return ms
    for m in ms:
        m.extra["output_gpus"] = list(m.gpus)
        m.gpus = tuple(sorted(mapping.get(g, g) for g in m.gpus))
        if m.direction:
            m.direction = re.sub(r"\d+", lambda x: str(mapping.get(int(x.group()), x.group())), m.direction)
    return ms


def _same_model(a: str, b: str) -> bool:
    norm = [s.lower().replace("nvidia", "").replace(" ", "") for s in (a, b)]
    return norm[0] == norm[1] or norm[0] in norm[1] or norm[1] in norm[0]


def with_link_classes(ms: list[Measurement], topo: Topology | None) -> list[Measurement]:
    """Each pair measurement with its pair's link class from the topology (where it has pairs)."""
    if topo is None or not topo.pairs:
        return ms
    for m in ms:
        if len(m.gpus) == 2 and m.link_class is None:
            lc = class_of(topo, m.gpus)
            m.link_class = str(lc) if lc is not None else None
    return ms


def parse_outputs(*, tool: str, label: str, paths: list[str], read: Callable[[str], Any],
                  devices_of: Callable[[Any], list[ImportedDevice]],
                  measurements_of: Callable[[Any], list[Measurement]], topology: Topology | None = None,
                  topology_file: str | None = None) -> Imported:
    """The one flow of `import nvbandwidth` and `import p2pbw`: each file read (the same output
    twice refused: it would count twice), one machine's GPUs in all of them, the devices matched
    to ``--topo``'s GPUs (:func:`match_devices`), checked against them and renumbered to their
    NVML indices, then the run folder; how they were matched goes into each output's summary
    (``gpu_numbering``), which the report says."""
    from .user_inputs import refuse_duplicates

    refuse_duplicates([Path(p) for p in paths if p != "-"])
    outputs = [read(p) for p in paths]
    devices = devices_of(outputs[0])
    for o in outputs[1:]:
        other = devices_of(o)
        if [(d.name, d.bus_id) for d in other] != [(d.name, d.bus_id) for d in devices][: len(other)]:
            raise InputFileError(o.source, f"lists other GPUs than {outputs[0].source}: import each machine's "
                                           "output into its own run folder")
    hostname = next((o.hostname for o in outputs if getattr(o, "hostname", None)), None)
    measurements = [m for o in outputs for m in measurements_of(o)]
    summaries = [o.summary() for o in outputs]
    topo_notes = list(topology.notes) if topology is not None else []  # said even where no GPU matched
    if topology is not None:
        check_topology_matches(topology, devices, topology_file or "--topo", label)
        match = match_devices(topology, devices, label)
        for s in summaries:  # said in the report (report/import_numbering.py)
            s["gpu_numbering"] = {**match.to_json(), "topology_file": topology_file or "--topo"}
        if match.mapping is None:  # no GPU of the topology is known to be any device: no link class
            topology = None
        else:  # the output's CUDA numbers -> the topology's NVML indices
            topology = with_output_devices(topology, devices, match, label)
            measurements = renumber(measurements, match.mapping)
    topo = topology or replace(topology_from_devices(devices, label, hostname), notes=topo_notes)
    return Imported(topology=topo, measurements=with_link_classes(measurements, topo),
                    imports=summaries,
                    not_read=[p for doc in summaries for p in doc.get("problems") or []], source=tool, fabric="cuda",
                    options={"imported_from": list(paths), "topology_file": topology_file},
                    parsed=outputs)
