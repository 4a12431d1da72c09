"""Every reader of user text in time linear in its input (issue 44): for each reader, a generated
input of 1,000 and of 200,000 lines, the time to read it, and the time per 1,000 lines side by
side; the ratio large / small is the figure (about 1: linear; 2x or more: a cost that grows with
the square of the input, which a user's long log turns into minutes).

Each input is a real output of the tool (tests/fixtures/, named below) grown the way real ones
grow: nccl-tests rows of one test (a `-N` burn-in repeats its sizes) and whole runs one after
another; an NCCL_DEBUG=INFO job log, kernel log, ibstat, perftest, nvbandwidth,
p2pBandwidthLatencyTest and `nvidia-smi topo -m` output pasted together again and again (a log of
a loop over runs or nodes); a sim description with one `[[fault]]` per 5 lines; a run folder whose
measurements.jsonl has one line per measurement (what `gputopo report` reads). The time is wall
time (time.perf_counter) of the reader in this process: the file is read, parsed, and turned into
what the command writes (measurements, the run folder for the imports), without the report's
rendering unless the row says so. Best of --repeat reads.

    python benchmarks/reader_scale.py [--sizes 1000,200000] [--only nccl-tests] [--repeat 1]
    python benchmarks/reader_scale.py --profile nccl-tests --sizes 20000   # cProfile, top 25 by cumulative time
"""

from __future__ import annotations

import argparse
import cProfile
import io
import itertools
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIX = ROOT / "tests" / "fixtures"


def cycled(path: Path, n: int, skip: int = 0, every: int = 1) -> str:
    """The first ``n`` lines of ``path``'s lines (after its first ``skip``; every ``every``-th
    line, so that a long fixture's mix of lines is in the small input as in the large) repeated."""
    lines = path.read_text().splitlines()[skip::every]
    return "\n".join(itertools.islice(itertools.cycle(lines), n)) + "\n"


NCCL_TESTS = FIX / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt"


def nccl_tests_rows(n: int) -> str:
    """One all_reduce test of ``n`` result rows: the fixture's header, its 28 rows again and again
    (what `-N` or a long burn-in prints), its footer."""
    lines = NCCL_TESTS.read_text().splitlines()
    head = [ln for ln in lines[:9]]
    rows = [ln for ln in lines[9:] if ln.strip() and not ln.lstrip().startswith("#")]
    foot = [ln for ln in lines[9:] if ln.lstrip().startswith("#")]
    body = list(itertools.islice(itertools.cycle(rows), n - len(head) - len(foot)))
    return "\n".join(head + body + foot) + "\n"


