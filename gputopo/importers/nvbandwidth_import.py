"""`gputopo import nvbandwidth FILE`: nvbandwidth's output (text, or ``-j`` JSON) as a run folder.

Refused with one line (exit 2): a missing, empty or binary file, and a file with nothing of
nvbandwidth's in it (no version line, no matrix, no testcase). Anything else is imported: what
could not be read is said per line and reported as ``incomplete-data``, and a testcase whose data
check failed is kept as a failure the report calls ``corrupt``.
"""

from __future__ import annotations

from gputopo.errors import InputFileError
from gputopo.model import Topology

from .import_folder import (
    DEFAULT_BASE_DIR,
    ImportedDevice,
    ImportFolder,
    check_topology_matches,
    device_renumbering,
    renumber,
    topology_from_devices,
    write_import_folder,
)
from .nvbandwidth_json import parse_nvbandwidth_json
from .nvbandwidth_measure import output_measurements
from .nvbandwidth_parse import looks_like_nvbandwidth, parse_nvbandwidth_lines
from .nvbandwidth_records import NvbOutput
from gputopo.text_input import MAX_INPUT_BYTES, TextSource, open_lines

#: The JSON form is read whole: at most this many bytes of it.
MAX_JSON_BYTES = 64 << 20


def read_nvbandwidth(path: str) -> NvbOutput:
    """Parse one file (``-``: stdin) of either form; InputFileError when it is not nvbandwidth's."""
    src = TextSource(path)
    lines = open_lines(path, src)
    first = None
    buffered = []
    for lineno, line in lines:
        buffered.append((lineno, line))
        if line.strip():
            first = line.strip()
            break
    if first is not None and first.startswith("{"):
        parts = [ln for _, ln in buffered]
        size = 0
        for _, line in lines:
            size += len(line)
            if size > MAX_JSON_BYTES:
                raise InputFileError(src.name, f"JSON over {MAX_JSON_BYTES >> 20} MiB: not nvbandwidth -j output")
            parts.append(line)
        out = parse_nvbandwidth_json("\n".join(parts), src.name)
    else:
        out = parse_nvbandwidth_lines(_chain(buffered, lines), src.name)
        if not looks_like_nvbandwidth(out):
            raise InputFileError(src.name, "not nvbandwidth output: no 'nvbandwidth Version' line, no bandwidth "
                                           "matrix and no 'Running <testcase>.' line")
    out.problems += src.unread
    if src.quoted:
        out.notes.append("quoted paste: the '>' marks were removed")
    if src.line_numbered:
        out.notes.append("pasted with an editor's line numbers: they were removed")
    return out


def _chain(first, rest):
    yield from first
    yield from rest


def nvbandwidth_devices(out: NvbOutput) -> list[ImportedDevice]:
    devs = {d.index: ImportedDevice(d.index, d.name, d.bus_id) for d in out.devices}
    if not devs:  # no device list (cut when posted): the GPUs the matrices name
        from .nvbandwidth_measure import output_measurements as ms

        for g in sorted({g for m in ms(out) for g in m.gpus}):
            devs[g] = ImportedDevice(g, None, None)
    return [devs[k] for k in sorted(devs)]


def import_nvbandwidth(paths: list[str], *, out_dir=None, base_dir=DEFAULT_BASE_DIR,
                       topology: Topology | None = None, topology_file: str | None = None,
                       argv: list[str] | None = None, render: bool = True, console=None) -> ImportFolder:
    from pathlib import Path

    from .nccl_inputs import refuse_duplicates

    refuse_duplicates([Path(p) for p in paths if p != "-"])  # the same output twice would count twice
    outputs = [read_nvbandwidth(p) for p in paths]
    devices = nvbandwidth_devices(outputs[0])
    for o in outputs[1:]:
        other = nvbandwidth_devices(o)
        if [(d.name, d.bus_id) for d in other] != [(d.name, d.bus_id) for d in devices][: len(other)]:
            raise InputFileError(o.source, f"lists other GPUs than {outputs[0].source}: import each machine's "
                                           "output into its own run folder")
    if topology is not None:
        check_topology_matches(topology, devices, topology_file or "--topo", "nvbandwidth")
    hostname = next((o.hostname for o in outputs if o.hostname), None)
    topo = topology or topology_from_devices(devices, "nvbandwidth", hostname)
    measurements = [m for o in outputs for m in output_measurements(o)]
    if topology is not None:  # the output's CUDA numbers -> the topology's NVML indices, by bus id
        measurements = renumber(measurements, device_renumbering(topology, devices))
    return write_import_folder(tool="nvbandwidth", paths=list(paths), topo=topo, measurements=measurements,
                               summaries=[o.summary() for o in outputs], out_dir=out_dir, base_dir=base_dir,
                               argv=argv, render=render, console=console, topology_file=topology_file)


__all__ = ["MAX_INPUT_BYTES", "import_nvbandwidth", "read_nvbandwidth"]
