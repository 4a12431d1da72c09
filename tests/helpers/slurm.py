"""A real Slurm on this machine, for the tests of `gputopo health --as slurm-healthcheck`
(tests/slurm/): Debian's munge, slurmctld, slurmd and slurm-client (22.05), started by the test
in a folder of its own and stopped by pid at its end.

:class:`LocalSlurm` writes a one-node localhost ``slurm.conf`` (the node is this machine, with
the CPUs and memory ``slurmd -C`` reports), a munge key, and a ``HealthCheckProgram`` wrapper
(Slurm runs it with no arguments and an environment of its own: no ``SLURM_CONF``, a short
``PATH``) that runs ``python -m gputopo health --as slurm-healthcheck --sim FILE`` every
``HealthCheckInterval`` seconds, on a node in any state (``HealthCheckNodeState=ANY``). It starts
munged, slurmctld and slurmd in the foreground (``-F`` / ``-D``: each is the process it started,
so it stops exactly those), on free ports, with every state, spool, log, pid and socket file in
its folder; clients (``scontrol``, ``sinfo``) find the cluster through ``SLURM_CONF``.

Each health check's run is appended to ``hc.runs`` (its end time and exit code) and its output
to ``hc.out``, so a test can wait for the next check instead of sleeping a guessed time.

For the Prolog tests (issue 50) it also writes a ``Prolog`` wrapper (its runs logged in
``prolog.runs`` with the ``SLURM_JOB_GPUS`` slurmd gave it) and a ``gres.conf`` of stand-in GPU
device files, so a job's ``--gres=gpu:K`` allocates GPUs the Prolog's ``gate --allocated`` reads;
``sbatch`` submits a batch job and ``job`` reads its state (``JobState``, ``Reason``, ``Restarts``).

Which packages are needed, and what happens without them (skip here, fail under ``CI=true``),
is :func:`slurm_or_skip`.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest

from helpers.browser import in_ci

#: The repository root: the health check runs this checkout's gputopo, as the tests' CLI does.
REPO = Path(__file__).resolve().parents[2]
#: Debian 12's packages (what .ci/run installs) and the programs the tests use from each.
PROGRAMS = {"munged": "munge", "munge": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd",
            "scontrol": "slurm-client", "sinfo": "slurm-client", "sbatch": "slurm-client"}
#: Where Debian puts the daemons (not on a non-root PATH).
SBIN = ("/usr/sbin", "/sbin")
#: Seconds between two health checks (slurm.conf HealthCheckInterval).
INTERVAL_S = 3
#: How long a state the health check should reach may take: several intervals, each a
#: `python -m gputopo` start on 2 loaded cores.
SETTLE_S = 90.0

#: What the node is: one H100 SXM alone (a one-GPU VM), healthy; and the same GPU with the
#: driver's Xid 79 ("GPU has fallen off the bus") in the kernel log, a failure `health` reads
#: without touching the GPU (--level passive). The same name: the same machine (GPU UUIDs).
HEALTHY = 'extends = "h100-sxm-1gpu"\nname = "slurm-node"\n'
FAULTY = HEALTHY + "\n[defaults]\nxid = [79]\n"
#: The Prolog tests' node (issue 50): four A100 PCIe cards, GPUs 0-1 and 2-3 bridged by NVLink
#: (NV12), and the same machine with every NVLink down, which `gate` fails on (GPU 0 and 1:
#: nvlink-down). gres.conf declares two stand-in devices, nvidia0 and nvidia1: a job asking
#: --gres=gpu:2 gets the bridged pair 0-1 (the sim's minor numbers are its indices).
GATE_HEALTHY = 'extends = "a100-pcie-4gpu-bridged"\nname = "slurm-gpus"\n'
GATE_FAULTY = GATE_HEALTHY + '\n[defaults]\nnvlinks_down = "all"\n'


def processes_under(root: Path) -> list[str]:
    """Processes whose command line names ``root`` (the daemons, the health-check wrapper and
    the gputopo it runs all do)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(root) in cmd:
            found.append(f"{proc.name}: {cmd.strip()}")
    return found


def find(program: str) -> Optional[str]:
    found = shutil.which(program)
    if found:
        return found
    return next((str(Path(d) / program) for d in SBIN if (Path(d) / program).is_file()), None)


