"""`gputopo import nccl-tests LOG...`: nccl-tests output as a gputopo run folder."""

from __future__ import annotations

import sys

import click

from gputopo.cli.group import cli
from gputopo.cli.history_hook import after_run, history_options
from gputopo.cli.options import console
from gputopo.importers.job_nics import NICS_HELP


@cli.group(name="import")
def import_group():
    """Bring results of other tools into gputopo run folders (reports, diff, check)."""


def topo_option(fn):
    """`--topo FILE`, shared by the importers: the machine's saved `nvidia-smi topo -m` text (or
    `gputopo scan --json` output), so imported pairs are judged per link class."""
    return click.option("--topo", "topo_file", type=click.Path(dir_okay=False),
                        help="Saved `nvidia-smi topo -m` text (or `gputopo scan --json` output) of the machine "
                             "the output came from: pairs are then judged per link class; a topology of "
                             "another machine (other GPU count, model or bus ids) is refused.")(fn)


def load_topo_option(topo_file):
    """The --topo file's Topology, or None; one line and exit 2 when it cannot be read."""
    if not topo_file:
        return None
    from gputopo.importers.user_inputs import load_topo_file

    return load_topo_file(topo_file)


def out_option(fn):
    return click.option("--out", "out_dir", type=click.Path(file_okay=False),
                        help="Run folder to write (default: a new timestamped folder under reports/).")(fn)


@import_group.command(name="nvbandwidth")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
@out_option
@topo_option
@history_options
def nvbandwidth(files, out_dir, topo_file):
    """Read nvbandwidth output (text, any version from 0.2 to 0.8, or `nvbandwidth -j` JSON; `-`
    reads stdin) into a run folder: every testcase's matrix (CE and SM, read and write, uni- and
    bidirectional, host <-> device, device <-> device, all-to-one / one-to-all, latency).

    \b
    Examples:
      nvbandwidth > nvb.txt; gputopo import nvbandwidth nvb.txt --topo topo.txt
      nvbandwidth -j | gputopo import nvbandwidth -
    """
    from gputopo.importers.nvbandwidth_import import import_nvbandwidth

    res = import_nvbandwidth(list(files), out_dir=out_dir, topology=load_topo_option(topo_file),
                             topology_file=topo_file, argv=["import", "nvbandwidth", *sys.argv[3:]],
                             console=console())
    click.echo(f"\nrun folder: {res.run_dir}")
    after_run(res.run_dir, "import")


@import_group.command(name="p2pbw")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
@out_option
@topo_option
@history_options
def p2pbw(files, out_dir, topo_file):
    """Read cuda-samples' p2pBandwidthLatencyTest output (`-` reads stdin) into a run folder: the
    connectivity matrix, P2P=Disabled / P2P=Enabled bandwidth (uni- and bidirectional, writes and
    reads), latency (GPU and CPU timed), device names and bus ids. Peer copies slower than the
    P2P=Disabled copies of the same pair are reported as `p2p-slower-than-staged`.

    \b
    Example:
      ./p2pBandwidthLatencyTest > p2p.txt; gputopo import p2pbw p2p.txt --topo topo.txt
    """
    from gputopo.importers.p2pbw_import import import_p2pbw

    res = import_p2pbw(list(files), out_dir=out_dir, topology=load_topo_option(topo_file), topology_file=topo_file,
                       argv=["import", "p2pbw", *sys.argv[3:]], console=console())
    click.echo(f"\nrun folder: {res.run_dir}")
    after_run(res.run_dir, "import")


