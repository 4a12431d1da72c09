"""`import nccl-debug`: channel lines printed without NCCL's ``host:pid:tid`` prefix, and whether
the transport they name was used when an error followed.

NCCL (src/debug.cc ``ncclDebugLogV``, NVIDIA/nccl master) prints ``hostname:pid:tid `` at the
start of every line but its version line, whether to stdout or to NCCL_DEBUG_FILE, so a line
without it had it cut off after the run (``grep -o 'NCCL INFO.*'``, ``cut``, a paste). In a log
none of whose lines has the prefix, the lines are read in order as one process's (a one-process
run, or one ``NCCL_DEBUG_FILE=nccl.%h.%p`` file), and a set-up that failed after a channel line
is "tried, set-up failed" as for prefixed lines. In a log with prefixed lines too, a line without
it cannot be tied to the process whose error path followed: its use is "not known", never
"used". The logs here are WRITTEN variants of the posted ray_lightning issue 24 excerpt
(tests/fixtures/nccl-debug, source in its README.md) and of the megatron issue 516 excerpt: the
prefix cut from some or all lines, one line added where said."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

from gputopo.bench.nccl_transport import transport_cell
from gputopo.probe.nccl_log import parse_nccl_debug
from gputopo.report.nccl_routes import ddp_survived_clause

DEBUG = FIXTURES / "nccl-debug"
PEER_217 = DEBUG / "ray-lightning-24_ray-pid-prefix_nccl278_p2p-ipc-217-peer-access-not-supported_excerpt.log"
MEGATRON = DEBUG / "megatron-516_p4d_8gpu_p2p-ipc-read_busid_excerpt.log"
_PREFIX = re.compile(r"z-pc:\d+:\d+ ")


def _cut(lines_to_cut=None, path=PEER_217) -> str:
    """The log with the ``host:pid:tid`` prefix cut from the given lines (1-based), else all."""
    out = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        out.append(_PREFIX.sub("", line, count=1) if lines_to_cut is None or n in lines_to_cut else line)
    return "\n".join(out) + "\n"


def _doc(tmp_path, text, name="job.log"):
    p = tmp_path / name
    p.write_text(text)
    ran = gputopo_here("import", "nccl-debug", str(p), "--json")
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def test_a_log_with_every_prefix_cut_is_one_process_and_its_failed_p2p_not_used(tmp_path):
    """Every line without its prefix: read as one process's lines, the P2P/IPC set-up that failed
    with CUDA error 217 after the channel line is tried and failed (before: used)."""
    doc = _doc(tmp_path, _cut())
    (pair,) = doc["pairs"]
    assert pair["via"] == ["P2P/IPC"] and pair["used"] is False
    bad = pair["setup_failed"]
    assert bad["failed"] == 1 and bad["transport"] == "P2P" and bad["basis"] == "one process"
    assert bad["error"].startswith("transport/p2p.cc:238 NCCL WARN failed to open CUDA IPC handle : 217")
    assert "setup_unknown" not in pair


def test_the_table_says_so_for_a_log_without_prefixes(tmp_path):
    p = tmp_path / "cut.log"
    p.write_text(_cut())
    ran = gputopo_here("import", "nccl-debug", str(p), env={"COLUMNS": "250"})
    assert ran.returncode == 0, ran.stderr
    said = " ".join(ran.stdout.split())
    assert "none (P2P tried, set-up failed)" in said
    assert "not a transport it used (the log has no host:pid:tid prefixes: its lines read in order as one " \
           "process's)" in said
    assert "NCCL prints it on every line but its version line" in said


def test_one_process_log_connected_before_the_error_is_used(tmp_path):
    """WRITTEN: 'Connected all rings' (NCCL >= 2.12's line) between the channel line and the error,
    all without prefixes: the connection was made, so used."""
    text = _cut().replace("via P2P/IPC\n", "via P2P/IPC\n[0] NCCL INFO Connected all rings\n")
    (pair,) = _doc(tmp_path, text)["pairs"]
    assert pair["used"] is True and "setup_failed" not in pair and "setup_unknown" not in pair


def test_a_channel_line_without_prefix_in_a_prefixed_log_is_not_known_when_an_error_followed(tmp_path):
    """Only the channel line (line 6) lost its prefix; the error path is z-pc's process's. Whose
    the line is cannot be told, so whether P2P was used is not known (before: used)."""
    doc = _doc(tmp_path, _cut({6}))
    (pair,) = doc["pairs"]
    assert pair["used"] is None and "setup_failed" not in pair
    unknown = pair["setup_unknown"]
    assert unknown["lines"] == 1 and unknown["via"] == ["P2P/IPC"] and unknown["error"] == "transport.cc:68 -> 1"
    assert "cannot be told" in unknown["why"]
    p = tmp_path / "mixed.log"
    p.write_text(_cut({6}))
    ran = gputopo_here("import", "nccl-debug", str(p), env={"COLUMNS": "250"})
    said = " ".join(ran.stdout.split())
    assert "not known (P2P tried, an error followed: whose not told)" in said
    assert "whether NCCL used it: not known" in said


def test_an_error_path_without_prefix_after_a_prefixed_channel_line_is_not_known(tmp_path):
    """The WARN and error path (lines 8, 9) lost their prefix: they may be the channel line's
    process's or another's: not known (before: used)."""
    (pair,) = _doc(tmp_path, _cut({8, 9}))["pairs"]
    assert pair["used"] is None and pair["setup_unknown"]["error"] == "transport.cc:68 -> 1"


def test_lines_without_prefix_and_no_error_are_used(tmp_path):
    """A prefixed log with one line's prefix cut and no error path anywhere: used, as before."""
    text = re.sub(r"^09677202c889:\d+:\d+ ", "", MEGATRON.read_text(), count=1)
    doc = _doc(tmp_path, text)
    assert doc["no_prefix_lines"] == 1
    assert all(p["used"] is True and "setup_unknown" not in p for p in doc["pairs"])
    assert [c.used for c in parse_nccl_debug(text).channels] == [True] * len(parse_nccl_debug(text).channels)


def test_not_known_is_neither_none_nor_a_used_transport_downstream(tmp_path):
    (pair,) = _doc(tmp_path, _cut({6}))["pairs"]
    rec = {k: pair[k] for k in ("kind", "kinds", "via", "channels", "used")}
    assert transport_cell({**rec, "source": "imported"}) == "not known (P2P/IPC tried, an error followed) (imported)"
    row = SimpleNamespace(numerics={"ddp": "ok", "dp": "nan"}, nccl_transport={**rec, "kind": "SHM", "kinds": ["SHM"]})
    assert ddp_survived_clause([row]) is None
    row.nccl_transport["used"] = True
    assert ddp_survived_clause([row]) is not None
