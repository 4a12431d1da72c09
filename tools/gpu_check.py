#!/usr/bin/env python3
"""gputopo's GPU acceptance run (`make gpu-check`; docs/gpu-check.md says what and why).

On a machine with an NVIDIA GPU whose python3 already has CUDA torch and gputopo's requirements
(nothing is installed), from the repository root:

    PYTHONPATH=. python3 tools/gpu_check.py [--budget 240] [--copy-to DIR]

runs a fixed list of steps, most valuable first, each a subprocess in its own process group with
its own timeout (killed with its whole group when the timeout passes), never stopping at a
failure, inside one hard budget of seconds. It leaves one folder, reports/gpu-check-<gpu>/, and
one archive of it, reports/gpu-check-<gpu>.tar.gz; both, summary.md and summary.json
included, are rewritten after every step, so a run cut short still carries what it measured.

Without a GPU (here), the same plumbing runs against a fake nvidia-smi and the built-in sims:

    make gpu-check-fake     # = --nvidia-smi tests/fake_nvidia_smi/nvidia-smi --sim h100-pcie-1gpu

and the folder's name and summary say FAKE / SIMULATED.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))

import gpu_check_compare as cmp  # noqa: E402  (this folder, stdlib only at import)

DEFAULT_BUDGET_S = 240.0
#: Seconds kept back from the steps for the last summary and archive.
RESERVE_S = 5.0
#: A step is not started with less than this left of the budget.
MIN_STEP_S = 3.0
#: After SIGTERM to a step's process group, seconds before SIGKILL (gputopo writes a valid
#: interrupted run on SIGTERM).
GRACE_S = 2.0
#: Files larger than this are left out of the archive (and listed), and the archive stops
#: taking files at ARCHIVE_MAX_BYTES, so it stays one small file to carry back.
ARCHIVE_FILE_MAX = 4 << 20
ARCHIVE_MAX_BYTES = 15 << 20
FAKE_MARK = "fake nvidia-smi"
TRACEBACK = "Traceback (most recent call last):"

#: What each step is expected to take on one H100 (seconds, a guess until a real run says): a
#: step's timeout leaves half of what the steps after it expect, so a hang early on costs its own
#: timeout and still lets the later steps run (the most valuable ones come first).
EXPECT_S = {"smi-query": 2, "versions": 10, "smi-xml": 3, "smi-topo": 2, "smi-nvlink": 2, "scan-json": 5,
            "scan-smi": 5, "compare-scan": 2, "bench-self": 30, "cuda-self": 15, "self-ratio": 2,
            "nccl-one-rank": 20, "numerics-refusal": 5, "numerics-reference": 20, "check-init": 5, "check": 5,
            "gate": 20, "health": 10, "bench-pairs": 90, "bench-remapped": 40, "cluster-gpus": 45, "pytest-gpu": 60,
            "cluster-one-rank": 20}

OK, FAILED, TIMEOUT, NA, SKIPPED, DIFFERS, BELOW = ("ok", "failed", "timeout", "n/a", "skipped",
                                                    "differs", "below-target")


@dataclass
class Result:
    n: int
    name: str
    what: str
    argv: List[str] = field(default_factory=list)
    rc: Optional[int] = None
    seconds: float = 0.0
    timeout_s: float = 0.0
    verdict: str = SKIPPED
    line: str = ""
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    leftovers: int = 0
    tracebacks: List[Dict[str, str]] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {"n": self.n, "step": self.name, "what": self.what, "command": shlex.join(self.argv),
                "exit_code": self.rc, "seconds": round(self.seconds, 2), "timeout_s": round(self.timeout_s, 1),
                "verdict": self.verdict, "line": self.line, "stdout": self.stdout, "stderr": self.stderr,
                "processes_left_and_killed": self.leftovers, "tracebacks": len(self.tracebacks)}


@dataclass
class Step:
    name: str
    what: str
    timeout_s: float
    argv: Callable[["Check"], List[str]]
    judge: Callable[["Check", Result], Tuple[str, str]]
    stdout_to: Optional[str] = None  # the artefact stdout becomes (else logs/NN-name.out)
    skip: Callable[["Check"], Optional[str]] = lambda c: None  # a reason not to run it
    env: Callable[["Check"], Dict[str, str]] = lambda c: {}
    logs: Tuple[str, ...] = ()  # folders (in the check's) whose *.log may hold tracebacks


class Interrupted(Exception):
    pass


class Check:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.python = a.python or sys.executable
        self.sim: Optional[str] = a.sim
        self.t0 = time.monotonic()
        self.deadline = self.t0 + a.budget
        self.results: List[Result] = []
        self.by_name: Dict[str, Result] = {}
        self.fake_smi = False
        self.bin_dir: Optional[str] = None
        self.smi = "nvidia-smi"
        if a.nvidia_smi:
            p = Path(a.nvidia_smi).resolve()
            self.bin_dir = tempfile.mkdtemp(prefix="gpu-check-bin-")
            os.symlink(p, Path(self.bin_dir) / "nvidia-smi")  # gputopo and pytest find it by name
            self.smi = str(Path(self.bin_dir) / "nvidia-smi")
        self.reports = Path(a.reports).resolve()
        self.reports.mkdir(parents=True, exist_ok=True)
        self.fixed_dir = Path(a.out).resolve() if a.out else None
        self.dir = self.fixed_dir or self.reports / f".gpu-check-running-{os.getpid()}"
        if self.dir.exists():
            shutil.rmtree(self.dir)
        (self.dir / "logs").mkdir(parents=True)
        self.named = self.fixed_dir is not None
        self.started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.archive_left_out: List[str] = []
        self.timeouts = dict(_kv(t) for t in a.timeout)

    # ------------------------------------------------------------------ facts gathered so far
    def path(self, name: str) -> Path:
        return self.dir / name

    def gpu_count(self) -> int:
        scan = _load_json(self.path(cmp.SCAN_JSON))
        if isinstance(scan, dict) and isinstance(scan.get("gpus"), list):
            return len(scan["gpus"])
        rows = _query_rows(self.path(cmp.SMI_CSV))
        return len(rows) if rows else 1

    def sim_args(self) -> List[str]:
        return ["--sim", self.sim] if self.sim else []

    def gputopo(self, *args: str) -> List[str]:
        return [self.python, "-m", "gputopo", *args]

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["PYTHONUNBUFFERED"] = "1"
        env["GPUTOPO_HISTORY"] = str(self.dir / "history.sqlite")
        if self.bin_dir:
            env["PATH"] = self.bin_dir + os.pathsep + env.get("PATH", "")
        return env

    # ------------------------------------------------------------------ the folder's name
    def name_folder(self) -> None:
        """Once nvidia-smi has said what the GPU is: reports/gpu-check-<gpu>[-fake-smi][-sim]."""
        if self.named:
            return
        self.named = True
        rows = _query_rows(self.path(cmp.SMI_CSV))
        names = sorted({r.get("name") or "" for r in rows}) if rows else []
        gpu = _slug(names[0]) if len(names) == 1 and names[0] else ("mixed" if names else "unknown-gpu")
        if rows and len(rows) > 1:
            gpu = f"{len(rows)}x-{gpu}"
        if self.fake_smi:
            gpu += "-fake-smi"
        if self.sim:
            gpu += f"-sim-{_slug(Path(self.sim).stem)}"
        final = self.reports / f"gpu-check-{gpu}"
        for suffix in ("", ".tar.gz"):  # an earlier run's folder and archive: kept once, as .previous
            old, prev = Path(f"{final}{suffix}"), Path(f"{final}.previous{suffix}")
            if old.exists():
                if prev.is_dir():
                    shutil.rmtree(prev)
                elif prev.exists():
                    prev.unlink()
                old.rename(prev)
        self.dir.rename(final)  # the steps' files are named relative to it
        self.dir = final


def _kv(text: str) -> Tuple[str, float]:
    k, _, v = text.partition("=")
    try:
        return k.strip(), float(v)
    except ValueError:
        raise SystemExit(f"gpu_check: error: --timeout {text!r}: expected STEP=SECONDS") from None


def _slug(text: str) -> str:
    s = re.sub(r"^nvidia\s+", "", text.strip(), flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")[:40] or "gpu"


def _load_json(p: Path) -> Any:
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _query_rows(p: Path) -> List[Dict[str, Optional[str]]]:
    try:
        return cmp.parse_query_csv(p.read_text(encoding="utf-8", errors="replace"))
    except (OSError, ValueError):
        return []


def _text(p: Optional[str], dir_: Path) -> str:
    if not p:
        return ""
    try:
        return (dir_ / p).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    """The line that says why: a `gputopo:` / `error:` line, else the exception line of the last
    traceback, else the last line that is not a rule of === or ---."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and FAKE_MARK not in ln]
    said = [ln for ln in lines if ln.startswith(("gputopo:", "gpu_check", "needs CUDA")) or " error: " in ln]
    if said:
        return said[-1]
    tbs = tracebacks_in(text)
    if tbs:
        return tbs[-1].splitlines()[-1].strip()
    lines = [ln for ln in lines if not re.fullmatch(r"[=\-_*]{5,}", ln)]
    return lines[-1] if lines else ""


