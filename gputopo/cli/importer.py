"""`gputopo import TOOL FILE...`: the import commands, made from the importers' registry
(importers/run.py IMPORTERS): one command maker for the importers that make a run folder, one for
those that attach to an existing one (``--into``); nccl-debug's own printing (the transport
table, its findings)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gputopo.cli.group import cli
from gputopo.cli.history_hook import after_run, history_options
from gputopo.cli.options import console
from gputopo.importers.contract import Imported, Importer, Option
from gputopo.importers.run import IMPORTERS


@cli.group(name="import")
def import_group():
    """Bring results of other tools into gputopo run folders (reports, diff, check)."""


#: ``--topo``'s help, shared by the importers that match an output to the machine's GPUs.
TOPO_HELP = ("Saved `nvidia-smi topo -m` text (or `gputopo scan --json` output) of the machine the output "
             "came from: pairs are then judged per link class; a topology of another machine (other GPU "
             "count, model or bus ids) is refused.")


def load_topo_option(topo_file):
    """The --topo file's Topology, or None; one line and exit 2 when it cannot be read."""
    if not topo_file:
        return None
    from gputopo.importers.user_inputs import load_topo_file

    return load_topo_file(topo_file)


def _click_option(opt: Option):
    """An importer's declared option (importers/contract.py) as a click option."""
    kw: dict = {"help": opt.help, "multiple": opt.multiple}
    if opt.metavar:
        kw["metavar"] = opt.metavar
    if opt.kind == "int":
        kw["type"] = int
    elif opt.kind == "file":
        kw["type"] = click.Path(dir_okay=False)
    elif opt.kind == "flag":
        kw["is_flag"] = True
    return click.option(opt.flag, opt.name, **kw)


def _folder_command(imp: Importer):
    """`gputopo import NAME FILE...`: the importer's files and options, then run_import (the
    folder, its report, the history), the same for every importer that makes a run folder."""
    def command(files, out_dir, topo_file=None, **options):
        from gputopo.importers.run import run_import

        options = {k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items()}
        run_import(imp.name, list(files) if imp.many else [files], out_dir=out_dir,
                   topology=load_topo_option(topo_file), topology_file=topo_file,
                   argv=["import", imp.name, *sys.argv[3:]], console=console(), show=SHOW.get(imp.name),
                   announce=click.echo, after=lambda run_dir: after_run(run_dir, "import"), **options)

    command.__doc__ = imp.help
    command = history_options(command)
    for opt in reversed(imp.options):
        command = _click_option(opt)(command)
    if imp.topo:
        command = click.option("--topo", "topo_file", type=click.Path(dir_okay=False),
                               help=imp.topo_help or TOPO_HELP)(command)
    command = click.option("--out", "out_dir", type=click.Path(file_okay=False),
                           help="Run folder to write (default: a new timestamped folder under reports/).")(command)
    return import_group.command(name=imp.name)(_files_argument(imp)(command))


def print_ports(imported: Imported, c) -> None:
    """`import ibstat`'s NIC ports, as the scan's NIC port table prints them (report/network_checks.py
    port_cells), before the report."""
    from rich.table import Table

    from gputopo.model import Nic
    from gputopo.report.network_checks import port_cells

    read = imported.parsed
    c.print(f"RDMA NIC ports ({read.form} text {Path(read.source).name}: {read.adapters} adapter(s))", markup=False)
    t = Table(show_edge=False, pad_edge=False)
    for col in ("port", "state", "physical", "rate", "link layer", "adapter"):
        t.add_column(col)
    for p in read.ports:
        t.add_row(*port_cells(Nic(label=p.device, device=p.device), p)[:6])
    c.print(t)


def _attach_command(imp: Importer):
    """`gputopo import NAME FILE... [--into DIR]` of an importer that attaches to a run folder
    (nccl-debug): the files read and printed (its ``PRINT_ATTACHED`` entry: tables, or ``--json``),
    and with ``--into`` its document added to that folder (run_import) and the folder's report
    rendered again. ``--into`` and ``--topo`` together are refused before either is read: the
    folder's own topology is the machine's."""
    if imp.name not in PRINT_ATTACHED:
        raise AssertionError(f"importer {imp.name}: an attaching importer needs its PRINT_ATTACHED entry")

    def command(files, into, as_json, topo_file=None, **options):
        from gputopo.importers.run import run_import

        if into and topo_file:  # before reading either file: they would disagree on the machine
            from gputopo.errors import UsageError

            raise UsageError(f"--topo {topo_file}: --into {into} matches the log to that run's own "
                             "topology; give one of --into and --topo")
        topology = load_topo_option(topo_file)
        options = {k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items()}
        res = run_import(imp.name, list(files) if imp.many else [files], into=into, topology=topology,
                         topology_file=topo_file, render=False, **options)
        PRINT_ATTACHED[imp.name](res.imported, topology, as_json)
        if into:
            from gputopo.report.render import render_run

            render_run(into, console=None if as_json else console())
            if not as_json:
                click.echo(f"\nrun folder: {into} (imported.json: its {imp.name} import added, report re-rendered)")

    command.__doc__ = imp.help
    for opt in reversed(imp.options):
        command = _click_option(opt)(command)
    if imp.topo:
        command = click.option("--topo", "topo_file", type=click.Path(dir_okay=False),
                               help=imp.topo_help or TOPO_HELP)(command)
    command = click.option("--json", "as_json", is_flag=True, help=imp.json_help or "Print it as JSON.")(command)
    command = click.option("--into", "into", type=click.Path(file_okay=False),
                           help=imp.into_help or "A run folder to attach it to (its report re-rendered).")(command)
    return import_group.command(name=imp.name, help=imp.help)(_files_argument(imp)(command))


