"""The one flow of `import nvbandwidth` and `import p2pbw`: each output read, its devices matched
against ``--topo`` and renumbered to the topology's NVML indices by bus id, its measurements
given their pairs' link classes, then written as a run folder (runfolder/imported.py) and
rendered, so `report`, `check`, `diff` and `place` read it like any run.

What each importer parsed goes to ``imported.json`` (one summary per file: versions, devices,
every matrix as printed, failed testcases, problems); its measurements go to
``measurements.jsonl``. The topology is ``--topo``'s (`nvidia-smi topo -m` text or `gputopo scan
--json`), which gives the pairs their link classes; without it, the GPUs the output lists (model,
bus id) and no pairs, so the report judges the pairs against each other only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gputopo.errors import InputFileError, UsageError
from gputopo.model.bus_id import Decoded, as_address, from_nvbandwidth, from_p2pbw
from gputopo.model import (
    Gpu,
    HostInfo,
    Measurement,
    NotAvailable,
    Topology,
    is_value,
)
from gputopo.runfolder.imported import import_run_dir, write_imported_run
from gputopo.runfolder.layout import DEFAULT_BASE_DIR, IMPORTED_JSON


@dataclass
class ImportedDevice:
    """A GPU as the output names it: its device number there, model, bus id (either may be None)."""

    index: int
    name: str | None
    bus_id: str | None


@dataclass
class ImportFolder:
    run_dir: Path
    summary: Any = None  # gputopo.report.summary.Summary when rendered


def decode_bus_id(printed: str | None) -> Decoded | None:
    """An output's bus id: nvbandwidth's ``00000000:99:00`` (p2pBandwidthLatencyTest's device as
    its parser writes it too; a topology's ``00000000:99:00.0``), or p2pBandwidthLatencyTest's bare
    hex bus ``99`` (a BusOnly); None for other text."""
    if not printed:
        return None
    return from_nvbandwidth(printed) or from_p2pbw(printed.strip())


def normalize_bus_id(printed: str | None) -> str | None:
    """'00000000:99:00' / '99' -> NVML's '00000000:99:00.0' (a bus alone as device 0 of domain 0,
    BusOnly.assumed); other text as printed."""
    decoded = decode_bus_id(printed)
    if decoded is None:
        return printed.strip() if printed else None
    return as_address(decoded).nvml


def topology_from_devices(devices: Sequence[ImportedDevice], tool: str, hostname: str | None) -> Topology:
    """The GPUs an output names (its device numbers, which are CUDA's; model and bus id where
    printed, else not available); no pairs, so link classes stay unknown."""
    gpus = [Gpu(nvml_index=d.index, name=d.name or NotAvailable(f"not printed by {tool}"),
                pci_bus_id=normalize_bus_id(d.bus_id) or NotAvailable(f"not printed by {tool}"),
                cuda_index=d.index) for d in devices]
    machine = hostname or tool
    return Topology(gpus=gpus, pairs=[], host=HostInfo(hostname=hostname or NotAvailable(f"not printed by {tool}")),
                    source=tool, simulated=False, machine=machine)


def _bus_key(bus: str | None) -> str | None:
    """The device an output or topology names, as ``00000000:99:00`` (the function left out)."""
    decoded = decode_bus_id(bus)
    return as_address(decoded).nvml_device if decoded is not None else None


def device_renumbering(topo: Topology, devices: Sequence[ImportedDevice]) -> dict[int, int]:
    """{output's device number: the topology's NVML index}, matched by bus id where the output and
    the topology both have every GPU's (CUDA numbers GPUs fastest first, NVML by bus id, so they
    can differ); {} when they cannot be matched that way (then the numbers are taken as they are)."""
    by_bus = {_bus_key(str(g.pci_bus_id)): g.nvml_index for g in topo.gpus if is_value(g.pci_bus_id)}
    mapping = {}
    for d in devices:
        k = _bus_key(d.bus_id)
        if k is None or k not in by_bus:
            return {}
        mapping[d.index] = by_bus[k]
    return mapping


def check_topology_matches(topo: Topology, devices: Sequence[ImportedDevice], topo_file: str, tool: str) -> None:
    """A --topo of another machine would name other hardware's link classes: exit 2 when its GPU
    count differs from the output's, a GPU's model differs, or a bus id the output prints is not
    in the topology (where the topology has bus ids: `gputopo scan --json`)."""
    if not devices:
        return
    if len(topo.gpus) != len(devices):
        raise UsageError(f"{topo_file}: has {len(topo.gpus)} GPU(s), but the {tool} output lists {len(devices)}: "
                         "it describes another machine (or CUDA_VISIBLE_DEVICES hid some); import without --topo "
                         "or give the topology of the machine it ran on")
    mapping = device_renumbering(topo, devices)
    by_index = {g.nvml_index: g for g in topo.gpus}
    topo_buses = {_bus_key(str(g.pci_bus_id)) for g in topo.gpus if is_value(g.pci_bus_id)}
    for d in devices:
        g = by_index.get(mapping.get(d.index, d.index))
        if g is None:
            raise UsageError(f"{topo_file}: has no GPU {d.index}, which the {tool} output uses")
        name = str(g.name) if is_value(g.name) else ""
        if d.name and name and not _same_model(d.name, name):
            raise UsageError(f"{topo_file}: GPU {g.nvml_index} is {name!r}, but the {tool} output ran on {d.name!r}: "
                             "it describes another machine")
        bus = _bus_key(d.bus_id)
        if bus and topo_buses and bus not in topo_buses:
            raise UsageError(f"{topo_file}: has no GPU at {bus}, where the {tool} output's device {d.index} is: "
                             "it describes another machine")


def with_output_devices(topo: Topology, devices: Sequence[ImportedDevice]) -> Topology:
    """The topology with each GPU's model, bus id and CUDA number from the output where the
    topology lacks them (`nvidia-smi topo -m` text prints none), so the report, its reference
    rates and findings name the GPU. A GPU is matched by bus id where both have them, else by
    number only where that is certain: the output lists its devices in bus-id order (CUDA's
    fastest-first order is bus-id order among equal GPUs; NVML's is bus-id order) or every GPU
    is the same model. Otherwise the topology is left as it is."""
    mapping = device_renumbering(topo, devices)
    names_only = False
    if not mapping:
        keys = [_bus_key(d.bus_id) for d in devices]
        in_bus_order = all(keys) and keys == sorted(keys, key=str)
        one_model = len({d.name for d in devices}) == 1 and devices[0].name is not None
        if not (in_bus_order or one_model):
            return topo
        # one model listed out of bus order (CUDA_VISIBLE_DEVICES reordered it): the model is
        # every GPU's, but which bus is which NVML index is not known
        names_only = not in_bus_order
        mapping = {d.index: d.index for d in devices}
    gpus = []
    for g in topo.gpus:
        d = next((x for x in devices if mapping.get(x.index) == g.nvml_index), None)
        if d is not None:
            bus = None if names_only else normalize_bus_id(d.bus_id)
            g = replace(g, name=g.name if is_value(g.name) or not d.name else d.name,
                        pci_bus_id=g.pci_bus_id if is_value(g.pci_bus_id) or not bus else bus,
                        cuda_index=g.cuda_index if is_value(g.cuda_index) or names_only else d.index)
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
    from gputopo.report.expected import class_of

    for m in ms:
        if len(m.gpus) == 2 and m.link_class is None:
            lc = class_of(topo, m.gpus)
            m.link_class = str(lc) if lc is not None else None
    return ms


def write_import_folder(*, tool: str, paths: list[str], topo: Topology, measurements: list[Measurement],
                        summaries: list[dict[str, Any]], out_dir=None, base_dir=DEFAULT_BASE_DIR,
                        argv: list[str] | None = None, render: bool = True, console=None,
                        topology_file: str | None = None) -> ImportFolder:
    run_dir = import_run_dir(out_dir, base_dir, topo.machine or tool)
    write_imported_run(run_dir, source=tool, fabric="cuda", simulated=False, topology=topo,
                       argv=argv if argv is not None else ["import", tool, *paths],
                       options={"imported_from": list(paths), "topology_file": topology_file},
                       measurements=with_link_classes(measurements, topo), document_name=IMPORTED_JSON,
                       document={"imports": summaries})
    result = ImportFolder(run_dir=run_dir)
    if render:
        from gputopo.report.render import render_run

        result.summary = render_run(run_dir, console=console)
    return result


def import_outputs(*, tool: str, label: str, paths: list[str], read: Callable[[str], Any],
                   devices_of: Callable[[Any], list[ImportedDevice]],
                   measurements_of: Callable[[Any], list[Measurement]], out_dir=None,
                   base_dir=DEFAULT_BASE_DIR, topology: Topology | None = None,
                   topology_file: str | None = None, argv: list[str] | None = None, render: bool = True,
                   console=None) -> ImportFolder:
    """The one flow of `import nvbandwidth` and `import p2pbw`: each file read (the same output
    twice refused: it would count twice), one machine's GPUs in all of them, the devices checked
    against ``--topo`` and renumbered to its NVML indices by bus id, then the run folder."""
    from .user_inputs import refuse_duplicates

    refuse_duplicates([Path(p) for p in paths if p != "-"])
    outputs = [read(p) for p in paths]
    devices = devices_of(outputs[0])
    for o in outputs[1:]:
        other = devices_of(o)
        if [(d.name, d.bus_id) for d in other] != [(d.name, d.bus_id) for d in devices][: len(other)]:
            raise InputFileError(o.source, f"lists other GPUs than {outputs[0].source}: import each machine's "
                                           "output into its own run folder")
    if topology is not None:
        check_topology_matches(topology, devices, topology_file or "--topo", label)
        topology = with_output_devices(topology, devices)
    hostname = next((o.hostname for o in outputs if getattr(o, "hostname", None)), None)
    topo = topology or topology_from_devices(devices, label, hostname)
    measurements = [m for o in outputs for m in measurements_of(o)]
    if topology is not None:  # the output's CUDA numbers -> the topology's NVML indices, by bus id
        measurements = renumber(measurements, device_renumbering(topology, devices))
    return write_import_folder(tool=tool, paths=list(paths), topo=topo, measurements=measurements,
                               summaries=[o.summary() for o in outputs], out_dir=out_dir, base_dir=base_dir,
                               argv=argv, render=render, console=console, topology_file=topology_file)