def _clip(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


# ----------------------------------------------------------------------------- running one step


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, dead and waiting for their
    reaper, do not count): /proc where there is one, else kill(0)."""
    proc = Path("/proc")
    if proc.is_dir():
        for d in proc.iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                return True
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _kill_group(pgid: int) -> None:
    """SIGTERM the step's process group, SIGKILL what is left after GRACE_S."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 2.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            if not _group_alive(pgid):
                return
            time.sleep(0.05)


def run_bounded(argv: List[str], timeout_s: float, out: Path, err: Path, env: Dict[str, str]
                ) -> Tuple[Optional[int], float, bool, int]:
    """(exit code or None, seconds, timed out, processes left behind and killed)."""
    t0 = time.monotonic()
    with open(out, "wb") as fo, open(err, "wb") as fe:
        try:
            p = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=REPO,
                                 env=env, start_new_session=True)
        except OSError as e:
            fe.write(f"could not start {argv[0]}: {e}\n".encode())
            return None, time.monotonic() - t0, False, 0
        timed_out = False
        try:
            rc: Optional[int] = p.wait(timeout=max(0.1, timeout_s))
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(p.pid)
            rc = p.wait()
        except KeyboardInterrupt:
            _kill_group(p.pid)
            p.wait()
            raise Interrupted() from None
    left = 0
    end = time.monotonic() + 1.0  # what it started and did not wait for (its group outlives it)
    while _group_alive(p.pid) and time.monotonic() < end:
        time.sleep(0.05)
    if _group_alive(p.pid):
        left = 1
        _kill_group(p.pid)
    return rc, time.monotonic() - t0, timed_out, left


_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def tracebacks_in(text: str) -> List[str]:
    """Every Python traceback in ``text``, whole: from its first line to the exception line,
    chained ones ("During handling of the above exception...") kept in one block; a prefix
    written before each line (torchrun's "[rank0]: ") is followed."""
    out, lines, k = [], text.splitlines(), 0
    while k < len(lines):
        at = lines[k].find(TRACEBACK)
        if at < 0:
            k += 1
            continue
        prefix, start = lines[k][:at], k

        def body(j: int, prefix: str = prefix) -> Optional[str]:
            return lines[j][len(prefix):] if j < len(lines) and lines[j].startswith(prefix) else None

        while True:
            k += 1
            while body(k) is not None and (body(k) or "").startswith((" ", "\t")):  # frames, code lines
                k += 1
            end = min(k, len(lines) - 1)  # the exception line
            j = end + 1
            while body(j) is not None and not (body(j) or "").strip():
                j += 1
            if body(j) is not None and (body(j) or "").startswith(_CHAINED):
                j += 1
                while body(j) is not None and not (body(j) or "").strip():
                    j += 1
                if body(j) is not None and TRACEBACK in (body(j) or ""):
                    k = j
                    continue
            break
        out.append("\n".join(lines[start:end + 1]))
        k = end + 1
    return out