def _files_argument(imp: Importer):
    """FILE / FILES... (LOG / LOGS...) of an importer: its metavar, ``-`` where it reads stdin."""
    path = click.Path(dir_okay=False, allow_dash=imp.stdin)
    if imp.many:
        return click.argument("files", nargs=-1, required=True, type=path, metavar=f"{imp.metavar}S...")
    return click.argument("files", metavar=imp.metavar, type=path)


def print_nccl_debug(imported: Imported, topology, as_json: bool) -> None:
    """`import nccl-debug`'s output: the transport per pair, what reading --topo said and the
    log's findings with its verdict; or all of it as one JSON document (``--json``)."""
    from gputopo.importers.nccl_debug import document_json
    from gputopo.report.nccl_debug_findings import problem_findings, verdict
    from gputopo.report.rules import nccl_debug_log_findings

    doc = {k: v for k, v in imported.imports[0].items() if k != "tool"}  # the log's document, as --json prints it
    said = {"topology_notes": list(topology.notes)} if topology is not None and topology.notes else {}  # cut, no legend
    findings = nccl_debug_log_findings(doc, imported.topology)
    judged = findings + problem_findings(doc)
    if as_json:
        click.echo(document_json(dict(doc, verdict=verdict(doc, judged), findings=[f.to_json() for f in judged],
                                      **said)))
        return
    _print_transports(doc)
    for note in said.get("topology_notes", []):  # what reading --topo said, as `scan --from-smi` says it
        click.echo(f"note: {note}")
    _print_findings(doc, judged, verdict(doc, judged))


#: What an import prints before its report, by importer.
SHOW = {"ibstat": print_ports}
#: What an attaching import prints (its whole output: it makes no report of its own), by importer.
PRINT_ATTACHED = {"nccl-debug": print_nccl_debug}

for _imp in IMPORTERS.values():
    (_folder_command if _imp.makes_folder else _attach_command)(_imp)


def _print_transports(doc) -> None:
    from rich.table import Table

    from gputopo.probe.nccl_log import KIND_WORDS

    c = console()
    t = Table(title=f"NCCL transport per GPU pair ({doc['channel_lines']} channel lines in "
                    f"{len(doc['files'])} file(s))", title_justify="left", show_edge=False, pad_edge=False)
    classes = any("link_class" in r for r in doc["pairs"])
    for col in ("GPUs (host/bus id or NVML index)", "run GPUs", *(("class",) if classes else ()),
                "NCCL used", "via", "channels"):
        t.add_column(col)
    for r in doc["pairs"]:
        t.add_row(" <-> ".join(r["endpoints"]), ",".join(map(str, r.get("gpus") or [])) or "-",
                  *((r.get("link_class") or "?",) if classes else ()), used_cell(r),
                  ", ".join(r["via"]), str(r["channels"]))
    c.print(t)
    for line in setup_failure_lines(doc):
        c.print(line, markup=False)
    for kind in sorted({r["kind"] for r in doc["pairs"]}):
        if kind in KIND_WORDS:
            c.print(f"  {kind}: {KIND_WORDS[kind]}")
    if doc["settings"]:
        c.print("NCCL settings from the environment: "
                + ", ".join(f"{k}={v}" for k, v in sorted(doc["settings"].items())))
    for line in network_lines(doc):
        c.print(line, markup=False)
    for problem in doc.get("problems") or []:
        c.print(f"Not read: {problem}", markup=False)
    if not doc["pairs"]:
        if any(p.get("trace") for p in doc.get("processes") or []) or doc.get("error_line_count"):
            c.print("No channel lines: NCCL stopped before connecting (see below).")
        else:
            c.print("No channel lines: NCCL logs them with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS including INIT.")


def used_cell(rec) -> str:
    """The 'NCCL used' cell of a pair: its transport, or that NCCL tried it and the set-up failed
    (a transport whose connection failed was not used)."""
    bad = rec.get("setup_failed")
    tried = "/".join(rec.get("kinds") or [rec["kind"]])
    if rec.get("used") is None and rec.get("setup_unknown"):
        return f"not known ({tried} tried, an error followed: whose not told)"
    if not bad:
        return rec["kind"]
    if rec.get("used") is False:
        how = "set-up failed" if bad.get("failed") else "set-up not finished"
        return f"none ({tried} tried, {how})"
    return f"{rec['kind']} (set-up failed on {bad['lines']} of {rec['channels']} lines)"