@import_group.command(name="ibstat")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@out_option
@history_options
def ibstat(file, out_dir):
    """Read saved `ibstat` or `ibv_devinfo` (-v for the rate) text of a node (`-` reads stdin)
    into a run folder holding its RDMA NIC ports, judged as `gputopo scan` judges them: a port
    not Active (Disabled: may be deliberate; Polling: cable or peer), an Active port below the
    rate of its peers of the same adapter model and link layer (nic-port-down, nic-rate).

    \b
    Examples:
      ibstat > ibstat.txt; gputopo import ibstat ibstat.txt
      ssh node7 ibv_devinfo -v | gputopo import ibstat -
    """
    from gputopo.importers.ibstat_import import import_ibstat, print_ports

    res = import_ibstat(file, out_dir=out_dir, argv=["import", "ibstat", *sys.argv[3:]], console=console(),
                        render=False)
    print_ports(res.read, console())
    from gputopo.report.render import render_run

    render_run(res.run_dir, console=console())
    click.echo(f"\nrun folder: {res.run_dir}")
    after_run(res.run_dir, "import")


@import_group.command(name="perftest")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, allow_dash=True))
@out_option
@click.option("--ibstat", "ibstat_file", type=click.Path(dir_okay=False),
              help="Saved `ibstat` (or `ibv_devinfo -v`) text of the node: the rate of the port perftest ran on, "
                   "which its output does not print, so the bandwidth can be judged.")
@click.option("--topo", "topo_file", type=click.Path(dir_okay=False),
              help="`gputopo scan --json` of the node, with its NIC ports: the port's rate (as --ibstat).")
@history_options
def perftest(files, out_dir, ibstat_file, topo_file):
    """Read linux-rdma/perftest bandwidth output (ib_write_bw, ib_read_bw, ib_send_bw; with or
    without --use_cuda; `-` reads stdin), or its --out_json file, into a run folder. BW in MB/sec
    (before perftest 24.07), MiB/sec (since; both 2^20 bytes/s) or Gb/sec (--report_gbits) is kept
    as printed and as Gb/s. The largest message size's average is judged against the rate of the
    port it ran on (perftest's error or the command line's -i; else port 1, said as assumed) from
    --ibstat or --topo; without either it is stated, not judged. A failed run (memory
    registration, completion errors, the peer not reached, the port down) is a finding saying what
    it usually means.

    \b
    Examples:
      ib_write_bw -d mlx5_0 -s 1M --report_gbits peer > bw.txt 2>&1
      ibstat > ibstat.txt; gputopo import perftest bw.txt --ibstat ibstat.txt
      ib_write_bw -d mlx5_0 --out_json --out_json_file=bw.json peer; gputopo import perftest bw.json
    """
    from gputopo.importers.perftest_import import import_perftest

    res = import_perftest(list(files), out_dir=out_dir, topology=load_topo_option(topo_file), topology_file=topo_file,
                          ibstat_file=ibstat_file, argv=["import", "perftest", *sys.argv[3:]], console=console())
    click.echo(f"\nrun folder: {res.run_dir}")
    after_run(res.run_dir, "import")


@import_group.command(name="nccl-tests")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@out_option
@click.option("--op", help="The collective when neither the log nor its file name says it "
              "(all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv...).")
@click.option("--ranks", type=int, metavar="N", help="The number of ranks of a log without its "
              "'# Using devices' rank lines (rows pasted alone, `kubectl logs --tail`).")
@topo_option
@click.option("--nics", "nics", multiple=True, metavar="[HOST=]FILE", help=NICS_HELP)
@history_options
def nccl_tests(logs, out_dir, op, ranks, topo_file, nics):
    """Read nccl-tests or rccl-tests text output (all_reduce_perf & co., any version) into
    measurements.

    Times, algbw, busbw and #wrong are kept as printed; "Avg bus bandwidth" (nccl-tests' mean
    over all sizes, not the peak) is kept beside the peak busbw. Rows without their header are
    read by their column count; a log that names no collective or rank count gets them from
    busbw / algbw where only one fits (and says so), else --op and --ranks name them.
    """
    from gputopo.importers.nccl_tests_import import import_nccl_tests

    res = import_nccl_tests(logs, out_dir=out_dir, op=op, ranks=ranks, topology=load_topo_option(topo_file),
                            topology_file=topo_file, nics=list(nics),
                            argv=["import", "nccl-tests", *sys.argv[3:]], console=console())
    click.echo(f"\nrun folder: {res.run_dir}")
    after_run(res.run_dir, "import")


