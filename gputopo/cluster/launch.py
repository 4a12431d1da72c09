"""Where this process sits in the job: torchrun's variables, or Slurm's when those are absent.

torchrun (and any torch.distributed launcher) sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``. Under ``srun`` without torchrun,
they are taken from ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``,
``SLURM_NTASKS_PER_NODE`` (or ``SLURM_TASKS_PER_NODE``) and the first host of
``SLURM_JOB_NODELIST``; ``MASTER_PORT`` defaults to 29500 (set it to choose another). gputopo
starts no process itself: the launcher does.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Mapping, Optional

from gputopo.console import clip
from gputopo.errors import UsageError

DEFAULT_MASTER_PORT = 29500
#: Overrides the hostname as the node's name (two "nodes" on one host in tests, or short names).
NODE_NAME_ENV = "GPUTOPO_NODE_NAME"


@dataclass
class LaunchEnv:
    launcher: str  # "torchrun" | "slurm"
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    node_name: str

    def export(self, environ=None) -> None:
        """Set the variables ``init_process_group(init_method="env://")`` reads."""
        env = os.environ if environ is None else environ
        env.update(RANK=str(self.rank), WORLD_SIZE=str(self.world_size),
                   LOCAL_RANK=str(self.local_rank), LOCAL_WORLD_SIZE=str(self.local_world_size),
                   MASTER_ADDR=self.master_addr, MASTER_PORT=str(self.master_port))


_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def first_host(nodelist: str) -> str:
    """The first host of a Slurm hostlist: ``gpu[07-09,12],login1`` -> ``gpu07``."""
    text = nodelist.strip()
    m = re.match(r"^([^\[,]*)(\[([^\]]*)\])?([^,]*)", text)
    if not m or not (m.group(1) or m.group(3)) or text.count("[") != text.count("]"):
        raise UsageError(f"SLURM_JOB_NODELIST {clip(nodelist)!r}: not a Slurm host list")
    first = m.group(3).split(",")[0].split("-")[0] if m.group(3) else ""
    host = f"{m.group(1)}{first}{m.group(4) if m.group(3) else ''}"
    if not _HOST_RE.match(host):
        raise UsageError(f"SLURM_JOB_NODELIST {clip(nodelist)!r}: not a Slurm host list (its first "
                         f"host would be {clip(host)!r})")
    return host


def _tasks_per_node(env: Mapping[str, str]) -> Optional[int]:
    text = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
    m = re.match(r"^\s*(\d{1,9})", text)  # "4(x2),3": the first node's count
    return int(m.group(1)) if m else None


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        text = env[name]
        if len(text) > 12:
            raise ValueError(text)
        return int(text)
    except (KeyError, ValueError):
        raise UsageError(f"{name}={clip(str(env.get(name)))!r}: expected an integer (set by the launcher)") from None


def _checked(le: LaunchEnv) -> LaunchEnv:
    """Values no launcher sets (WORLD_SIZE=0, RANK past WORLD_SIZE, port 99999) refused in one
    line naming the variable, before torch.distributed fails on them with a traceback or waits."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE") if le.launcher == "torchrun" else \
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE")
    if le.world_size < 1:
        raise UsageError(f"{names[1]}={le.world_size}: a job has at least 1 rank")
    if not 0 <= le.rank < le.world_size:
        raise UsageError(f"{names[0]}={le.rank}: ranks are 0 to {names[1]}-1 = {le.world_size - 1}")
    if not 1 <= le.local_world_size <= le.world_size:
        raise UsageError(f"{names[3]}={le.local_world_size}: expected 1 to {names[1]} = {le.world_size}")
    if not 0 <= le.local_rank < le.local_world_size:
        raise UsageError(f"{names[2]}={le.local_rank}: local ranks are 0 to {le.local_world_size - 1}")
    if not 1 <= le.master_port <= 65535:
        raise UsageError(f"MASTER_PORT={le.master_port}: a TCP port is 1 to 65535")
    if not le.master_addr.strip() or any(c.isspace() for c in le.master_addr):
        raise UsageError(f"MASTER_ADDR={clip(le.master_addr)!r}: not a host name or address")
    return le


def node_name(env: Optional[Mapping[str, str]] = None) -> str:
    env = os.environ if env is None else env
    return (env.get(NODE_NAME_ENV) or "").strip() or socket.gethostname()


def launch_env(env: Optional[Mapping[str, str]] = None) -> LaunchEnv:
    """This rank's place, from torchrun's variables or else Slurm's (UsageError if neither)."""
    env = os.environ if env is None else env
    name = node_name(env)
    if "RANK" in env and "WORLD_SIZE" in env:
        for k in ("MASTER_ADDR", "MASTER_PORT"):
            if k not in env:
                raise UsageError(f"RANK is set but {k} is not: run gputopo cluster under torchrun")
        world = _int(env, "WORLD_SIZE")
        local = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(world), **env}
        return _checked(LaunchEnv("torchrun", _int(env, "RANK"), world, _int(local, "LOCAL_RANK"),
                                  _int(local, "LOCAL_WORLD_SIZE"), env["MASTER_ADDR"],
                                  _int(env, "MASTER_PORT"), name))
    if "SLURM_PROCID" in env:
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        addr = env.get("MASTER_ADDR") or (first_host(nodelist) if nodelist else None)
        if not addr:
            raise UsageError("srun: no SLURM_JOB_NODELIST and no MASTER_ADDR to meet at")
        world = _int(env, "SLURM_NTASKS")
        port = _int({"MASTER_PORT": env.get("MASTER_PORT") or str(DEFAULT_MASTER_PORT)}, "MASTER_PORT")
        return _checked(LaunchEnv("slurm", _int(env, "SLURM_PROCID"), world, _int(env, "SLURM_LOCALID"),
                                  min(_tasks_per_node(env) or world, world), addr, port, name))
    raise UsageError("gputopo cluster runs inside the ranks of a launch: `torchrun --nnodes N "
                     "--nproc-per-node G -m gputopo cluster` or `srun gputopo cluster` (see README); "
                     "for a simulated cluster use --sim FILE, to preview use --plan --nodes N")
