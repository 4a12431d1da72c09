"""`gputopo import nccl-tests LOG...`: write a run folder from nccl-tests output, like bench does,
so its results show in reports, `diff` and `check` (the logs are read by nccl_tests.py).

Without a topology the folder holds only what the logs say (GPUs, hosts, bus ids); give the
machine's `nvidia-smi topo -m` output (``topology=``) to get link classes and expected rates.

What it refuses (exit 2): a log given twice (user_inputs.py) or the same test output twice in
one file or two, which would count every measurement twice; single-host logs of two hosts,
whose GPU numbers would be mixed; and a ``--topo`` whose GPUs are not the logs' (another GPU
count, model or bus id), whose link classes would name other hardware.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from gputopo.errors import UsageError
from gputopo.model import Gpu, HostInfo, Topology, is_value
from gputopo.model.topology import class_of
from gputopo.model.bus_id import PciAddress, from_nccl_tests, try_parse
from gputopo.runfolder.layout import NCCL_TESTS_TOOL

from .nccl_tests import (NcclTestsLog, check_op, device_keys, gpu_bus_id, iter_measurements, log_summary,
                         parse_nccl_tests_file)
from .contract import Importer, Imported, Option
from .job_nics import NICS_HELP, job_nics, nccl_line_nics
from .user_inputs import refuse_duplicates


def topology_from_logs(logs: List[NcclTestsLog]) -> Topology:
    """The GPUs the logs name (index, model, bus id); no pairs, so classes stay unknown."""
    gpus = {}
    hosts = []
    for log in logs:
        keys, _ = device_keys(log)
        for key, r in zip(keys, log.ranks):
            if r.host not in hosts:
                hosts.append(r.host)
            if key not in gpus:
                gpus[key] = Gpu(nvml_index=key, name=r.name or "?", pci_bus_id=gpu_bus_id(r.bus_id),
                                cuda_index=r.device)
    machine = "+".join(hosts) if hosts else "nccl-tests"
    host = HostInfo(hostname=hosts[0] if len(hosts) == 1 else machine)
    return Topology(gpus=[gpus[k] for k in sorted(gpus)], pairs=[], host=host, source="nccl-tests",
                    simulated=False, machine=machine)


def _class_for(topo: Optional[Topology], gpus) -> Optional[str]:
    lc = class_of(topo, gpus) if topo is not None and topo.pairs else None
    return str(lc) if lc is not None else None


def parse_nccl_tests_import(paths: Iterable, topology: Optional[Topology] = None, *, op: Optional[str] = None,
                            topology_file: Optional[str] = None, ranks: Optional[int] = None,
                            nics: Optional[List[str]] = None) -> Imported:
    """Parse the logs into what the run folder gets (importers/contract.py).

    ``op`` names the collective when neither the log nor its file name says it, ``ranks`` the
    number of ranks of a log without rank lines (both inferred from busbw / algbw where only one
    answer fits; refused, naming --op and --ranks, where several do). ``nics``: --nics specs
    (``[HOST=]FILE``, job_nics.py) of a job across hosts.
    Raises InputFileError for unreadable logs, UsageError for a bad op, a log given twice, or a ``topology`` (read from ``topology_file``) of another machine.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise UsageError("no nccl-tests log given")
    op = check_op(op)
    if ranks is not None and ranks < 1:
        raise UsageError(f"--ranks {ranks}: a test runs on at least 1 rank")
    refuse_duplicates(paths)
    logs: List[NcclTestsLog] = []
    for p in paths:
        logs += parse_nccl_tests_file(p, op=op, ranks=ranks)
    refuse_duplicate_logs(logs)
    refuse_other_hosts(logs)
    if topology is not None:
        refuse_other_machine(topology, logs, topology_file)
    topo = topology or topology_from_logs(logs)
    if nics:
        # the NICs of each host of a job across hosts (job_nics.py): its figure is judged against them
        topo.nics = [n for n in topo.nics if n.host is not None] + job_nics(
            nics, list(dict.fromkeys(h for lg in logs for h in lg.hosts)),
            {h: d for lg in logs for h, d in lg.nics_used.items()})
    elif any(lg.nics_used for lg in logs):
        # no --nics: the NICs the job's own NCCL lines name, with their rates, where every host says them
        named = nccl_line_nics(
            list(dict.fromkeys(h for lg in logs for h in lg.hosts)),
            {h: d for lg in logs for h, d in lg.nics_used.items()},
            {h: d for lg in logs for h, d in lg.nics_index.items()},
            {h: d for lg in logs for h, d in lg.nic_rates.items()},
            {h: d for lg in logs for h, d in lg.net_bw.items()})
        if named:
            topo.nics = [n for n in topo.nics if n.host is not None] + named
    return Imported(
        topology=topo,
        measurements=[m for log in logs for m in iter_measurements(log, link_class=_class_for(topo, device_keys(log)[0]))],
        imports=[{"tool": NCCL_TESTS_TOOL, **log_summary(lg)} for lg in logs],
        not_read=[p for lg in logs for p in lg.problems], source="nccl-tests", fabric="cuda",
        options={"imported_from": [str(p) for p in paths], "op": op, "ranks": ranks, **({"nics": list(nics)} if nics else {}),
                 "tool": _one_of(lg.tool for lg in logs), "library": _one_of(lg.library for lg in logs)},
        parsed=logs)


