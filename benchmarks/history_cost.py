"""What the history and the exporter cost (issue 19): recording a 28-pair run, `gputopo history`
over 10,000 runs, one Prometheus scrape.

- record: one run of the simulated seed-8gpu (28 pairs; 12 series x 6 sizes per pair = 2,016
  figures; the scan's counters, 138 rows) into a database that already holds 100 runs of the
  machine, drift and counter-growth comparison included; median of --runs recordings.
- history: a database of 10,000 runs (28 pairs x 3 headline series each, counters, findings),
  then `gputopo history` as a whole process: all runs, `--pair 5,6`, `--since 7d --json`.
- scrape: /metrics of `gputopo export` over HTTP on 127.0.0.1 for seed-8gpu, with a fresh scan
  (interval 0) and from the cached scan; median of --runs scrapes.

    python benchmarks/history_cost.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gputopo.export.cache import ScanCache
from gputopo.export.server import make_server
from gputopo.export.sources import history_reader, judge
from gputopo.history.db import open_history
from gputopo.history.record import (
    Figure,
    RunRecord,
    counters_of,
    machine_identity,
    record_run,
)
from gputopo.recording import save
from gputopo.sim.description import load_description
from gputopo.sim.scan import scan_description

SERIES = [("p2p.copy", "i->j"), ("p2p.copy", "j->i"), ("p2p.copy_bidir", "both"), ("p2p.staged", "i->j"),
          ("p2p.staged", "j->i"), ("dp.scatter", None), ("dp.gather", None), ("dp.broadcast_coalesced", None),
          ("dp.reduce_add", None), ("collective.all_reduce", None), ("collective.broadcast", None),
          ("collective.all_gather", None)]
SIZES = [1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28]


def figures(topo, headline_only=False, scale=1.0):
    out = []
    for p in topo.pairs:
        i, j = p.gpus
        for series, d in (SERIES[:3] if headline_only else SERIES):
            direction = d.replace("i", str(i)).replace("j", str(j)) if d else None
            for size in ([SIZES[-1]] if headline_only else SIZES):
                out.append(Figure((i, j), str(p.link_class), series, direction, size,
                                  20.0 * scale * (1 + (i + j) % 3), "algbw", 0, "modeled", size == SIZES[-1]))
    return out


def record(t, topo, figs, counters):
    return RunRecord("bench", t, "sim-clock", ["bench", "--sim", "seed-8gpu"], None, True, "seed-8gpu",
                     "sim", "complete", "ok", 0, "bench", figs,
                     [{"kind": "iommu", "severity": "warning", "gpus": None, "message": "m"}], counters)


def median_ms(fn, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--history-runs", type=int, default=10_000)
    args = ap.parse_args()
    desc = load_description("seed-8gpu")
    topo = scan_description(desc)
    ident = machine_identity(topo, "seed-8gpu")
    counters = counters_of(topo)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "record.sqlite"
        conn = open_history(db)
        for k in range(100):
            record_run(conn, ident, record(1.79e9 + k * 86400, topo, figures(topo), counters))
        conn.close()
        full = figures(topo)
        t = [1.79e9 + 100 * 86400]

        def one():
            t[0] += 86400
            save(db, ident, record(t[0], topo, full, counters))

        rec_ms = median_ms(one, args.runs)
        print(f"record a 28-pair run ({len(full)} figures, {len(counters)} counters; 100 runs before it): "
              f"{rec_ms:.1f} ms (median of {args.runs})")

        big = Path(tmp) / "big.sqlite"
        conn = open_history(big)
        head = figures(topo, headline_only=True)
        t0 = time.perf_counter()
        now = time.time()
        for k in range(args.history_runs):
            record_run(conn, ident, record(now - (args.history_runs - k) * 3600, topo, head, counters))
        conn.close()
        fill_s = time.perf_counter() - t0
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        for label, extra in (("all runs", []), ("--pair 5,6", ["--pair", "5,6"]),
                             ("--since 7d --json", ["--since", "7d", "--json"])):
            times = []
            for _ in range(3):
                t1 = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "gputopo", "history", "--history", str(big), *extra],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, check=False)
                times.append(time.perf_counter() - t1)
                if proc.returncode:
                    sys.exit(proc.stderr)
            print(f"`gputopo history {label}` over {args.history_runs:,} runs ({len(head)} figures and "
                  f"{len(counters)} counters each): {statistics.median(times):.2f} s whole process "
                  f"(median of 3; filling the database took {fill_s:.0f} s)")

        for label, interval in (("fresh scan (interval 0)", 0.0), ("cached scan", 3600.0)):
            cache = ScanCache(lambda: scan_description(desc), judge, history_reader(db), interval)
            srv = make_server(cache, "127.0.0.1", 0)
            th = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
            th.start()
            url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"
            try:
                urllib.request.urlopen(url, timeout=60).read()  # warm: imports, first scan
                size = [0]

                def scrape(url=url, size=size):
                    size[0] = len(urllib.request.urlopen(url, timeout=60).read())

                ms = median_ms(scrape, args.runs)
            finally:
                srv.shutdown()
                srv.server_close()
            print(f"one scrape of /metrics, seed-8gpu, {label}: {ms:.1f} ms ({size[0]:,} bytes; median of {args.runs})")


if __name__ == "__main__":
    main()
