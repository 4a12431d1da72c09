"""`gputopo import nccl-tests LOG...`: nccl-tests output as a gputopo run folder."""

from __future__ import annotations

import sys

import click

from gputopo.cli.main import cli
from gputopo.cli.options import console


@cli.group(name="import")
def import_group():
    """Bring results of other tools into gputopo run folders (reports, diff, check)."""


@import_group.command(name="nccl-tests")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Run folder to write (default: a new timestamped folder under reports/).")
@click.option("--op", help="The collective when neither the log nor its file name says it "
              "(all_reduce, all_gather, reduce_scatter, broadcast, reduce, alltoall, sendrecv...).")
@click.option("--topo", "topo_file", type=click.Path(dir_okay=False),
              help="Saved `nvidia-smi topo -m` text (or `gputopo scan --json` output) of the machine the "
                   "logs ran on, to name the pairs' link classes; another machine's is refused.")
def nccl_tests(logs, out_dir, op, topo_file):
    """Read nccl-tests text output (all_reduce_perf & co., any version) into measurements.

    Times, algbw, busbw and #wrong are kept as printed; "Avg bus bandwidth" (nccl-tests' mean
    over all sizes, not the peak) is kept beside the peak busbw.
    """
    from gputopo.importers.nccl_import import import_nccl_tests

    topology = None
    if topo_file:
        from gputopo.importers.nccl_inputs import load_topo_file

        topology = load_topo_file(topo_file)
    res = import_nccl_tests(logs, out_dir=out_dir, op=op, topology=topology, topology_file=topo_file,
                            argv=["import", "nccl-tests", *sys.argv[3:]], console=console())
    click.echo(f"\nrun folder: {res.run_dir}")