def slurm_or_skip() -> dict[str, str]:
    """The programs' paths. Where one is missing, or this is not root (slurmd runs jobs and
    health checks as root), the test skips saying why; under CI (``CI=true``) it fails instead:
    .ci/run installs the packages and runs as root, so the real-Slurm tests must run there."""
    paths = {p: find(p) for p in PROGRAMS}
    missing = sorted({PROGRAMS[p] for p, path in paths.items() if path is None})
    why = None
    if missing:
        why = (f"Slurm is not installed here (missing {', '.join(missing)}: apt-get install "
               "--no-install-recommends slurmctld slurmd slurm-client munge)")
    elif os.geteuid() != 0:
        why = "the real-Slurm tests start slurmd, which runs as root; this is not root"
    if why:
        if in_ci():
            pytest.fail(f"CI is set but {why}: .ci/run installs the packages and runs as root",
                        pytrace=False)
        pytest.skip(why)
    return {p: str(path) for p, path in paths.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    """One line of ``sinfo -N``: the node's state (``idle``, ``drained``, ``draining``,
    ``idle*``...), the drain reason (``""`` when none) and who set it."""
    state: str
    reason: str
    user: str

    @property
    def drained(self) -> bool:
        return "drain" in self.state


class LocalSlurm:
    """One slurmctld and one slurmd (the node ``name``, this machine) under ``root``."""

    def __init__(self, root: Path, programs: dict[str, str], sim: Path, node_state: str = "UNKNOWN",
                 prolog: Optional[str] = None, gpus: int = 0):
        """``node_state``: the node's ``State=`` in slurm.conf (``DRAIN``: drained at start,
        with no reason). ``prolog``: the command line slurm.conf's ``Prolog`` wrapper runs
        (:meth:`write_prolog`); ``gpus``: that many GPUs declared as gres (:meth:`write_gres`)."""
        self.root = root
        self.node_state = node_state
        self.prolog = prolog
        self.gpus = gpus
        self.programs = programs
        self.sim = sim
        self.name = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.logs = root / "log"
        self.runs = root / "hc.runs"
        self.hc_out = root / "hc.out"
        self.state_dir = root / "gputopo-state"
        self.procs: list[tuple[str, subprocess.Popen]] = []

    # ------------------------------------------------------------------ the files
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        return env

    def _hardware(self) -> str:
        """The node's CPUs and memory as slurmd sees them (its -C line, less NodeName/UpTime)."""
        out = subprocess.run([self.programs["slurmd"], "-C"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        line = next(ln for ln in out.splitlines() if ln.startswith("NodeName="))
        return " ".join(w for w in line.split()[1:] if not w.startswith("UpTime="))

    def write(self) -> None:
        r = self.root
        for d in ("munge", "state", "spool", "log", "gputopo-state"):
            (r / d).mkdir(parents=True, exist_ok=True)
        (r / "munge").chmod(0o711)  # munged wants its socket folder searchable by all
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        user = getpass.getuser()
        hc = r / "hc.sh"
        python = sys.executable
        # Slurm runs HealthCheckProgram with no arguments and without SLURM_CONF: the wrapper
        # says everything, as a site's would.
        hc.write_text(f"""#!/bin/sh
export SLURM_CONF='{self.conf}'
export GPUTOPO_HISTORY='{r / "history.sqlite"}'
export PYTHONPATH='{REPO}'
'{python}' -m gputopo health --as slurm-healthcheck --sim '{self.sim}' \\
    --node '{self.name}' --state-dir '{self.state_dir}' >> '{self.hc_out}' 2>&1
rc=$?
echo "$(date +%s.%N) $rc" >> '{self.runs}'
exit $rc
""")
        hc.chmod(0o755)
        extra = ""
        if self.prolog is not None:
            extra += f"Prolog={self.write_prolog()}\n"
        gres = ""
        if self.gpus:
            self.write_gres()
            extra += "GresTypes=gpu\n"
            gres = f" Gres=gpu:{self.gpus}"
        self.conf.write_text(f"""# written by tests/helpers/slurm.py: one node, this machine
ClusterName=gputopotest
SlurmctldHost={self.name}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={r / "munge" / "munge.socket"}
SlurmUser={user}
SlurmdUser={user}
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r / "slurmd.pid"}
SlurmctldLogFile={self.logs / "slurmctld.log"}
SlurmdLogFile={self.logs / "slurmd.log"}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType={"select/cons_tres" if self.gpus else "select/linear"}
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
HealthCheckProgram={hc}
HealthCheckInterval={INTERVAL_S}
HealthCheckNodeState=ANY
{extra}NodeName={self.name} NodeAddr=127.0.0.1 {self._hardware()}{gres} State={self.node_state}
PartitionName=gputopo Nodes={self.name} Default=YES MaxTime=INFINITE State=UP
""")

    def write_gres(self) -> None:
        """``gres.conf``: the node's ``gpus`` GPUs, each a stand-in device file ``dev/nvidiaN``
        in the folder (no GPU driver here): a character device with /dev/null's numbers (1, 3),
        since slurmd refuses a ``File=`` that is not a character or block device. slurmd reads
        gres.conf beside slurm.conf; with ``TaskPlugin=task/none`` no cgroup constrains the
        files. With ``select/cons_tres`` (slurm.conf, when ``gpus``) a job asking
        ``--gres=gpu:K`` is given K of them, and slurmd sets ``SLURM_JOB_GPUS`` and
        ``CUDA_VISIBLE_DEVICES`` (their numbers, the N of ``nvidiaN``) in the Prolog's
        environment. (Regular files instead: slurmd logs "is not a valid character or block
        device" and sets neither.)"""
        dev = self.root / "dev"
        dev.mkdir(exist_ok=True)
        for k in range(self.gpus):
            node = dev / f"nvidia{k}"
            if not node.exists():
                os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        last = self.gpus - 1
        files = f"{dev}/nvidia[0-{last}]" if last else f"{dev}/nvidia0"
        (self.root / "gres.conf").write_text(
            f"# written by tests/helpers/slurm.py: stand-in device files\n"
            f"NodeName={self.name} Name=gpu File={files}\n")

    def write_prolog(self) -> Path:
        """``prolog.sh``, slurm.conf's ``Prolog``: slurmd runs it as root before the job's first
        step on the node, with no arguments and the job's ids and GPUs in its environment; its
        exit code decides (0: the job runs; else Slurm drains the node, "Prolog error", and
        requeues a batch job held). The wrapper sets what Slurm does not (``SLURM_CONF``,
        ``PYTHONPATH``), runs :attr:`prolog` and appends to ``prolog.runs`` the job id,
        ``SLURM_JOB_GPUS`` and ``CUDA_VISIBLE_DEVICES`` as slurmd gave them, and its exit code."""
        pro = self.root / "prolog.sh"
        pro.write_text(f"""#!/bin/sh
export SLURM_CONF='{self.conf}'
export GPUTOPO_HISTORY='{self.root / "history.sqlite"}'
export PYTHONPATH='{REPO}'
{self.prolog} >> '{self.root / "prolog.out"}' 2>&1
rc=$?
echo "job=$SLURM_JOB_ID gpus=${{SLURM_JOB_GPUS-unset}} cuda=${{CUDA_VISIBLE_DEVICES-unset}} rc=$rc" >> '{self.root / "prolog.runs"}'
exit $rc
""")
        pro.chmod(0o755)
        return pro

    def prolog_runs(self) -> list[dict[str, str]]:
        """Each run of the Prolog so far: ``{"job", "gpus", "cuda", "rc"}`` as the wrapper logged them."""
        f = self.root / "prolog.runs"
        if not f.exists():
            return []
        return [dict(w.split("=", 1) for w in line.split()) for line in f.read_text().splitlines() if line.strip()]

    # ------------------------------------------------------------------ the daemons
    def _start(self, what: str, argv: list[str]) -> None:
        out = open(self.logs / f"{what}.out", "wb")
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env(),
                                    start_new_session=True)
        finally:
            out.close()
        self.procs.append((what, proc))

    def start(self) -> None:
        r = self.root
        self.write()
        self._start("munged", [self.programs["munged"], "-F", "--force",
                               f"--socket={r / 'munge' / 'munge.socket'}",
                               f"--key-file={r / 'munge' / 'munge.key'}",
                               f"--log-file={self.logs / 'munged.log'}",
                               f"--pid-file={r / 'munge' / 'munged.pid'}",
                               f"--seed-file={r / 'munge' / 'munged.seed'}"])
        self.wait_for(lambda: (r / "munge" / "munge.socket").exists(), "munged's socket", 30)
        self._start("slurmctld", [self.programs["slurmctld"], "-D", "-i", "-f", str(self.conf)])
        self.wait_for(lambda: self._ping(), "slurmctld answering scontrol ping", 60)
        self._start("slurmd", [self.programs["slurmd"], "-D", "-N", self.name, "-f", str(self.conf)])
        self.wait_for(self._registered, "the node registering with slurmctld", 90)

    def _registered(self) -> bool:
        """slurmd answered: the state has no ``*`` (not responding) and is not unknown/down."""
        state = self.node().state
        return bool(state) and not state.endswith("*") and state not in ("unknown", "down")

    def _ping(self) -> bool:
        ran = self.scontrol("ping", check=False)
        return ran.returncode == 0 and "UP" in ran.stdout

    def stop(self) -> list[str]:
        """Every daemon this started, newest first, by its pid (its process group: it leads a
        session of its own): SIGTERM, then SIGKILL after 15 s. Then whatever still runs from
        this folder (a health check slurmd started: its wrapper and gputopo name the folder)
        is given 30 s to end by itself (a check is bounded by its budget), then killed by pid;
        those are returned ("pid: command"), for the caller to fail on."""
        for _what, proc in reversed(self.procs):
            for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
                if proc.poll() is not None:
                    break
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    continue
        deadline = time.monotonic() + 30.0
        while processes_under(self.root) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = processes_under(self.root)
        for line in left:
            try:
                os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left

    def alive(self) -> list[str]:
        return [what for what, proc in self.procs if proc.poll() is None]

    # ------------------------------------------------------------------ the clients
    def run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        ran = subprocess.run([self.programs[program], *args], capture_output=True, text=True,
                             env=self.env(), timeout=30)
        if check and ran.returncode != 0:
            raise AssertionError(f"{program} {' '.join(args)} exited {ran.returncode}: "
                                 f"{ran.stderr.strip()}\n{self.diagnostics()}")
        return ran

    def scontrol(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("scontrol", *args, check=check)

    def node(self) -> Node:
        """The node as ``sinfo`` shows it: state, reason (the text ``sinfo -R`` shows), user."""
        out = self.run("sinfo", "-h", "-N", "-n", self.name, "-o", "%T|%E|%u").stdout.strip()
        state, reason, user = (out.split("|", 2) + ["", ""])[:3]
        return Node(state.strip(), "" if reason.strip() == "none" else reason.strip(), user.strip())

    def sbatch(self, *args: str, script: str = "#!/bin/sh\necho ran\n") -> str:
        """Submit ``script`` as a batch job (``sbatch --parsable ARGS``); its id. Its output goes
        to ``job-<id>.out`` in the folder."""
        path = self.root / "job.sh"
        path.write_text(script)
        path.chmod(0o755)
        out = self.run("sbatch", "--parsable", "-o", str(self.root / "job-%j.out"), "-D", str(self.root),
                       *args, str(path)).stdout.strip()
        return out.split(";", 1)[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol -o show job ID`` as a dict (``JobState``, ``Reason``, ``Restarts``, ``BatchFlag``...);
        ``{}`` once slurmctld forgot the job."""
        ran = self.scontrol("-o", "show", "job", job_id, check=False)
        if ran.returncode != 0:
            return {}
        return dict(w.split("=", 1) for w in ran.stdout.split() if "=" in w)

    def job_output(self, job_id: str) -> str:
        f = self.root / f"job-{job_id}.out"
        return f.read_text(errors="replace") if f.exists() else ""

    def drain(self, reason: str) -> None:
        self.scontrol("update", f"nodename={self.name}", "state=drain", f"reason={reason}")

    def sinfo_reasons(self) -> str:
        """``sinfo -R`` as a person reads it."""
        return self.run("sinfo", "-R").stdout

    # ------------------------------------------------------------------ the health checks
    def checks_done(self) -> list[int]:
        """The exit code of every health check Slurm ran so far, in order."""
        if not self.runs.exists():
            return []
        return [int(line.split()[1]) for line in self.runs.read_text().splitlines() if line.strip()]

    def wait_checks(self, n: int = 2, timeout_s: float = SETTLE_S) -> None:
        """Until ``n`` more health checks have run to their end (so the next state a test reads
        is one the check had the chance to change, not a guess at a sleep)."""
        start = len(self.checks_done())
        self.wait_for(lambda: len(self.checks_done()) >= start + n,
                      f"{n} more health checks (HealthCheckInterval={INTERVAL_S})", timeout_s)

    def flip(self, text: str) -> None:
        """The sim the health check reads becomes ``text`` (whole: written beside and renamed)."""
        part = self.sim.with_suffix(".part")
        part.write_text(text)
        os.replace(part, self.sim)

    def wait_for(self, ok: Callable[[], bool], what: str, timeout_s: float = SETTLE_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [w for w, p in self.procs if p.poll() is not None]
            if dead:
                raise AssertionError(f"{', '.join(dead)} died while waiting for {what}\n"
                                     f"{self.diagnostics()}")
            if ok():
                return
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}\n"
                             f"{self.diagnostics()}")

    def diagnostics(self) -> str:
        """What a failure shows: the node, the last health checks and the daemons' log tails."""
        parts = []
        try:
            n = self.node() if self._ping() else None
            parts.append(f"node: {n}")
        except Exception as e:  # the failure being reported may be that Slurm does not answer
            parts.append(f"node: not readable ({e})")
        parts.append(f"health checks (exit codes): {self.checks_done()}")
        parts.append(f"prolog runs: {self.prolog_runs()}")
        for f in (self.hc_out, self.root / "prolog.out", *sorted(self.logs.glob("*"))):
            if f.is_file():
                tail = f.read_text(errors="replace").splitlines()[-12:]
                parts.append(f"--- {f.name} (last lines)\n" + "\n".join(tail))
        return "\n".join(parts)


def running(cluster: "LocalSlurm"):
    """A fixture's body: ``cluster`` started, yielded, stopped; no process of it may outlive the
    daemons (those still running 30 s after they stopped are killed and fail the test)."""
    try:
        cluster.start()
        yield cluster
    finally:
        left = cluster.stop()
    assert not left, ("processes still running 30 s after the daemons were stopped (killed):\n"
                      + "\n".join(left))
