"""The issue-18 sweep, as a script: every gputopo command and subcommand, given bad or odd option
values, every kind of input file it reads, damaged run folders, output trouble and hostile
environments, run as a user runs it (`python -m gputopo` in a subprocess, a timeout per case).

Each case is classified; these are defects:
  rc4        exit 4 (internal error)
  traceback  a Python traceback on stdout or stderr
  lines      exit 2 or 3 with not exactly one line on stderr (or an empty message)
  rc         an exit status outside the documented ones (0, 1 for check/diff/health, 2, 3, 130, 141)
  hang       still running at the timeout (killed)
  silent     exit 0 on input that must be refused or flagged (the case says what it expects)
  orphan     a process of the case still alive after gputopo exited (found by the case's tag in
             /proc/*/environ: the command line of a worker does not say which case it belongs to,
             and other sessions run gputopo on this machine too)
  colour     a colour or style sequence (SGR) on stdout under NO_COLOR=1

Usage:  PYTHONPATH=$PWD python tests/tools/cli_sweep.py [--quick] [--jobs N] [--only REGEX] [--show-all]
Exit status: 0 when no case is a defect, 1 otherwise. The history database, reports/ and every
file the sweep makes live under one temporary folder (never the real home). Not collected by
pytest (no test_ prefix); tests/bad_input/test_cli_sweep.py runs a small subset of these cases.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]  # tests/tools/cli_sweep.py
FIXTURES = REPO / "tests" / "fixtures"

#: Words a command uses when it says that what it read is incomplete or damaged.
DAMAGE_WORDS = (r"missing|incomplete|damaged|partial|cannot|can't|unreadable|skipp|truncat|invalid|"
                r"not read|not a |corrupt|unknown|no (measurement|result|data)|unfinished|interrupted|"
                r"running|empty|refus|lost|^data: |without a result|another link class|edited|never writes")


@dataclass
class Case:
    """One command line and what a correct gputopo does with it.

    expect: "any" (only the defect classes count), "refuse" (exit 1, 2 or 3), "usage" (exit 2),
    "ok" (exit 0: a control that the valid form works), "flag" (exit != 0, or the output matches
    ``flag``, a regex of what it must say)."""

    group: str
    name: str
    argv: List[str]
    expect: str = "any"
    flag: str = DAMAGE_WORDS
    env: Dict[str, Optional[str]] = field(default_factory=dict)
    stdin: Optional[bytes] = None          # None: /dev/null
    stdout: str = "pipe"                   # pipe | devfull | head1
    setup: Optional[Callable[[Path], None]] = None   # runs first, given the case's own folder
    timeout: float = 60.0
    quick: bool = False                    # part of the --quick subset
    help_ok: bool = False                  # a bare group: its help on stderr, exit 2 (as click does)

    @property
    def exit_one_ok(self) -> bool:
        words = [a for a in self.argv if not a.startswith("-")]
        return bool(words) and words[0] in ("check", "diff", "health")

    @property
    def verdict_exit(self) -> bool:
        """`health` (json) answers a valid machine with its verdict: exit 1 is a failing node."""
        words = [a for a in self.argv if not a.startswith("-")]
        return bool(words) and words[0] == "health"


@dataclass
class Result:
    case: Case
    rc: Optional[int]
    seconds: float
    stdout: str
    stderr: str
    defects: List[str]


def _env(case: Case, work: Path, tag: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUTOPO_", "NO_COLOR", "FORCE_COLOR"))}
    env.update(PYTHONPATH=str(REPO), GPUTOPO_HISTORY=str(work / "history.sqlite"),
               XDG_DATA_HOME=str(work / "xdg"), HOME=str(work / "home"), GPUTOPO_SWEEP_TAG=tag,
               COLUMNS="120", GPUTOPO_INPUT_WAIT="1")  # a FIFO nobody writes: refused after 1 s, not 30
    for k, v in case.env.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v.replace("{w}", str(work))
    return env


def _tagged_pids(tag: str) -> List[int]:
    """Processes whose environment holds this case's tag (its gputopo and every child)."""
    needle = f"GPUTOPO_SWEEP_TAG={tag}".encode() + b"\0"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read() + b"\0":
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def run_case(case: Case, work: Path, index: int) -> Result:
    """Run one case in its own folder under ``work``; classify what happened."""
    folder = work / "cases" / f"{index:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    if case.setup:
        case.setup(folder)
    argv = [a.replace("{c}", str(folder)).replace("{w}", str(work)) for a in case.argv]
    tag = f"{os.getpid()}-{index}"
    env = _env(case, work, tag)
    stdin = subprocess.PIPE if case.stdin is not None else subprocess.DEVNULL
    full = open("/dev/full", "wb") if case.stdout == "devfull" else None  # noqa: SIM115 - closed below
    out_target: Any = full if full is not None else subprocess.PIPE
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "gputopo", *argv], cwd=folder, env=env, stdin=stdin,
                            stdout=out_target, stderr=subprocess.PIPE, start_new_session=True)
    rc: Optional[int]
    try:
        if case.stdout == "head1":  # `| head -1`: read one line, then close the pipe
            assert proc.stdout is not None
            if case.stdin is not None and proc.stdin:
                proc.stdin.write(case.stdin)
                proc.stdin.close()
            first = proc.stdout.readline()
            proc.stdout.close()
            err_bytes = proc.stderr.read() if proc.stderr else b""
            rc = proc.wait(timeout=case.timeout)
            out_bytes = first
        else:
            out_bytes, err_bytes = proc.communicate(case.stdin, timeout=case.timeout)
            out_bytes = out_bytes or b""
            rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out_bytes, err_bytes = b"", b""
        rc = None
        proc.wait()
    finally:
        if full is not None:
            full.close()
    seconds = time.monotonic() - start
    out = out_bytes.decode("utf-8", "replace") if isinstance(out_bytes, bytes) else str(out_bytes)
    err = err_bytes.decode("utf-8", "replace") if isinstance(err_bytes, bytes) else str(err_bytes)
    defects = classify(case, rc, out, err)
    orphans = []
    for _ in range(30):  # up to 3 s for children on their way out
        orphans = _tagged_pids(tag)
        if not orphans:
            break
        time.sleep(0.1)
    if orphans:
        defects.append(f"orphan: {len(orphans)} process(es) left: " + ", ".join(_cmdline(p) for p in orphans))
        for pid in orphans:  # this sweep started them (they carry its tag)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return Result(case, rc, seconds, out, err, defects)


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f"{pid} " + f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return str(pid)