@import_group.command(name="kernel-log")
@click.argument("log", type=click.Path(dir_okay=False, allow_dash=True))
@out_option
@click.option("--host", "host", metavar="NAME",
              help="Read only this host's lines of a journal/syslog that holds several hosts.")
@topo_option
@history_options
def kernel_log(log, out_dir, host, topo_file):
    """Read a saved kernel log (dmesg, dmesg -T, journalctl -k, syslog; - for stdin) into a run
    folder whose GPUs carry the Xid events the log names per PCI bus id, judged like a scan's.

    \b
    Examples:
      sudo dmesg -T > kern.log && gputopo import kernel-log kern.log
      journalctl -k -b -1 | gputopo import kernel-log -
      gputopo import kernel-log kern.log --topo scan.json   # onto the machine's own GPU numbers

    The log names GPUs by PCI bus id only, so --topo must have every GPU's bus id (`gputopo scan
    --json` output, not `nvidia-smi topo -m` text).
    """
    from gputopo.importers.kernel_log_import import import_kernel_log

    res = import_kernel_log(log, out_dir=out_dir, argv=["import", "kernel-log", *sys.argv[3:]],
                            console=console(), host=host, topology=load_topo_option(topo_file),
                            topology_file=topo_file)
    click.echo(f"\nrun folder: {res.run_dir}")
    after_run(res.run_dir, "import")


@import_group.command(name="nccl-debug")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--into", "into", type=click.Path(file_okay=False),
              help="A run folder of this machine: attach NCCL's transport per pair to it and re-render "
                   "its report (the pair table's 'NCCL via' column and the DP-vs-DDP story).")
@click.option("--json", "as_json", is_flag=True, help="Print the pairs as JSON.")
@topo_option
def nccl_debug(logs, into, as_json, topo_file):
    """Read NCCL_DEBUG=INFO output of your own job (one file per rank or the whole job log,
    e.g. from NCCL_DEBUG_FILE=nccl.%h.%p.log) and say which transport NCCL used per GPU pair:
    P2P (IPC, CUMEM, direct pointer), SHM (host memory) or NET (IB, Socket).

    \b
    Examples:
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV torchrun ... 2> job.log
      gputopo import nccl-debug job.log
      gputopo import nccl-debug job.log --into reports/gpu-node-07-20260101-120000
      gputopo import nccl-debug job.log --topo topo.txt    # pairs named by GPU and link class

    --topo (without --into) matches the log's GPUs to the machine's, by bus id (a `gputopo scan
    --json` topology has them), else by NVML index.
    """
    from gputopo.importers.nccl_debug import document_json, import_nccl_debug

    if into and topo_file:  # before reading either file: they would disagree on the machine
        from gputopo.errors import UsageError

        raise UsageError(f"--topo {topo_file}: --into {into} matches the log to that run's own "
                         "topology; give one of --into and --topo")
    topology = load_topo_option(topo_file)
    doc = import_nccl_debug(list(logs), into=into, topology=topology, topology_file=topo_file)
    from gputopo.report.nccl_debug_findings import problem_findings, verdict
    from gputopo.report.rules import nccl_debug_log_findings

    said = {"topology_notes": list(topology.notes)} if topology is not None and topology.notes else {}  # cut, no legend
    if into:
        from gputopo.report.run_folder import load_run

        topology = load_run(into).topology
    findings = nccl_debug_log_findings(doc, topology)
    judged = findings + problem_findings(doc)
    if as_json:
        click.echo(document_json(dict(doc, verdict=verdict(doc, judged), findings=[f.to_json() for f in judged],
                                      **said)))
    else:
        _print_transports(doc)
        for note in said.get("topology_notes", []):  # what reading --topo said, as `scan --from-smi` says it
            click.echo(f"note: {note}")
        _print_findings(doc, judged, verdict(doc, judged))
    if into:
        from gputopo.report.render import render_run

        render_run(into, console=None if as_json else console())
        if not as_json:
            click.echo(f"\nrun folder: {into} (nccl_debug.json added, report re-rendered)")


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