def setup_failure_lines(doc) -> list:
    """One line per pair whose connections NCCL tried and failed to set up, naming the error line."""
    out = []
    for r in doc.get("pairs") or []:
        bad = r.get("setup_failed")
        if not bad:
            continue
        what = "its set-up failed" if bad.get("failed") else \
            f"its set-up did not finish ({bad.get('transport') or 'a connection'} failed first)"
        at = f" ({bad['at']})" if bad.get("at") else ""
        basis = (" (the log has no host:pid:tid prefixes: its lines read in order as one process's)"
                 if bad.get("basis") == "one process" else "")
        out.append(f"  {' <-> '.join(r['endpoints'])}: NCCL tried {', '.join(bad['via'])} on {bad['lines']} channel "
                   f"line(s) and {what}: `{bad['error']}`{at}; not a transport it used{basis}")
    for r in doc.get("pairs") or []:
        unknown = r.get("setup_unknown")
        if not unknown:
            continue
        at = f" ({unknown['at']})" if unknown.get("at") else ""
        used = "not known" if r.get("used") is None else "used on its other lines"
        out.append(f"  {' <-> '.join(r['endpoints'])}: {', '.join(unknown['via'])} on {unknown['lines']} channel "
                   f"line(s): {unknown.get('why') or 'an error followed'} (`{unknown['error']}`{at}); "
                   f"whether NCCL used it: {used}")
    return out


def network_lines(doc) -> list:
    """The network facts of the log, in words: per host the NICs NCCL listed and the network used,
    GPUDirect RDMA per connection, lines without a host prefix."""
    out = []
    if doc.get("no_prefix_lines"):
        out.append(f"{doc['no_prefix_lines']} NCCL line(s) without the host:pid:tid prefix (NCCL prints it on every "
                   "line but its version line: cut off after the run): their host is unknown")
    net = doc.get("network") or {}
    for host, f in sorted((net.get("hosts") or {}).items()):
        parts = []
        if f.get("networks_used"):  # "Using network X": chosen; used where a connection went over it
            over = {str(cn["net"]) for cn in (net.get("connections") or []) if cn["host"].split("#", 1)[0] == host}
            used = [n for n in f["networks_used"] if n in over or not n.startswith("Socket")]
            idle = [n for n in f["networks_used"] if n not in used]
            if used:
                parts.append("used " + ", ".join(used))
            if idle:
                parts.append("chose " + ", ".join(idle) + " (no connection over it in the log)")
        for name, devs in sorted((f.get("devices") or {}).items()):
            parts.append(f"{name} devices " + " ".join(
                f"[{d['index']}]{d['device']}" + (f"/{d['link']}" if d.get("link") else "") for d in devs))
        if f.get("no_ib_device"):
            parts.append("no IB device found")
        if f.get("plugins_loaded"):
            parts.append("plugin(s) loaded: " + ", ".join(f["plugins_loaded"]))
        off = [h for h in net.get("gdr_hcas") or [] if h["host"] == host and not h["gdr"]]
        if off:
            parts.append("GPU Direct RDMA disabled for " + ", ".join(f"{h['net']} HCA {h['index']} '{h['device']}'"
                                                                      for h in off))
        out.append(f"Network on {host}: " + "; ".join(parts or ["-"]))
    conns = net.get("connections") or []
    if conns:
        per: dict = {}
        for cn in conns:
            key = f"NET/{cn['net']}/{cn['dev']}" + (f" ({cn['device']})" if cn.get("device") else "")
            per.setdefault((cn["host"], key), [0, 0])[0 if cn["gdr"] else 1] += cn["lines"]
        for (host, key), (gdr, plain) in sorted(per.items()):
            how = "TCP sockets (no GPUDirect RDMA)" if key.startswith("NET/Socket/") else \
                "GPUDirect RDMA on every line" if not plain else "no GPUDirect RDMA" if not gdr else \
                f"GPUDirect RDMA on {gdr}, not on {plain}"
            out.append(f"  {host} {key}: {gdr + plain} connection line(s), {how}")
    return out


def _print_findings(doc, findings, verdict_word) -> None:
    c = console()
    c.print(f"verdict: {verdict_word}" + ("" if findings else " (no findings)"), markup=False)
    unread = [f for f in findings if f.kind == "incomplete-data"]
    if unread:
        c.print(f"not read: {len(unread)} thing(s) of the log could not be read (the 'Not read' "
                "lines above): what is shown is part of the job, and the verdict judges only that part", markup=False)
    for f in findings:
        if f.kind == "incomplete-data":
            continue
        c.print(f"{f.severity.upper()} {f.kind}: {f.message}", markup=False)
        if f.cause:
            c.print(f"    likely cause: {f.cause}", markup=False)
        for r in f.remedies[:2]:
            c.print(f"    - {r}", markup=False)
