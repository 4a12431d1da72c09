"""`gputopo export`: the scan and the history as Prometheus metrics, as node_exporter's
textfile or served on /metrics."""

from __future__ import annotations

import os

import click

from gputopo.cli.group import cli
from gputopo.cli.history_hook import history_options, history_path
from gputopo.cli.options import sim_option
from gputopo.cli.strict import FiniteFloat, refuse_unused
from gputopo.errors import UsageError


@cli.command()
@sim_option
@click.option("--textfile", "textfile_dir", type=click.Path(file_okay=False),
              help="Scan once and write DIR/gputopo.prom for node_exporter's textfile collector "
                   "(atomic rename).")
@click.option("--listen", "listen", metavar="HOST:PORT",
              help="Serve /metrics over HTTP (e.g. 127.0.0.1:9400; give another address only to "
                   "expose it beyond this machine).")
@click.option("--interval", "interval_s", type=FiniteFloat(min=0), default=15.0, show_default=True,
              help="--listen: scan at most once per this many seconds; scrapes in between get the last scan.")
@history_options(records=False)
@click.pass_context
def export(ctx, sim, textfile_dir, listen, interval_s):
    """Export GPU and link state as Prometheus metrics: NVLinks up, PCIe width/generation,
    NVLink/PCIe/ECC error counters, remapped rows, Xids, temperature, power, each pair's link
    class and last measured GB/s from the history, findings, scan/run times.

    \b
    Examples:
      gputopo export --textfile /var/lib/node_exporter/textfile   # from cron / a systemd timer
      gputopo export --listen 127.0.0.1:9400                      # scrape http://127.0.0.1:9400/metrics
      gputopo export --sim seed-8gpu --textfile /tmp/prom
    """
    if bool(textfile_dir) == bool(listen):
        raise UsageError("give one of --textfile DIR or --listen HOST:PORT")
    if textfile_dir:  # one scan, written once: no interval applies
        refuse_unused(ctx, ("interval_s",), "with --textfile (it scans once)")
    from gputopo.export.server import make_server, parse_listen
    from gputopo.export.sources import make_cache

    host, port = parse_listen(listen) if listen else ("", 0)  # bad input before any scan
    if textfile_dir:
        from gputopo.writable import check_writable_dir

        check_writable_dir(textfile_dir, "--textfile")
    cache = make_cache(sim, history_path(reading=True), float("inf") if textfile_dir else interval_s)
    cache.current()  # the first scan now: no driver or GPU is exit 3, not a server of nothing
    if cache.last_exception is not None:
        raise cache.last_exception
    if textfile_dir:
        from gputopo.export.textfile import write_textfile

        os.makedirs(textfile_dir, exist_ok=True)
        path = write_textfile(cache, textfile_dir)
        click.echo(f"wrote {path}")
        return
    server = make_server(cache, host, port)
    click.echo(f"serving http://{host}:{server.server_address[1]}/metrics "
               f"(scans at most every {interval_s:g} s{', SIMULATED ' + sim if sim else ''}); Ctrl-C stops",
               err=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
