"""Launcher and logging prefixes are removed; the tools' own lines are left alone."""

import pytest

from gputopo.importers.line_prefixes import (
    strip_ansi,
    strip_launcher_prefix,
    strip_quote_marker,
)


@pytest.mark.parametrize("line, bare", [
    ("[1,0]<stdout>:#  Rank  0 Pid 1 on a device 0 [0x1b] X", "#  Rank  0 Pid 1 on a device 0 [0x1b] X"),
    ("[1,12]<stderr>: memcpy CE", "memcpy CE"),
    ("0: # nThread 1", "# nThread 1"),
    ("  12: Device 0: NVIDIA H100", "Device 0: NVIDIA H100"),
    ("[3] SUM device_to_device_memcpy_read_ce 1.0", "SUM device_to_device_memcpy_read_ce 1.0"),
    ("[default0]:host:1:2 [0] NCCL INFO x", "host:1:2 [0] NCCL INFO x"),
    ("(RayWorker pid=12, ip=10.0.0.1) P2P Connectivity Matrix", "P2P Connectivity Matrix"),
    ("INFO:root:Running host_to_device_memcpy_ce.", "Running host_to_device_memcpy_ce."),
    ("2024-01-02 03:04:05,678 - INFO - Device 0", "Device 0"),
    ("2024-01-02 03:04:05,678 - my.mod - WARNING - Device 0", "Device 0"),
    ("[2024-01-02 03:04:05,678] [INFO] Device 0", "Device 0"),
    ("2024-01-02 03:04:05.678 | INFO     | mod:fn:12 - Device 0", "Device 0"),
    ("I0102 03:04:05.678901  1234 file.py:12] Device 0", "Device 0"),
    ("\x1b[32m0: \x1b[0m[1,0]<stdout>:\x1b[1mDevice 0\x1b[0m\r\n", "Device 0"),
])
def test_prefixes_removed(line, bare):
    assert strip_launcher_prefix(line) == bare


@pytest.mark.parametrize("line", [
    " 0     25.13     26.00", "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]", "Device: 0, NVIDIA RTX, pciBusID: 1",
    "host:123:456 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC", "[   12.345678] NVRM: Xid (PCI:0000:01:00): 79",
    "2024-01-02T03:04:05+00:00 host kernel: NVRM: Xid (PCI:0000:01:00): 79", "Nov 24 02:15:31 host kernel: NVRM: x",
    "#       size         count      type   redop    root", "   D\\D     0      1",
])
def test_tool_lines_unchanged(line):
    assert strip_launcher_prefix(line) == line


def test_ansi_and_quotes():
    assert strip_ansi("\x1b]0;title\x07\x1b[4mGPU0\x1b[0m") == "GPU0"
    assert strip_quote_marker(">  0     25.13") == " 0     25.13"
    assert strip_quote_marker("> > Device 0") == "Device 0"
    assert strip_quote_marker("Device 0") == "Device 0"
