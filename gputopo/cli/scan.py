"""`gputopo scan`: the NVLink/PCIe matrix, P2P status, host IOMMU/ACS, and the problems."""

from __future__ import annotations

import click

from gputopo.cli.group import cli
from gputopo.cli.options import console, sim_option
from gputopo.errors import UsageError


def load_topology(sim: str | None = None, from_smi: str | None = None):
    """The topology a command works on: a simulated machine, saved smi text, or this machine."""
    if sim and from_smi:
        raise UsageError("--sim and --from-smi are exclusive: pick one source")
    if sim:
        from gputopo.sim.scan import scan_simulated

        return scan_simulated(sim)
    if from_smi:
        from gputopo.inputs import MAX_SMI_BYTES, read_user_bytes
        from gputopo.probe.smi_parser import (
            decode_smi_bytes,
            topology_from_smi_file_text,
        )

        data = read_user_bytes(from_smi, "smi text", MAX_SMI_BYTES, stdin_ok=True)
        source = "<stdin>" if from_smi == "-" else from_smi
        return topology_from_smi_file_text(decode_smi_bytes(data), source=source)
    from gputopo.probe.scan import scan_real

    return scan_real()


@cli.command()
@sim_option
@click.option("--from-smi", "from_smi", metavar="FILE",
              help="Build the model from saved `nvidia-smi topo -m` (and `topo -p2p`) text; - for stdin.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "smi"]), default="table",
              show_default=True, help="smi prints exactly the `nvidia-smi topo -m` text form.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json (with schema_version).")
@click.option("--csv", "as_csv", is_flag=True, help="Same as --format csv (one row per GPU pair).")
@click.option("--no-color", is_flag=True, help="No colours in the table.")
def scan(sim, from_smi, fmt, as_json, as_csv, no_color):
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
    from gputopo.report.topology_checks import topology_findings

    topo = load_topology(sim, from_smi)
    problems = topology_findings(topo)
    if fmt == "json":
        from gputopo.report.scan_view import scan_json

        click.echo(scan_json(topo, problems))
    elif fmt == "csv":
        from gputopo.report.scan_view import scan_csv

        click.echo(scan_csv(topo), nl=False)
    elif fmt == "smi":
        from gputopo.probe.smi_format import format_topo_matrix

        click.echo(format_topo_matrix(topo), nl=False)
    else:
        from gputopo.report.scan_view import render_scan

        render_scan(console(no_color), topo, problems)