def collect_tracebacks(check: Check, step: Step, r: Result) -> None:
    seen = set()
    sources = [(r.stdout, _text(r.stdout, check.dir)), (r.stderr, _text(r.stderr, check.dir))]
    for folder in step.logs:
        base = check.dir / folder
        if base.is_dir():
            for p in sorted(base.rglob("*.log")):
                try:
                    sources.append((str(p.relative_to(check.dir)), p.read_text(encoding="utf-8", errors="replace")))
                except OSError:
                    continue
    for where, text in sources:
        for tb in tracebacks_in(text):
            if tb not in seen:
                seen.add(tb)
                r.tracebacks.append({"file": str(where), "text": tb})


def run_step(check: Check, n: int, step: Step, later: Sequence[Step] = ()) -> Result:
    """Run ``step`` (number ``n``); ``later``: the steps after it, whose expected time its
    timeout leaves half of."""
    r = Result(n, step.name, step.what)
    why = step.skip(check)
    left = check.deadline - time.monotonic() - RESERVE_S
    if why is None and left < MIN_STEP_S:
        why = f"budget spent ({check.a.budget:.0f} s): not started"
    if why is not None:
        r.verdict, r.line = SKIPPED, why
        return r
    keep = 0.5 * sum(EXPECT_S.get(s.name, 5) for s in later if s.skip(check) is None)
    own = check.timeouts.get(step.name, step.timeout_s)
    r.timeout_s = min(own, left, max(left - keep, min(own, EXPECT_S.get(step.name, MIN_STEP_S))))
    try:
        r.argv = step.argv(check)
    except Exception:  # noqa: BLE001 - a bug of this script costs one step, not the run
        r.verdict, r.line = FAILED, "could not build its command: " + _last_line(traceback.format_exc())
        r.tracebacks.append({"file": "tools/gpu_check.py", "text": traceback.format_exc()})
        return r
    base = f"logs/{n:02d}-{step.name}"
    r.stdout = step.stdout_to or base + ".out"
    r.stderr = base + ".err"
    env = check.env()
    env.update(step.env(check))
    rc, secs, timed_out, left_n = run_bounded(r.argv, r.timeout_s, check.dir / r.stdout,
                                              check.dir / r.stderr, env)
    r.rc, r.seconds, r.leftovers = rc, secs, left_n
    if FAKE_MARK in _text(r.stderr, check.dir):
        check.fake_smi = True
    if timed_out:
        if step.stdout_to:  # a cut output is no capture: later steps must not read it as one
            partial = r.stdout + ".partial"
            os.replace(check.dir / r.stdout, check.dir / partial)
            r.stdout = partial
        r.verdict = TIMEOUT
        r.line = f"no result within its {r.timeout_s:.0f} s: killed with its process group"
        tail = _last_line(_text(r.stderr, check.dir))
        if tail:
            r.line += f"; last said: {_clip(tail, 100)}"
    elif rc is None:
        r.verdict, r.line = FAILED, _last_line(_text(r.stderr, check.dir))
    else:
        try:
            r.verdict, r.line = step.judge(check, r)
        except Exception:  # noqa: BLE001
            r.verdict = FAILED
            r.line = "its result could not be read: " + _last_line(traceback.format_exc())
            r.tracebacks.append({"file": "tools/gpu_check.py (judge)", "text": traceback.format_exc()})
    if left_n:
        r.line += "; it left processes running: killed"
    collect_tracebacks(check, step, r)
    return r


# ----------------------------------------------------------------------------- judges


def _plain(ok_line: Callable[[Check, Result], str]) -> Callable[[Check, Result], Tuple[str, str]]:
    """exit 0: ok with ``ok_line``; anything else: failed with the last line of stderr."""
    def judge(check: Check, r: Result) -> Tuple[str, str]:
        if r.rc == 0:
            return OK, ok_line(check, r)
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)) or "(no output)")
    return judge


def _j_query(check: Check, r: Result) -> Tuple[str, str]:
    rows = _query_rows(check.dir / (r.stdout or ""))
    if r.rc != 0 or not rows:
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)) or "no GPU row")
    first = rows[0]
    return OK, (f"{len(rows)} GPU(s): {first.get('name')}, {first.get('memory.total')} MiB, driver "
                f"{first.get('driver_version')}")


def _j_versions(check: Check, r: Result) -> Tuple[str, str]:
    v = _load_json(check.path("versions.json"))
    if r.rc != 0 or not isinstance(v, dict):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    devs = v.get("cuda_devices") or []
    gpu = devs[0]["name"] if devs else "no CUDA device"
    return OK, (f"{gpu}; torch {_val(v.get('torch'))} (CUDA {_val(v.get('torch_cuda_build'))}), NCCL "
                f"{_val(v.get('nccl'))}, nvidia-ml-py {v.get('pkg:nvidia-ml-py')}, python {v.get('python')}")


def _val(v: Any) -> str:
    """A version or fact as text: "n/a" where the probe said why not, "?" where nothing was read."""
    return "n/a" if isinstance(v, dict) else "?" if v is None else str(v)


def _j_xml(check: Check, r: Result) -> Tuple[str, str]:
    if r.rc != 0:
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    doc = cmp.parse_xml(_text(r.stdout, check.dir))  # parse errors: the judge's failure line
    g = doc["gpus"][0] if doc["gpus"] else {}
    return OK, (f"XML parsed: {doc['attached_gpus']} GPU(s), driver {doc['driver_version']}, CUDA "
                f"{doc['cuda_version']}; GPU 0 {g.get('product_name')} at {g.get('pci_bus_id')}")


