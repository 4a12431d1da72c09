"""Files under a host root (``/`` on a real machine, a simulated host's folder): joining and
reading them without raising, and the two identity facts read that way (hostname, kernel).

A missing file is None (or a NotAvailable saying which file), never an exception: the host
reader turns every unreadable fact into a reason, not a crash.
"""

from __future__ import annotations

import os
from typing import Optional

from gputopo.model.values import NotAvailable


def host_path(root: str, rel: str) -> str:
    """``rel`` (with or without a leading slash) under ``root``."""
    return os.path.join(root, rel.lstrip("/"))


def read_host_file(root: str, rel: str) -> Optional[str]:
    """The stripped text of ``root/rel``, or None when it cannot be read."""
    try:
        with open(host_path(root, rel), encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def read_hostname(root: str):
    """The host name from procfs or /etc/hostname; the live one on ``/``; else NotAvailable."""
    for rel in ("proc/sys/kernel/hostname", "etc/hostname"):
        text = read_host_file(root, rel)
        if text:
            return text.splitlines()[0].strip()
    if os.path.abspath(root) == "/":
        import socket

        return socket.gethostname()
    return NotAvailable(f"no hostname under {root} (proc/sys/kernel/hostname, etc/hostname)")


def read_kernel(root: str):
    """The kernel release from procfs; the live one on ``/``; else NotAvailable."""
    text = read_host_file(root, "proc/sys/kernel/osrelease")
    if text:
        return text
    if os.path.abspath(root) == "/":
        return os.uname().release
    return NotAvailable(f"cannot read {host_path(root, 'proc/sys/kernel/osrelease')}")
