"""`gputopo scan`: the NVLink/PCIe matrix, P2P status, host IOMMU/ACS, and the problems."""

from __future__ import annotations

import click

from gputopo.cli.group import cli
from gputopo.cli.history_hook import after_scan, history_options
from gputopo.cli.options import console, sim_option
from gputopo.errors import UsageError


def _saved_kernel_log(path: str):
    """(what the saved log says, where from) for ``scan --kernel-log FILE`` (- for stdin), read
    streamed by the reader `import kernel-log` uses; exit 2 when it is empty, binary or not a kernel
    log. Its unreadable lines and driver lines become findings (report/kernel_log_findings.py)."""
    from gputopo.importers.kernel_log_import import read_kernel_log_file

    read = read_kernel_log_file(path, several_hosts_ok=True)
    from gputopo.probe.kernel_log import SAVED_LOG
    from gputopo.text_input import display_name

    where = SAVED_LOG + display_name(path)
    if len(read.hosts) > 1:
        raise UsageError(f"--kernel-log {path}: lines of {len(read.hosts)} hosts ({', '.join(read.hosts[:6])}): "
                         "give only this machine's lines (e.g. grep ' HOSTNAME kernel:')")
    return read, where


def load_topology(sim: str | None = None, from_smi: str | None = None, kernel_log: str | None = None):
    """The topology a command works on: a simulated machine, saved smi text, or this machine
    (``kernel_log``: a saved kernel log read for Xid events instead of the live one)."""
    if sim and from_smi:
        raise UsageError("--sim and --from-smi are exclusive: pick one source")
    if kernel_log and from_smi:
        raise UsageError("--kernel-log needs a scan of the GPUs (NVML or --sim), not --from-smi: "
                         "use `gputopo import kernel-log FILE` to judge a log on its own")
    saved = _saved_kernel_log(kernel_log) if kernel_log else None
    if sim:
        from gputopo.sim.scan import scan_simulated

        return scan_simulated(sim, saved_kernel_log=saved)
    if from_smi:
        from gputopo.inputs import MAX_SMI_BYTES, read_user_bytes
        from gputopo.probe.smi import (
            decode_smi_bytes,
            topology_from_smi_file_text,
        )

        data = read_user_bytes(from_smi, "smi text", MAX_SMI_BYTES, stdin_ok=True)
        source = "<stdin>" if from_smi == "-" else from_smi
        notes: list[str] = []
        topo = topology_from_smi_file_text(decode_smi_bytes(data), source=source, notes=notes)
        for note in notes:  # on stderr: --format smi/json/csv output stays as it is
            click.echo(f"gputopo: note: {source}: {note}", err=True)
        return topo
    from gputopo.probe.scan import scan_real

    return scan_real(saved_kernel_log=saved)


@cli.command()
@sim_option
@click.option("--from-smi", "from_smi", metavar="FILE",
              help="Build the model from saved `nvidia-smi topo -m` (and `topo -p2p`) text; - for stdin.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "smi"]), default="table",
              show_default=True, help="smi prints exactly the `nvidia-smi topo -m` text form.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json (with schema_version).")
@click.option("--csv", "as_csv", is_flag=True, help="Same as --format csv (one row per GPU pair).")
@click.option("--no-color", is_flag=True, help="No colours in the table.")
@click.option("--kernel-log", "kernel_log", metavar="FILE", type=click.Path(dir_okay=False),
              help="Read Xid events and NVIDIA driver lines from this saved kernel log (dmesg, dmesg -T, "
                   "journalctl -k, syslog) instead of the live one, judged as `import kernel-log` judges them.")
@history_options
def scan(sim, from_smi, fmt, as_json, as_csv, no_color, kernel_log):
    """Read the GPU interconnect: link class per pair (NV#, PIX, PXB, PHB, NODE, SYS), NVLink
    state and errors, PCIe generation/width, P2P status, NUMA/CPU affinity, host IOMMU/ACS,
    and the problems these facts reveal.

    \b
    Examples:
      gputopo scan                      # this machine, through NVML
      gputopo scan --sim seed-8gpu      # a built-in simulated machine
      gputopo scan --from-smi topo.txt --format smi
      gputopo scan --json > topo.json
    """
    if as_json and as_csv:
        raise UsageError("--json and --csv are exclusive")
    from gputopo.cli.strict import given

    chosen = given(click.get_current_context(), "fmt")
    if chosen and (as_json or as_csv) and fmt != ("json" if as_json else "csv"):
        raise UsageError(f"--format {fmt} and {'--json' if as_json else '--csv'} are exclusive; "
                         "give one")
    fmt = "json" if as_json else "csv" if as_csv else fmt
    from gputopo.report.rules import scan_findings

    topo = load_topology(sim, from_smi, kernel_log)
    problems = scan_findings(topo)
    if fmt == "json":
        from gputopo.report.scan_view import scan_json

        click.echo(scan_json(topo, problems))
    elif fmt == "csv":
        from gputopo.report.scan_view import scan_csv

        click.echo(scan_csv(topo), nl=False)
    elif fmt == "smi":
        from gputopo.probe.smi_format import format_topo_matrix

        try:
            text = format_topo_matrix(topo)
        except ValueError as e:  # a class that was never read (a row whose cells ran together): no text to write
            raise UsageError(f"cannot write this topology as `nvidia-smi topo -m` text: {e}") from None
        click.echo(text, nl=False)
    else:
        from gputopo.report.scan_view import render_scan

        render_scan(console(no_color), topo, problems)
    if not from_smi:  # saved text has no counters and no time of its own: not a scan of now
        after_scan(topo, problems, sim)