def _j_topo(check: Check, r: Result) -> Tuple[str, str]:
    if r.rc != 0:
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    m = cmp._topo_parse(_text(r.stdout, check.dir))
    return OK, f"{m.gpu_count} GPU(s), {len(m.nics)} NIC(s) in the matrix"


def _j_nvlink(check: Check, r: Result) -> Tuple[str, str]:
    if r.rc != 0:
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    links = cmp.parse_nvlink_status(_text(r.stdout, check.dir))
    parts = [f"GPU {g}: {sum(1 for v in ls.values() if v is not None)}/{len(ls)} active" for g, ls in links.items()]
    return OK, "; ".join(parts) or "no GPU listed"


def _j_scan(check: Check, r: Result) -> Tuple[str, str]:
    doc = _load_json(check.dir / (r.stdout or ""))
    if r.rc != 0 or not isinstance(doc, dict):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    probs = doc.get("problems") or []
    sev: Dict[str, int] = {}
    for p in probs:
        sev[p.get("severity", "?")] = sev.get(p.get("severity", "?"), 0) + 1
    g = (doc.get("gpus") or [{}])[0]
    return OK, (f"{'SIMULATED ' if doc.get('simulated') else ''}{len(doc.get('gpus') or [])} GPU(s) "
                f"({g.get('name')}); problems: " + (", ".join(f"{v} {k}" for k, v in sev.items()) or "none"))


def _j_scan_smi(check: Check, r: Result) -> Tuple[str, str]:
    if r.rc != 0:
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    m = cmp._topo_parse(_text(r.stdout, check.dir))
    return OK, f"nvidia-smi topo -m text form: {m.gpu_count} GPU(s), parses back"


def _j_compare(check: Check, r: Result) -> Tuple[str, str]:
    line = _clip(_last_line(_text(r.stdout, check.dir)), 300)
    return {0: OK, 1: DIFFERS}.get(r.rc or 0, NA), line or f"exit {r.rc}"


def _j_bench_self(check: Check, r: Result) -> Tuple[str, str]:
    doc = _load_json(check.dir / (r.stdout or ""))
    if r.rc != 0 or not isinstance(doc, dict):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    s = (doc.get("self") or [{}])[0]
    return (OK if doc.get("verdict") != "broken" and not s.get("wrong") else FAILED,
            f"{'SIMULATED ' if doc.get('simulated') else ''}GPU {s.get('gpu')}: h2d {s.get('h2d_gbps')}, "
            f"d2h {s.get('d2h_gbps')}, d2d {s.get('d2d_gbps')} GB/s at the largest size, #wrong "
            f"{s.get('wrong')}, timing {','.join(doc.get('timing') or [])}; verdict {doc.get('verdict')}")


def _j_cuda_self(check: Check, r: Result) -> Tuple[str, str]:
    if r.rc == 3:
        return NA, _clip(_last_line(_text(r.stderr, check.dir)) or "needs CUDA")
    doc = _load_json(check.dir / (r.stdout or ""))
    if not isinstance(doc, dict):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    big = {x["test"]: x for x in doc.get("results", []) if x["size_bytes"] == max(
        y["size_bytes"] for y in doc["results"])}
    txt = ", ".join(f"{t.split('.')[1]} {x['gbps']:.1f}" for t, x in big.items() if x.get("gbps"))
    return (OK if r.rc == 0 else FAILED,
            f"{doc.get('device')}: {txt} GB/s (cuda-events, bare loop)" + ("" if r.rc == 0 else "; NOT bit-exact"))


def _j_ratio(check: Check, r: Result) -> Tuple[str, str]:
    doc = _load_json(check.path("self-ratio.json")) or {}
    line = _clip(_last_line(_text(r.stdout, check.dir)), 300)
    if r.rc == 1:
        return BELOW, line
    if r.rc == 0 and any(v.get("verdict") == "ok" for v in (doc.get("verdicts") or {}).values()):
        return OK, line
    return NA, line or f"exit {r.rc}"


def _j_nccl(check: Check, r: Result) -> Tuple[str, str]:
    doc = _load_json(check.path("nccl-one-rank.json"))
    if not isinstance(doc, dict):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    med = doc.get("median_s")
    # one rank moves no data between GPUs: its time is said, no bandwidth (probe's NO_BANDWIDTH)
    what = (f"{doc.get('backend')} one-rank all_reduce ({doc.get('reduce_op') or '?'}) "
            f"{doc.get('size_bytes', 0) >> 20} MiB, no bandwidth (one rank): #wrong {doc.get('wrong')}, "
            + (f"median {med * 1e3:.3f} ms per call ({doc.get('timing')})" if isinstance(med, (int, float))
               else "no time"))
    if r.rc != 0 or not doc.get("verified"):
        return FAILED, what + "; " + _clip(_last_line(str(doc.get("error") or "")) or "not verified")
    if doc.get("fabric") != "cuda":
        return NA, "no CUDA: the same path ran on the cpu fabric instead: " + what
    return OK, what


def _j_refusal(check: Check, r: Result) -> Tuple[str, str]:
    err = _last_line(_text(r.stderr, check.dir))
    if r.rc == 3 and "two GPUs" in err:
        return OK, "refused as designed (exit 3): " + _clip(err, 120)
    return FAILED, f"expected exit 3 naming two GPUs, got exit {r.rc}: " + _clip(err)


def _j_reference(check: Check, r: Result) -> Tuple[str, str]:
    doc = _load_json(check.path("numerics-reference.json"))
    if not isinstance(doc, dict):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    what = (f"on {doc.get('device')}: loss {doc.get('loss_first'):.4f} -> {doc.get('loss_last'):.4f} in "
            f"{len(doc['runs'][doc['device'] + ':plain']['losses'])} steps, finite {doc.get('finite')}, "
            f"swapped-halves rel dev {doc.get('swapped_max_rel_dev'):.1e}")
    if doc.get("gpu_vs_cpu_max_rel_dev") is not None:
        what += f", GPU vs CPU rel dev {doc['gpu_vs_cpu_max_rel_dev']:.1e}"
    if r.rc != 0 or not doc.get("ok"):
        return FAILED, what
    if not str(doc.get("device")).startswith("cuda"):
        return NA, "no CUDA: trained on the CPU instead, " + what
    return OK, what


