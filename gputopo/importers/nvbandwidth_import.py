"""`gputopo import nvbandwidth FILE`: nvbandwidth's output (text, or ``-j`` JSON) as a run folder.

Refused with one line (exit 2): a missing, empty or binary file, and a file with nothing of
nvbandwidth's in it (no version line, no matrix, no testcase). Anything else is imported: what
could not be read is said per line and reported as ``incomplete-data``, and a testcase whose data
check failed is kept as a failure the report calls ``corrupt``.
"""

from __future__ import annotations

from gputopo.errors import InputFileError
from gputopo.model import Topology

from .contract import Imported, Importer
from .matrix_import import ImportedDevice, parse_outputs
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
    src.tell(out)
    return out


def _chain(first, rest):
    yield from first
    yield from rest


def nvbandwidth_devices(out: NvbOutput) -> list[ImportedDevice]:
    devs = {d.index: ImportedDevice(d.index, d.name, d.bus_id, d.host) for d in out.devices}
    if not devs:  # no device list (cut when posted): the GPUs the matrices name
        from .nvbandwidth_measure import output_measurements as ms

        for g in sorted({g for m in ms(out) for g in m.gpus}):
            devs[g] = ImportedDevice(g, None, None)
    return [devs[k] for k in sorted(devs)]


def parse_nvbandwidth(paths: list[str], topology: Topology | None = None, *,
                      topology_file: str | None = None) -> Imported:
    return parse_outputs(tool="nvbandwidth", label="nvbandwidth", paths=paths, read=read_nvbandwidth,
                         devices_of=nvbandwidth_devices, measurements_of=output_measurements,
                         topology=topology, topology_file=topology_file)


IMPORTER = Importer(name="nvbandwidth", parse=parse_nvbandwidth, help="""Read nvbandwidth output (text, any version from 0.2 to 0.8, or `nvbandwidth -j` JSON; `-`
    reads stdin) into a run folder: every testcase's matrix (CE and SM, read and write, uni- and
    bidirectional, host <-> device, device <-> device, all-to-one / one-to-all, latency).

    \b
    Examples:
      nvbandwidth > nvb.txt; gputopo import nvbandwidth nvb.txt --topo topo.txt
      nvbandwidth -j | gputopo import nvbandwidth -
    """)

__all__ = ["IMPORTER", "MAX_INPUT_BYTES", "parse_nvbandwidth", "read_nvbandwidth"]