def classify(case: Case, rc: Optional[int], out: str, err: str) -> List[str]:
    """The defects one run shows (empty: gputopo behaved)."""
    if rc is None:
        return [f"hang: still running after {case.timeout:.0f} s"]
    defects = []
    if rc == 4 or "internal error" in err:
        defects.append("rc4: " + _last(err))
    if "Traceback (most recent call last)" in out + err:
        defects.append("traceback: " + _last(err))
    lines = [x for x in err.splitlines() if x.strip()]
    if case.help_ok and rc == 2 and err.startswith("Usage: "):
        lines = lines[:1]  # the group's help, not an error message
    elif rc in (2, 3) and (len(lines) != 1 or not lines[0].startswith("gputopo: error: ")
                         or len(lines[0].strip()) <= len("gputopo: error:")):
        defects.append(f"lines: exit {rc} with {len(lines)} stderr line(s): " + " | ".join(lines[:4])[:300])
    allowed = {0, 2, 3, 4, 130} | ({1} if case.exit_one_ok else set()) | ({141} if case.stdout == "head1" else set())
    if rc not in allowed:
        defects.append(f"rc: exit {rc}: " + _last(err))
    if rc == 0:
        if case.expect in ("refuse", "usage"):
            defects.append("silent: exit 0 where it must refuse")
        elif case.expect == "flag" and not re.search(case.flag, out + err, re.I | re.M):
            defects.append(f"silent: exit 0 and nothing matching /{case.flag[:40]}/")
    elif case.expect == "ok" and not (case.verdict_exit and rc == 1):
        defects.append(f"rc: exit {rc} on a valid input: " + _last(err))
    elif case.expect == "usage" and rc not in (2, 4):
        defects.append(f"rc: exit {rc} where a usage error (2) is due: " + _last(err))
    if case.env.get("NO_COLOR") and re.search("\x1b\\[[0-9;]*m", out):  # SGR: colour or style (cursor moves are not)
        defects.append("colour: colour/style sequences on stdout under NO_COLOR")
    return defects