def _j_check(check: Check, r: Result) -> Tuple[str, str]:
    out = _text(r.stdout, check.dir)
    line = next((ln for ln in out.splitlines() if ln.startswith("check ")), _last_line(out))
    if r.rc == 0:
        return OK, _clip(line)
    return FAILED, f"exit {r.rc}: " + _clip(line or _last_line(_text(r.stderr, check.dir)))


def _j_fleet(check: Check, r: Result) -> Tuple[str, str]:
    """gate's or health's JSON verdict: ok when it judged (pass, warn, not-judged: the line says
    which and why); a fail on this machine differs (compare its reason with nvidia-smi); no
    document or a traceback failed."""
    doc = _load_json(check.dir / (r.stdout or ""))
    if not isinstance(doc, dict) or doc.get("verdict") not in ("pass", "warn", "fail", "not-judged"):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    judged = (f"judged {', '.join(map(str, doc.get('judged') or [])) or 'nothing'}; not judged "
              f"{', '.join(map(str, doc.get('not_judged') or [])) or 'none'}") if "judged" in doc else ""
    said = f"{'SIMULATED ' if doc.get('simulated') else ''}{doc['verdict']} (exit {r.rc}): " + "; ".join(
        str(x) for x in (doc.get("summary"), doc.get("reason"), judged) if x)
    return (DIFFERS if doc["verdict"] == "fail" else OK), _clip(said)


def _j_pytest(check: Check, r: Result) -> Tuple[str, str]:
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(check.path("pytest.junit.xml")).getroot()
    except (OSError, ET.ParseError):
        err = _text(r.stderr, check.dir)
        if "No module named pytest" in err:  # a test runner is no requirement of gputopo's
            return NA, ("pytest is not installed for this python (pip install pytest): the GPU "
                        "tests did not run; " + _clip(_last_line(err), 120))
        return FAILED, f"exit {r.rc}: no JUnit XML; " + _clip(_last_line(_text(r.stdout, check.dir)))
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return FAILED, f"exit {r.rc}: JUnit XML without a testsuite"
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    line = f"{n['tests']} tests: {n['failures']} failed, {n['errors']} errors, {n['skipped']} skipped"
    if n["failures"] or n["errors"] or r.rc not in (0, 5):
        return FAILED, line
    if n["tests"] == n["skipped"]:
        return NA, line + " (no usable GPU/driver for them)"
    return OK, line


def _j_cluster(check: Check, r: Result) -> Tuple[str, str]:
    doc = _load_json(check.dir / (r.stdout or ""))
    if r.rc != 0 or not isinstance(doc, dict):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    findings = doc.get("findings") or []
    line = f"{len(findings)} finding(s), time {doc.get('time_s')} s ({doc.get('time_source')})"
    return (OK if check.sim is None else NA), line + ("" if check.sim is None else "; cpu fabric (no CUDA)")


def _j_bench_pairs(check: Check, r: Result) -> Tuple[str, str]:
    doc = _load_json(check.dir / (r.stdout or ""))
    if r.rc not in (0, 1) or not isinstance(doc, dict):
        return FAILED, f"exit {r.rc}: " + _clip(_last_line(_text(r.stderr, check.dir)))
    pairs = doc.get("pairs") or []
    return (OK if doc.get("verdict") != "broken" else FAILED,
            f"{len(pairs)} pair(s), {doc.get('measurements')} measurements, verdict {doc.get('verdict')}")


# ----------------------------------------------------------------------------- the steps


def _first_pairs(check: Check, limit: int = 4) -> List[str]:
    """One pair of each link class of the scan (NVLink first), at most ``limit``."""
    scan = _load_json(check.path(cmp.SCAN_JSON)) or {}
    seen: Dict[str, str] = {}
    for p in scan.get("pairs") or []:
        seen.setdefault(str(p.get("link_class")), f"{p['gpus'][0]},{p['gpus'][1]}")
    return [seen[k] for k in sorted(seen, key=lambda c: (not c.startswith("NV"), c))][:limit]


def _one_gpu_only(check: Check) -> Optional[str]:
    n = check.gpu_count()
    return f"{n} GPUs: the pair steps cover it" if n > 1 else None


def _multi_gpu_only(check: Check) -> Optional[str]:
    n = check.gpu_count()
    return None if n > 1 else "one GPU: no pair (this step runs where the check finds 2 or more)"


def _needs(*names: str) -> Callable[[Check], Optional[str]]:
    def why(check: Check) -> Optional[str]:
        for nm in names:
            if not check.path(nm).exists():
                return f"{nm} was not made (its step failed or did not run)"
        return None
    return why


def _both(*fs: Callable[[Check], Optional[str]]) -> Callable[[Check], Optional[str]]:
    def why(check: Check) -> Optional[str]:
        for fn in fs:
            w = fn(check)
            if w:
                return w
        return None
    return why


def _bench_sizes(check: Check) -> str:
    doc = _load_json(check.path(cmp.BENCH_SELF_JSON)) or {}
    sizes = doc.get("sizes_bytes") or [1 << 20, 16 << 20, 64 << 20, 256 << 20]
    return ",".join(f"{s >> 20}M" if s % (1 << 20) == 0 else str(s) for s in sizes)


def _torchrun(check: Check, nproc: int, out: str, fabric: str) -> List[str]:
    return [check.python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "gputopo", "cluster", "--fabric", fabric, "--out", str(check.path(out)), "--json",
            "--timeout", "60"]


def _reversed_visible(check: Check) -> Dict[str, str]:
    n = check.gpu_count()
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(k) for k in reversed(range(n)))}


