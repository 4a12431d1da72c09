"""`gputopo import nccl-tests LOG...`: write a run folder from nccl-tests output, like bench does,
so its results show in reports, `diff` and `check`.

Without a topology the folder holds only what the logs say (GPUs, hosts, bus ids); give the
machine's `nvidia-smi topo -m` output (``topology=``) to get link classes and expected rates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, List, Optional

from gputopo.errors import UsageError
from gputopo.model import Gpu, HostInfo, Topology
from gputopo.runfolder.imported import import_run_dir, write_imported_run
from gputopo.runfolder.layout import DEFAULT_BASE_DIR, NCCL_TESTS_JSON

from .nccl_inputs import refuse_duplicate_logs, refuse_duplicates, refuse_other_hosts, refuse_other_machine
from .nccl_tests import (NcclTestsLog, check_op, device_keys, log_measurements, log_summary,
                         normalize_bus_id, parse_nccl_tests_file)


@dataclass
class ImportResult:
    run_dir: Path
    logs: List[NcclTestsLog]
    summary: object = None  # gputopo.report.summary.Summary when rendered


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
                gpus[key] = Gpu(nvml_index=key, name=r.name or "?", pci_bus_id=normalize_bus_id(r.bus_id),
                                cuda_index=r.device)
    machine = "+".join(hosts) if hosts else "nccl-tests"
    host = HostInfo(hostname=hosts[0] if len(hosts) == 1 else machine)
    return Topology(gpus=[gpus[k] for k in sorted(gpus)], pairs=[], host=host, source="nccl-tests",
                    simulated=False, machine=machine)


def _class_for(topo: Optional[Topology], gpus) -> Optional[str]:
    from gputopo.report.expected import class_of

    lc = class_of(topo, gpus) if topo is not None and topo.pairs else None
    return str(lc) if lc is not None else None


def import_nccl_tests(paths: Iterable, *, out_dir=None, base_dir=DEFAULT_BASE_DIR, op: Optional[str] = None,
                      topology: Optional[Topology] = None, argv: Optional[List[str]] = None,
                      render: bool = True, console=None, topology_file: Optional[str] = None) -> ImportResult:
    """Parse the logs and write a run folder; returns where it went.

    ``out_dir``: the exact folder to write (created; refused if it already holds a run, since
    run folders are never overwritten); otherwise a new timestamped folder under ``base_dir``.
    ``op`` names the collective when neither the log nor its file name says it.
    Raises InputFileError for unreadable logs, UsageError for a bad op, an occupied out_dir, a log
    given twice, or a ``topology`` (read from ``topology_file``) of another machine.
    """
    paths = [Path(p) for p in paths]
    if not paths:
        raise UsageError("no nccl-tests log given")
    op = check_op(op)
    refuse_duplicates(paths)
    logs: List[NcclTestsLog] = []
    for p in paths:
        logs += parse_nccl_tests_file(p, op=op)
    refuse_duplicate_logs(logs)
    refuse_other_hosts(logs)
    if topology is not None:
        refuse_other_machine(topology, logs, topology_file)
    topo = topology or topology_from_logs(logs)
    run_dir = import_run_dir(out_dir, base_dir, topo.machine or "nccl-tests")
    write_imported_run(run_dir, source="nccl-tests", fabric="cuda", simulated=False, topology=topo,
                       argv=argv if argv is not None else ["import", "nccl-tests", *map(str, paths)],
                       options={"imported_from": [str(p) for p in paths], "op": op},
                       measurements=(m for log in logs
                                     for m in log_measurements(log, link_class=_class_for(topo, device_keys(log)[0]))),
                       document_name=NCCL_TESTS_JSON, document={"logs": [log_summary(lg) for lg in logs]})
    result = ImportResult(run_dir=run_dir, logs=logs)
    if render:
        from gputopo.report.render import render_run

        result.summary = render_run(run_dir, console=console)
    return result