def _last(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    return (lines[-1] if lines else "(nothing on stderr)")[:240]


def prepare(work: Path) -> None:
    """The valid things cases start from: a healthy sim run (p2p + numerics on 0,1 and 0,2), a
    spec from it, imports of each tool's output, a scan --json, a history with entries."""
    from cli_sweep_cases import prepare_fixtures

    prepare_fixtures(work, lambda *argv: _gputopo(work, *argv))


def _gputopo(work: Path, *argv: str) -> subprocess.CompletedProcess:
    env = _env(Case("prep", "prep", []), work, f"{os.getpid()}-prep")
    proc = subprocess.run([sys.executable, "-m", "gputopo", *argv], cwd=work, env=env, capture_output=True,
                          stdin=subprocess.DEVNULL, timeout=300, check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sweep setup failed: gputopo {' '.join(argv)}: rc {proc.returncode}: "
                         f"{proc.stderr.decode(errors='replace')[-500:]}")
    return proc


def sweep(cases: Sequence[Case], work: Path, jobs: int = 2, progress: bool = False) -> List[Result]:
    def one(item):
        i, case = item
        r = run_case(case, work, i)
        if progress:
            mark = "BUG " if r.defects else "ok  "
            print(f"{mark}{i:4d} {r.seconds:5.1f}s rc={r.rc} {case.group}: {case.name}", file=sys.stderr, flush=True)
        return r

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, enumerate(cases)))


def table(results: Sequence[Result], show_all: bool = False) -> str:
    rows = []
    for r in results:
        if not r.defects and not show_all:
            continue
        what = "; ".join(r.defects) or "ok"
        rows.append(f"{r.case.group:<10} {r.case.name[:58]:<58} rc={str(r.rc):<4} {r.seconds:5.1f}s  {what}")
    kinds: Dict[str, int] = {}
    for r in results:
        for d in r.defects:
            kinds[d.split(":")[0]] = kinds.get(d.split(":")[0], 0) + 1
    bad = sum(1 for r in results if r.defects)
    summary = (f"{len(results)} cases, {bad} with defects"
               + (" (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")" if kinds else "")
               + f"; {sum(r.seconds for r in results):.0f} s of case time")
    return "\n".join(rows + [summary])


def write_log(results: Sequence[Result], path: str) -> None:
    """Every case's outcome, for reading the cases no rule flags (rc 0 where "any" was allowed)."""
    import json

    with open(path, "w") as f:
        for r in results:
            f.write(json.dumps({"group": r.case.group, "name": r.case.name, "argv": r.case.argv,
                                "expect": r.case.expect, "rc": r.rc, "seconds": round(r.seconds, 2),
                                "defects": r.defects, "stderr": r.stderr[-600:], "stdout": r.stdout[:600]}) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="only the representative subset")
    ap.add_argument("--jobs", type=int, default=2, help="cases at once [2]")
    ap.add_argument("--only", help="only cases whose group or name matches this regex")
    ap.add_argument("--show-all", action="store_true", help="list passing cases too")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (printed)")
    ap.add_argument("--log", help="write every case's argv, exit status and output (JSON lines) here")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cli_sweep_cases import all_cases

    work = Path(tempfile.mkdtemp(prefix="gputopo-sweep-"))
    try:
        prepare(work)
        cases = all_cases(work)
        if args.quick:
            cases = [c for c in cases if c.quick]
        if args.only:
            cases = [c for c in cases if re.search(args.only, f"{c.group}: {c.name}")]
        print(f"{len(cases)} cases, {args.jobs} at once, in {work}", file=sys.stderr)
        results = sweep(cases, work, jobs=args.jobs, progress=True)
        print(table(results, args.show_all))
        if args.log:
            write_log(results, args.log)
        return 1 if any(r.defects for r in results) else 0
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