def steps(check: Check) -> List[Step]:
    q = "--query-gpu=" + ",".join(cmp.QUERY_FIELDS)
    out: List[Step] = []
    for inj in check.a.inject:  # self-tests of the check itself: a hang, a failure
        if inj == "hang":
            out.append(Step("injected-hang", "a step that never ends (and starts a child that never ends)",
                            30, lambda c: [c.python, "-c", "import subprocess, sys, time; subprocess.Popen("
                                           "[sys.executable, '-c', 'import time; time.sleep(600)']); "
                                           "print('hanging', flush=True); time.sleep(600)"],
                            _plain(lambda c, r: "ended")))
        elif inj == "fail":
            out.append(Step("injected-fail", "a step that raises", 30,
                            lambda c: [c.python, "-c", "raise RuntimeError('injected failure')"],
                            _plain(lambda c, r: "ended")))
    out += [
        Step("smi-query", "nvidia-smi --query-gpu (CSV)", 15,
             lambda c: [c.smi, q, "--format=csv,nounits"], _j_query, stdout_to=cmp.SMI_CSV),
        Step("versions", "versions: GPU, driver, CUDA, torch, NCCL, nvidia-ml-py", 45,
             lambda c: [c.python, str(TOOLS / "gpu_check_probe.py"), "versions", "--out",
                        str(c.path("versions.json"))], _j_versions, stdout_to="logs/versions.out"),
        Step("smi-xml", "nvidia-smi -q -x", 20, lambda c: [c.smi, "-q", "-x"], _j_xml, stdout_to=cmp.SMI_XML),
        Step("smi-topo", "nvidia-smi topo -m", 15, lambda c: [c.smi, "topo", "-m"], _j_topo,
             stdout_to=cmp.SMI_TOPO),
        Step("smi-nvlink", "nvidia-smi nvlink -s", 15, lambda c: [c.smi, "nvlink", "-s"], _j_nvlink,
             stdout_to=cmp.SMI_NVLINK),
        Step("scan-json", "gputopo scan --json", 45, lambda c: c.gputopo("scan", *c.sim_args(), "--json"),
             _j_scan, stdout_to=cmp.SCAN_JSON),
        Step("scan-smi", "gputopo scan --format smi", 45,
             lambda c: c.gputopo("scan", *c.sim_args(), "--format", "smi"), _j_scan_smi, stdout_to=cmp.SCAN_SMI),
        Step("compare-scan", "scan vs nvidia-smi, field by field", 30,
             lambda c: [c.python, str(TOOLS / "gpu_check_compare.py"), "scan", str(c.dir)], _j_compare,
             skip=_needs(cmp.SCAN_JSON)),
        Step("bench-self", "gputopo bench --self (GPU 0 alone)", 120,
             lambda c: c.gputopo("bench", *c.sim_args(), "--self", "--gpus", "0", "--json", "--out",
                                 str(c.path("bench-self")), "--timeout", "60"),
             _j_bench_self, stdout_to=cmp.BENCH_SELF_JSON, logs=("bench-self",)),
        Step("cuda-self", "the same copies, bare CUDA-event loop (benchmarks/cuda_self.py)", 60,
             lambda c: [c.python, str(REPO / "benchmarks" / "cuda_self.py"), "--sizes", _bench_sizes(c)],
             _j_cuda_self, stdout_to=cmp.CUDA_SELF_JSON, env=lambda c: {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}),
        Step("self-ratio", "bench --self / bare loop per direction, theoretical rates", 30,
             lambda c: [c.python, str(TOOLS / "gpu_check_compare.py"), "ratio", str(c.dir)], _j_ratio,
             skip=_needs(cmp.BENCH_SELF_JSON)),
        Step("nccl-one-rank", "one-rank NCCL all_reduce through the bench worker", 90,
             lambda c: [c.python, str(TOOLS / "gpu_check_probe.py"), "nccl", "--log-dir", str(c.path("logs/nccl")),
                        "--scan", str(c.path(cmp.SCAN_JSON)), "--out", str(c.path("nccl-one-rank.json")),
                        "--timeout", "60"] + (["--fabric", "cpu"] if c.sim else []),
             _j_nccl, logs=("logs/nccl",)),
        Step("numerics-refusal", "gputopo numerics on one GPU: exit 3 by design", 30,
             lambda c: c.gputopo("numerics", *c.sim_args()), _j_refusal, skip=_one_gpu_only),
        Step("numerics-reference", "the numerics' one-GPU reference training on the GPU", 90,
             lambda c: [c.python, str(TOOLS / "gpu_check_probe.py"), "numerics", "--out",
                        str(c.path("numerics-reference.json"))] + (["--device", "cpu"] if c.sim else []),
             _j_reference, env=lambda c: {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}),
        Step("check-init", "gputopo check --init from the bench-self run", 30,
             lambda c: c.gputopo("check", "--init", "--from", str(c.path("bench-self")), "--spec",
                                 str(c.path("spec.toml"))), _plain(lambda c, r: "wrote spec.toml"),
             skip=_needs("bench-self/run.json")),
        Step("check", "gputopo check of the bench-self run against that spec", 30,
             lambda c: c.gputopo("check", "--spec", str(c.path("spec.toml")), str(c.path("bench-self")),
                                 "--junit", str(c.path("check.junit.xml"))), _j_check, skip=_needs("spec.toml")),
        Step("gate", "gputopo gate on every GPU (one verified copy per pair each way, the all_reduce)", 60,
             lambda c: c.gputopo("gate", *c.sim_args(), "--as", "json", "--budget", "40", "--measure",
                                 "copy+allreduce", "--state-dir", str(c.path("fleet-state"))),
             _j_fleet, stdout_to="gate.json"),
        Step("health", "gputopo health --level quick (NVML, running processes, gate's copies on idle GPUs)", 45,
             lambda c: c.gputopo("health", *c.sim_args(), "--no-history", "--level", "quick", "--as", "json",
                                 "--budget", "30", "--state-dir", str(c.path("fleet-state"))),
             _j_fleet, stdout_to="health.json"),
        Step("bench-pairs", "gputopo bench --quick on one pair of each link class (with numerics)", 180,
             lambda c: c.gputopo("bench", *c.sim_args(), "--quick", *[a for p in _first_pairs(c)
                                                                       for a in ("--pairs", p)],
                                 "--json", "--out", str(c.path("bench-pairs")), "--timeout", "60"),
             _j_bench_pairs, stdout_to="bench-pairs.json", skip=_multi_gpu_only, logs=("bench-pairs",)),
        Step("bench-remapped", "peer copies with CUDA_VISIBLE_DEVICES reversed (GPUs found by bus id)", 90,
             lambda c: c.gputopo("bench", "--quick", "--tests", "p2p", "--pairs", _first_pairs(c, 1)[0],
                                 "--json", "--out", str(c.path("bench-remapped")), "--timeout", "60"),
             _j_bench_pairs, stdout_to="bench-remapped.json", env=_reversed_visible,
             skip=_both(_multi_gpu_only, lambda c: "simulated: no CUDA device to renumber" if c.sim else None),
             logs=("bench-remapped",)),
        Step("cluster-gpus", "gputopo cluster, one rank per GPU (torchrun)", 120,
             lambda c: _torchrun(c, min(c.gpu_count(), 8), "cluster", "cpu" if c.sim else "cuda"),
             _j_cluster, stdout_to="cluster.json", skip=_multi_gpu_only, logs=("cluster",)),
        Step("pytest-gpu", 'pytest -m "gpu or nvml"', 150,
             lambda c: [c.python, "-m", "pytest", "-q", "-m", "gpu or nvml", "-p", "no:cacheprovider", "-rs",
                        "--junitxml", str(c.path("pytest.junit.xml")), "tests"], _j_pytest),
        Step("cluster-one-rank", "gputopo cluster with one rank (torchrun)", 60,
             lambda c: _torchrun(c, 1, "cluster", "cpu" if c.sim else "cuda"), _j_cluster,
             stdout_to="cluster.json", skip=_one_gpu_only, logs=("cluster",)),
    ]
    return out


