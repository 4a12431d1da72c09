"""Inputs `gputopo import nccl-tests` refuses (exit 2): the same log given twice, which would
count every measurement twice, and a ``--topo`` whose GPUs are not the logs' (fewer GPUs than
the logs use, or another model), whose link classes would name other hardware.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Dict, List, Optional

from gputopo.errors import InputFileError, UsageError
from gputopo.model import Topology, is_value

from .nccl_tests import device_keys, normalize_bus_id


def refuse_duplicates(paths: List[Path]) -> None:
    """The same log given twice (same file, or files with the same content) would count every
    measurement twice: exit 2 naming both."""
    from gputopo.inputs import user_file_problem

    seen: Dict[str, Path] = {}  # content hash -> the first file with it
    for p in paths:
        problem = user_file_problem(p)
        if problem:
            raise InputFileError(p, f"cannot read the nccl-tests log: {problem}")
        try:
            digest = hashlib.sha256()
            with open(p, "rb") as f:  # in pieces: a log may be larger than memory
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
            key = digest.hexdigest()
        except OSError:
            continue  # unreadable: the parser says why
        if key in seen:
            same = "is given twice" if seen[key].resolve() == p.resolve() else f"has the same content as {seen[key]}"
            raise UsageError(f"{p} {same}: its measurements would be counted twice; give each log once")
        seen[key] = p


def refuse_other_machine(topo: Topology, logs, topo_file: Optional[str]) -> None:
    """A --topo whose GPUs are not the logs' would give the pairs another machine's link
    classes: exit 2 when its GPU count is not the number of devices the logs ran on, or a GPU's
    model or bus id (where the topology has them: `gputopo scan --json`) is not the log's."""
    where = topo_file or "--topo"
    n = len(topo.gpus)
    by_index = {g.nvml_index: g for g in topo.gpus}
    local = [log for log in logs if device_keys(log)[1]]  # one host, device numbers printed
    used = sorted({k for log in local for k in device_keys(log)[0]})
    if used and (n != len(used) or any(k not in by_index for k in used)):
        raise UsageError(f"{where}: has {n} GPU(s), but the log(s) ran on {len(used)} (device(s) "
                         f"{', '.join(map(str, used))}): it describes another machine; give the topology of "
                         "the machine the log ran on, or import without --topo")
    for log in local:
        for key, rank in zip(device_keys(log)[0], log.ranks):
            gpu = by_index[key]
            topo_name = str(gpu.name) if is_value(gpu.name) else ""
            if rank.name and topo_name and not _same_model(rank.name, topo_name):
                raise UsageError(f"{where}: GPU {key} is {topo_name!r}, but {Path(log.source).name} ran on "
                                 f"{rank.name!r}: it describes another machine")
            if is_value(gpu.pci_bus_id) and rank.bus_id.count(":") >= 2 \
                    and normalize_bus_id(rank.bus_id)[:-2] != normalize_bus_id(str(gpu.pci_bus_id))[:-2]:
                raise UsageError(f"{where}: GPU {key} is at {gpu.pci_bus_id}, but {Path(log.source).name} ran "
                                 f"device {key} at {rank.bus_id}: it describes another machine")


def _same_model(a: str, b: str) -> bool:
    """Model names as nccl-tests and nvidia-smi print them ('NVIDIA GeForce RTX 2080 Ti')."""
    norm = [s.lower().replace("nvidia", "").replace(" ", "") for s in (a, b)]
    return norm[0] == norm[1] or norm[0] in norm[1] or norm[1] in norm[0]


def load_topo_file(path: str) -> Topology:
    """--topo: `gputopo scan --json` output (it has GPU models and bus ids, so a mismatch with
    the logs is seen in full) or saved `nvidia-smi topo -m` text."""
    import json

    from gputopo.errors import InputFileError
    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_bytes
    from gputopo.model import topology_from_json

    data = read_user_bytes(path, "topology", MAX_DESCRIPTION_BYTES)
    if data.lstrip()[:1] == b"{":
        try:
            return topology_from_json(json.loads(data))
        except (ValueError, KeyError, TypeError) as e:
            raise InputFileError(path, f"not a gputopo topology (`gputopo scan --json`): {e}") from None
    from gputopo.probe.smi import decode_smi_bytes, topology_from_smi_file_text

    return topology_from_smi_file_text(decode_smi_bytes(data), source=path)


def refuse_duplicate_logs(logs) -> None:
    """The same test output twice (one file holding it twice, or two files sharing it): the
    measurements would be counted twice, exit 2 naming where."""
    seen: Dict[tuple, Any] = {}  # (op, ranks, rows) -> the first log holding them
    for log in logs:
        rows = [(r.size_bytes, r.count, r.dtype, r.redop, r.root, repr(r.out_of_place), repr(r.in_place))
                for r in log.rows]
        key = (log.op, tuple((r.host, r.device, r.bus_id) for r in log.ranks), repr(rows))
        if key in seen:
            first = seen[key]
            where = (f"{Path(log.source).name} holds the same {log.op} output twice (rows from line "
                     f"{first.rows[0].line} and from line {log.rows[0].line})" if first.source == log.source
                     else f"{Path(log.source).name} repeats the {log.op} output of {Path(first.source).name}")
            raise UsageError(f"{where}: its measurements would be counted twice; give each test once")
        seen[key] = log


def refuse_other_hosts(logs) -> None:
    """Single-host logs from two hosts name their GPUs by the same device numbers: host B's GPU
    0 would become host A's GPU 0, its figures averaged into A's pairs (the sweep: two machines'
    logs imported as one machine "A+B"). Exit 2 naming both; multi-host logs (one job over
    several nodes) are not affected."""
    first: Dict[str, Any] = {}  # host -> the first single-host log from it
    for log in logs:
        if not device_keys(log)[1]:
            continue
        host = log.ranks[0].host
        if host and host not in first:
            first[host] = log
        if len(first) > 1:
            (a, la), (b, lb) = list(first.items())[:2]
            raise UsageError(f"{Path(la.source).name} ran on {a!r} and {Path(lb.source).name} on {b!r}: one run "
                             "folder holds one machine (their GPU numbers would be mixed); import each host's logs "
                             "into its own folder (compare them with `gputopo diff`)")