def nccl_tests_runs(n: int) -> str:
    """Whole runs of the fixture one after another (a loop of runs logged to one file), each run's
    first time figure different, as real repeated runs are (the same output twice is refused)."""
    lines = NCCL_TESTS.read_text().splitlines()
    first = next(k for k, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#"))
    out: list = []
    k = 0
    while len(out) < n:
        run = list(lines)
        toks = run[first].split()
        toks[5] = f"{1000 + k * 0.01:.2f}"  # the out-of-place time (us) of the first row
        run[first] = "  ".join(toks)
        out += run
        k += 1
    return "\n".join(out[:n]) + "\n"


def sim_faults(n: int) -> str:
    """seed-8gpu with a `[[fault]]` (5 lines) per 5 lines up to ``n`` lines."""
    head = 'extends = "seed-8gpu"\nname = "many-faults"\nsummary = "seed-8gpu with many faults"\n'
    pairs = [(i, j) for i in range(8) for j in range(i + 1, 8)]
    out = [head]
    for k in range(max(1, (n - 3) // 5)):
        i, j = pairs[k % len(pairs)]
        out.append(f'[[fault]]\nwhere = "pair:{i},{j}"\nwhat = "corrupt"\npath = "p2p"\nrate = {0.001 + k * 1e-9:.9f}\n')
    return "".join(out)


# ----------------------------------------------------------------------------- the readers
# Each: (name, what the input is, make(n) -> text, read(path, tmp) -> None, suffix)


def read_nccl_tests(path: str, tmp: str) -> None:
    from gputopo.importers.run import run_import

    run_import("nccl-tests", [path], out_dir=Path(tmp) / "out", render=False, argv=["import", "nccl-tests", path])


def read_nccl_tests_parse(path: str, tmp: str) -> None:
    from gputopo.importers.nccl_tests import log_measurements, log_summary, parse_nccl_tests_file

    for lg in parse_nccl_tests_file(path):
        log_measurements(lg)
        log_summary(lg)


def read_nccl_debug(path: str, tmp: str) -> None:
    from gputopo.importers.nccl_debug import debug_document, read_logs

    debug_document(read_logs([path]), [path], None)


def read_kernel_log(path: str, tmp: str) -> None:
    from gputopo.importers.run import run_import

    run_import("kernel-log", path, out_dir=Path(tmp) / "out", argv=["import", "kernel-log", path], render=False)


def read_ibstat(path: str, tmp: str) -> None:
    from gputopo.importers.run import run_import

    run_import("ibstat", path, out_dir=Path(tmp) / "out", argv=["import", "ibstat", path], render=False)


def read_perftest(path: str, tmp: str) -> None:
    from gputopo.importers.run import run_import

    run_import("perftest", [path], out_dir=Path(tmp) / "out", argv=["import", "perftest", path], render=False)


def read_nvbandwidth(path: str, tmp: str) -> None:
    from gputopo.importers.run import run_import

    run_import("nvbandwidth", [path], out_dir=Path(tmp) / "out", argv=["import", "nvbandwidth", path], render=False)


def read_p2pbw(path: str, tmp: str) -> None:
    from gputopo.importers.run import run_import

    run_import("p2pbw", [path], out_dir=Path(tmp) / "out", argv=["import", "p2pbw", path], render=False)


def read_topo(path: str, tmp: str) -> None:
    from gputopo.importers.user_inputs import load_topo_file

    load_topo_file(path)


def read_sim(path: str, tmp: str) -> None:
    from gputopo.sim.description import load_description

    load_description(path)


def read_run_folder(path: str, tmp: str) -> None:
    from gputopo.report.run_folder import load_run

    load_run(path)


def summarize_run_folder(path: str, tmp: str) -> None:
    from gputopo.report.run_folder import load_run
    from gputopo.report.summary import summarize

    summarize(load_run(path))


READERS = [
    ("nccl-tests", "rows of one test (autodl 2x2080ti all_reduce, its 28 sizes repeated); `import nccl-tests`",
     nccl_tests_rows, read_nccl_tests, ".txt"),
    ("nccl-tests parse", "the same rows: parse, Measurements and nccl_tests.json facts only",
     nccl_tests_rows, read_nccl_tests_parse, ".txt"),
    ("nccl-tests runs", "whole runs one after another (autodl, 40 lines each, each its own first time); `import nccl-tests`",
     nccl_tests_runs, read_nccl_tests, ".txt"),
    ("nccl-debug", "an NCCL_DEBUG=INFO job log (llm-k8s 2x ND96asr, 4,358 lines; every 4th line, so 1,000 lines "
     "hold the whole log's mix) pasted again and again; read and its nccl-debug document",
     lambda n: cycled(FIX / "nccl-debug" / "llm-k8s_2x-nd96asr-v4-16xa100_vllm-ray-ansi_p2p-ipc-read_net-socket.log",
                      n, every=4),
     read_nccl_debug, ".log"),
    ("kernel-log", "dmesg Xid lines (akash-support-244 dmesg -T, Xid 43/31/94) again and again; `import kernel-log`",
     lambda n: cycled(FIX / "xid" / "akash-support-244_dmesg-T_xid43_31_94_excerpt.txt", n), read_kernel_log, ".txt"),
    ("ibstat", "ibstat of 8 CX-7 + BlueField-3 (152 lines) again and again; `import ibstat`",
     lambda n: cycled(FIX / "ibstat" / "gpud-testdata_h100_8x-cx7-400g-ib_bluefield3-bond-200g-eth_all-active.txt", n),
     read_ibstat, ".txt"),
    ("perftest", "ib_write_bw runs (k8s-memlock, 25 lines) one after another; `import perftest`",
     lambda n: cycled(FIX / "perftest" / "k8s-memlock-blog_ib-write-bw_1M_ib_11129MBps_after-fix.txt", n),
     read_perftest, ".txt"),
    ("nvbandwidth", "nvbandwidth 8x RTX 4090 (38 lines) again and again; `import nvbandwidth`",
     lambda n: cycled(FIX / "nvbandwidth" / "nvbandwidth-15_8xrtx4090_v0.2_excerpt.txt", n), read_nvbandwidth, ".txt"),
    ("p2pbw", "p2pBandwidthLatencyTest 4x RTX 6000 Ada (77 lines) again and again; `import p2pbw` (refused at the second run)",
     lambda n: cycled(FIX / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt", n), read_p2pbw, ".txt"),
    ("p2pbw in a log", "one p2pBandwidthLatencyTest 4x RTX 6000 Ada output, then a job's other log lines "
     "(each a note, capped); `import p2pbw`",
     lambda n: (FIX / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt").read_text()
     + "".join(f"step {k}: loss 0.{k % 997:03d} lr 1e-4 tokens/s 51234\n" for k in range(max(0, n - 77))),
     read_p2pbw, ".txt"),
    ("topo -m", "`nvidia-smi topo -m` of 4 H100 + NICs again and again; --topo / scan --from-smi",
     lambda n: cycled(FIX / "topo" / "nccl-1617_4xh100_nv6_nics.txt", n), read_topo, ".txt"),
    ("sim description", "seed-8gpu extended with a [[fault]] per 5 lines; --sim FILE",
     sim_faults, read_sim, ".toml"),
]


def all_readers():
    """(name, what, make(n) or None for a run folder, read(path, tmp), suffix) of every reader."""
    return READERS + [("run folder", "measurements.jsonl lines of an nccl-tests import; `gputopo report`",
                       None, read_run_folder, ""),
                      ("run folder summary", "the same folder read and judged (summary.json's findings, no "
                       "figures drawn)", None, summarize_run_folder, "")]


def run_folder_input(n: int, tmp: str) -> str:
    """A run folder with ``n`` measurement lines (an nccl-tests import of n/2 rows)."""
    src = Path(tmp) / "rows.txt"
    src.write_text(nccl_tests_rows(n // 2 + 12))
    from gputopo.importers.run import run_import

    out = Path(tmp) / "run"
    run_import("nccl-tests", [str(src)], out_dir=out, render=False, argv=["import", "nccl-tests", str(src)])
    return str(out)


def time_one(name, make, read, suffix, n, repeat, profile=False):
    """(lines, seconds, what happened) of reading a generated input of ``n`` lines."""
    best, said = None, "read"
    with tempfile.TemporaryDirectory() as tmp:
        if make is None:
            path = run_folder_input(n, tmp)
            lines = sum(1 for _ in open(Path(path) / "measurements.jsonl"))
        else:
            text = make(n)
            path = str(Path(tmp) / f"input{suffix}")
            Path(path).write_text(text)
            lines = text.count("\n")
        for _ in range(repeat):
            work = tempfile.mkdtemp(dir=tmp)
            prof = cProfile.Profile() if profile else None
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                if prof:
                    prof.enable()
                read(path, work)
            except Exception as e:  # a refusal is a result too: say it, with its time
                said = f"refused: {type(e).__name__}: {str(e)[:60]}"
            finally:
                if prof:
                    prof.disable()
            dt = (time.perf_counter() - t0, time.process_time() - c0)
            shutil.rmtree(work, ignore_errors=True)
            best = dt if best is None or dt[1] < best[1] else best
            if prof:
                s = io.StringIO()
                pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(25)
                print(s.getvalue())
    return lines, best, said


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,200000", help="line counts, small first (comma-separated)")
    ap.add_argument("--only", action="append", help="a reader's name (repeatable)")
    ap.add_argument("--repeat", type=int, default=1, help="reads per input; the best is kept")
    ap.add_argument("--profile", help="cProfile this reader at each size instead")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    readers = all_readers()
    if args.profile:
        readers = [r for r in readers if r[0] == args.profile]
        for n in sizes:
            name, _, make, read, suffix = readers[0]
            print(f"== {name}, {n} lines")
            print(time_one(name, make, read, suffix, n, 1, profile=True))
        return
    if args.only:
        readers = [r for r in readers if r[0] in args.only]
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC, load {load:.1f}, {os.cpu_count()} CPUs; the "
          f"reader in this process after one warm-up read (imports), best of {args.repeat} by CPU time; "
          "wall s / CPU s / CPU ms per 1,000 lines")
    print(f"{'reader':18}" + "".join(f"{f'{n:,} lines':>30}" for n in sizes) + f"{'per-line ratio':>16}")
    for name, _what, make, read, suffix in readers:
        time_one(name, make, read, suffix, sizes[0], 1)  # warm-up: the imports are not the reader's
        cells, per = [], []
        said = ""
        for n in sizes:
            lines, (wall, cpu), how = time_one(name, make, read, suffix, n, args.repeat)
            per.append(cpu / lines * 1e6)
            cells.append(f"{wall:7.2f} / {cpu:6.2f} s {per[-1]:7.1f} ms")
            if how != "read":
                said = how
        print(f"{name:18}" + "".join(f"{c:>30}" for c in cells) + f"{per[-1] / per[0]:>15.2f}x"
              + (f"  ({said})" if said else ""), flush=True)
    print()
    for name, what, *_ in readers:
        print(f"  {name}: {what}")


if __name__ == "__main__":
    main()