def _one_of(values) -> Optional[str]:
    """The logs' common value ("RCCL"), several joined ("NCCL+RCCL"), None where none says it."""
    seen = list(dict.fromkeys(v for v in values if v))
    return "+".join(seen) if seen else None


# ----------------------------------------------------------------------------- refused inputs


def refuse_duplicate_logs(logs) -> None:
    """The same test output twice (one file holding it twice, or two files sharing it): the
    measurements would be counted twice, exit 2 naming where."""
    def row(r):
        return (r.size_bytes, r.count, r.dtype, r.redop, r.root, repr(r.out_of_place), repr(r.in_place))

    def full(log) -> str:  # every row, made once per log and only for a log whose outline another shares
        return repr([row(r) for r in log.rows])

    # outline (op, ranks, row count, first and last row) -> the first log of it, and the logs of
    # that outline by all their rows (filled only once a second log has the outline)
    seen: Dict[tuple, Tuple[Any, Dict[str, Any]]] = {}
    for log in logs:
        if not log.rows:  # a test that printed no row repeats nothing
            continue
        outline = (log.op, tuple((r.host, r.device, r.bus_id) for r in log.ranks), len(log.rows),
                   row(log.rows[0]), row(log.rows[-1]))
        if outline not in seen:
            seen[outline] = (log, {})
            continue
        one, by_rows = seen[outline]
        if not by_rows:
            by_rows[full(one)] = one
        first = by_rows.setdefault(full(log), log)
        if first is not log:
            where = (f"{Path(log.source).name} holds the same {log.op} output twice (rows from line "
                     f"{first.rows[0].line} and from line {log.rows[0].line})" if first.source == log.source
                     else f"{Path(log.source).name} repeats the {log.op} output of {Path(first.source).name}")
            raise UsageError(f"{where}: its measurements would be counted twice; give each test once")


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
            printed = from_nccl_tests(rank.bus_id)  # a device (0000:b4:00); a bus alone (0x1b) can't tell
            if is_value(gpu.pci_bus_id) and isinstance(printed, PciAddress):
                at = try_parse(str(gpu.pci_bus_id))
                if at is None or at.device_key != printed.device_key:
                    raise UsageError(f"{where}: GPU {key} is at {gpu.pci_bus_id}, but {Path(log.source).name} ran "
                                     f"device {key} at {rank.bus_id}: it describes another machine")


def _same_model(a: str, b: str) -> bool:
    """Model names as nccl-tests and nvidia-smi print them ('NVIDIA GeForce RTX 2080 Ti')."""
    norm = [s.lower().replace("nvidia", "").replace(" ", "") for s in (a, b)]
    return norm[0] == norm[1] or norm[0] in norm[1] or norm[1] in norm[0]


IMPORTER = Importer(
    name="nccl-tests", parse=parse_nccl_tests_import, stdin=False, metavar="LOG",
    help="""Read nccl-tests or rccl-tests text output (all_reduce_perf & co., any version) into
    measurements.

    Times, algbw, busbw and #wrong are kept as printed; "Avg bus bandwidth" (nccl-tests' mean
    over all sizes, not the peak) is kept beside the peak busbw. Rows without their header are
    read by their column count; a log that names no collective or rank count gets them from
    busbw / algbw where only one fits (and says so), else --op and --ranks name them.
    """,
    options=(Option("--op", "op", "The collective when neither the log nor its file name says it "
                    "(all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv...)."),
             Option("--ranks", "ranks", "The number of ranks of a log without its '# Using devices' rank lines "
                    "(rows pasted alone, `kubectl logs --tail`).", kind="int", metavar="N"),
             Option("--nics", "nics", NICS_HELP, metavar="[HOST=]FILE", multiple=True)),
)
