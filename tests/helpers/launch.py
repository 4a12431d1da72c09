"""What the cluster tests' launched ranks share: a free loopback port for the rendezvous, and an
environment with no launcher variables of the test runner's own (srun's, torchrun's, gputopo's)."""

from __future__ import annotations

import os
import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(**more) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "GPUTOPO_")) and k not in
           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", **more)
    return env