# ----------------------------------------------------------------------------- summary and archive


def _versions(check: Check) -> Dict[str, Any]:
    v = _load_json(check.path("versions.json")) or {}
    xml: Dict[str, Any] = {}
    try:
        xml = cmp.parse_xml(check.path(cmp.SMI_XML).read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - not captured or not XML: the step says so
        pass
    rows = _query_rows(check.path(cmp.SMI_CSV))
    devs = v.get("cuda_devices") or []
    return {"gpu": (rows[0].get("name") if rows else None) or (devs[0]["name"] if devs else None),
            "gpu_count": len(rows) if rows else None,
            "driver": xml.get("driver_version") or (rows[0].get("driver_version") if rows else None),
            "cuda_driver": xml.get("cuda_version"), "torch": v.get("torch"),
            "torch_cuda_build": v.get("torch_cuda_build"), "nccl": v.get("nccl"),
            "nvidia_ml_py": v.get("pkg:nvidia-ml-py"), "python": v.get("python"),
            "gputopo_commit": v.get("git_commit")}


def write_summary(check: Check, plan: List[Step], done: bool, interrupted: bool = False) -> None:
    results = check.results
    counts: Dict[str, int] = {}
    for r in results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    ran = {r.name for r in results}
    pending = [s.name for s in plan if s.name not in ran]
    labels = []
    if check.fake_smi:
        labels.append("FAKE nvidia-smi (tests/fake_nvidia_smi: outputs written by hand from NVIDIA's documented "
                      "formats): every nvidia-smi figure and comparison here checks the plumbing, not a GPU")
    if check.sim:
        labels.append(f"SIMULATED: gputopo's scan and bench ran on the sim '{check.sim}'; nothing measured a GPU")
    elapsed = time.monotonic() - check.t0
    doc = {"schema_version": 1, "tool": "tools/gpu_check.py", "started": check.started, "folder": str(check.dir),
           "archive": str(_archive_path(check)), "complete": done and not interrupted, "interrupted": interrupted,
           "budget_s": check.a.budget, "elapsed_s": round(elapsed, 1), "fake_nvidia_smi": check.fake_smi,
           "sim": check.sim, "labels": labels, "versions": _versions(check), "counts": counts,
           "steps": [r.to_json() for r in results], "not_run_yet": pending,
           "tracebacks": sum(len(r.tracebacks) for r in results), "archive_left_out": check.archive_left_out}
    (check.dir / "summary.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    v = doc["versions"]
    md = [f"# gputopo GPU check: {v.get('gpu') or 'unknown GPU'}", ""]
    md += [f"**{lab}**" for lab in labels] + ([""] if labels else [])
    state = "complete" if done and not interrupted else ("INTERRUPTED" if interrupted else "RUNNING (cut here)")
    md += [f"started {check.started}; {state}; {elapsed:.0f} s of a {check.a.budget:.0f} s budget",
           f"GPU {_val(v['gpu'])} x{_val(v['gpu_count'])}, driver {_val(v['driver'])}, CUDA "
           f"{_val(v['cuda_driver'])}; torch {_val(v['torch'])} (CUDA build {_val(v['torch_cuda_build'])}), "
           f"NCCL {_val(v['nccl'])}, nvidia-ml-py {_val(v['nvidia_ml_py'])}, python {_val(v['python'])}; "
           f"gputopo commit {_val(v['gputopo_commit'])}",
           "", "verdicts: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())), "",
           "| # | step | verdict | exit | s (timeout) | result |", "|---|---|---|---|---|---|"]
    for r in results:
        md.append(f"| {r.n} | {r.name} | {r.verdict} | {'' if r.rc is None else r.rc} | {r.seconds:.1f} "
                  f"({r.timeout_s:.0f}) | {cmp._md_cell(r.line).replace('...', '…')} |")
    for name in pending:
        md.append(f"| | {name} | not run yet | | | |")
    tbs = [(r.name, t) for r in results for t in r.tracebacks]
    md += ["", f"Python tracebacks: {len(tbs)}" + (" (tracebacks.md)" if tbs else ""), "",
           "Details: comparison.md (scan vs nvidia-smi), self-ratio.md (bench --self vs the bare loop), "
           "logs/ (each step's stdout and stderr), summary.json."]
    (check.dir / "summary.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    tb_md = ["# Python tracebacks seen by the GPU check", ""]
    for name, t in tbs:
        tb_md += [f"## {name}: {t['file']}", "", "```", t["text"], "```", ""]
    (check.dir / "tracebacks.md").write_text("\n".join(tb_md) + "\n", encoding="utf-8")


def _archive_path(check: Check) -> Path:
    return check.dir.parent / f"{check.dir.name}.tar.gz"


def write_archive(check: Check) -> Path:
    """The folder as one .tar.gz beside it (files over ARCHIVE_FILE_MAX listed, not packed)."""
    final = _archive_path(check)
    tmp = final.with_suffix(".tmp")
    total, left_out = 0, []
    files = sorted(p for p in check.dir.rglob("*") if p.is_file() and not p.is_symlink())
    with tarfile.open(tmp, "w:gz") as tar:
        for p in files:
            rel = p.relative_to(check.dir)
            size = p.stat().st_size
            if size > ARCHIVE_FILE_MAX or total + size > ARCHIVE_MAX_BYTES or p.suffix in (".sqlite-wal", ".sqlite-shm"):
                left_out.append(f"{rel} ({size} bytes)")
                continue
            total += size
            tar.add(p, arcname=f"{check.dir.name}/{rel}")
    os.replace(tmp, final)
    check.archive_left_out = left_out
    if check.a.copy_to:
        dest = Path(check.a.copy_to)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(final, dest / final.name)
    return final


# ----------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                    help="hard bound on the whole run, seconds (default %(default)s)")
    ap.add_argument("--sim", help="run gputopo's scan/bench on this built-in sim (no GPU here)")
    ap.add_argument("--nvidia-smi", help="the nvidia-smi to use (a fake: tests/fake_nvidia_smi/nvidia-smi)")
    ap.add_argument("--python", help="the python that runs the steps (default: this one)")
    ap.add_argument("--reports", default=str(REPO / "reports"), help="where the folder goes")
    ap.add_argument("--out", help="the folder itself (default reports/gpu-check-<gpu>)")
    ap.add_argument("--copy-to", help="also copy the archive into this folder after every step")
    ap.add_argument("--only", default="", help="run only these steps (comma-separated)")
    ap.add_argument("--skip", default="", help="skip these steps (comma-separated)")
    ap.add_argument("--timeout", action="append", default=[], metavar="STEP=SECONDS",
                    help="another timeout for one step (repeatable)")
    ap.add_argument("--inject", action="append", default=[], choices=("hang", "fail"),
                    help="add a step that hangs or fails (a self-test of the check)")
    ap.add_argument("--list", action="store_true", help="list the steps and exit")
    a = ap.parse_args(argv)
    if a.budget <= RESERVE_S + MIN_STEP_S:
        ap.error(f"--budget must be more than {RESERVE_S + MIN_STEP_S:.0f} s")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.list:
        import types

        for s in steps(types.SimpleNamespace(a=a)):  # type: ignore[arg-type]  # only .a is read here
            print(f"{s.name:<20} {s.timeout_s:>4.0f} s  {s.what}")
        return 0
    check = Check(a)
    plan = steps(check)
    names = {s.name for s in plan}
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    skip = {x.strip() for x in a.skip.split(",") if x.strip()}
    unknown = (only | skip | {k for k in check.timeouts}) - names
    if unknown:
        print(f"gpu_check: error: unknown step(s) {', '.join(sorted(unknown))}; known: {', '.join(s.name for s in plan)}",
              file=sys.stderr)
        shutil.rmtree(check.dir, ignore_errors=True)
        return 2
    for s in plan:
        if (only and s.name not in only) or s.name in skip:
            s.skip = (lambda why: (lambda c: why))("left out (--only/--skip)")
    print(f"gpu-check: {len(plan)} steps, budget {a.budget:.0f} s" + (f", sim {a.sim}" if a.sim else "")
          + (f", nvidia-smi {a.nvidia_smi}" if a.nvidia_smi else ""), flush=True)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    interrupted = False
    try:
        for n, step in enumerate(plan, 1):
            try:
                r = run_step(check, n, step, plan[n:])
            except (Interrupted, KeyboardInterrupt):
                interrupted = True
                r = Result(n, step.name, step.what, verdict="interrupted", line="the check was interrupted here")
            check.results.append(r)
            check.by_name[step.name] = r
            if step.name == "smi-query":  # nvidia-smi has said what the GPU is (or could not)
                check.name_folder()
            print(f"[{n:2d}/{len(plan)}] {step.name:<20} {r.verdict:<12} {r.seconds:6.1f}s  {_clip(r.line, 150)}",
                  flush=True)
            write_summary(check, plan, done=False, interrupted=interrupted)
            if check.named:
                write_archive(check)
            if interrupted:
                break
    except KeyboardInterrupt:  # between steps (a summary or the archive being written)
        interrupted = True
    finally:
        if not check.named:
            check.name_folder()
        write_summary(check, plan, done=True, interrupted=interrupted)
        final = write_archive(check)
        write_summary(check, plan, done=True, interrupted=interrupted)  # with what the archive left out
        final = write_archive(check)
        if check.bin_dir:
            shutil.rmtree(check.bin_dir, ignore_errors=True)
    bad = sum(1 for r in check.results if r.verdict in (FAILED, TIMEOUT, DIFFERS, BELOW, "interrupted"))
    print(f"gpu-check: {check.dir} and {final} ({final.stat().st_size // 1024} KiB); "
          f"{bad} step(s) not ok, {sum(len(r.tracebacks) for r in check.results)} traceback(s)", flush=True)
    return 130 if interrupted else (1 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())
