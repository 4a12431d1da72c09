"""Launcher and logging prefixes are removed; the tools' own lines are left alone."""

import pytest

from gputopo.line_prefixes import (
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


# Lines as posted with NCCL / nccl-tests / kernel logs (from the kernel-log and nccl importers' cases)
BODY = "#  Rank  0 Group  0 Pid 2181762 on GENOA-01 device  0 [0x01] NVIDIA GeForce RTX 5090"


@pytest.mark.parametrize("line", [
    f"[1,0]<stdout>:{BODY}", f"[1,12]<stderr>: {BODY}",            # mpirun --tag-output
    f"0: {BODY}", f" 12: {BODY}",                                   # srun -l
    f"2024-05-01 12:00:00,123 - INFO - {BODY}",                     # logging default-ish
    f"[2024-05-01 12:00:00,123] [INFO] {BODY}", f"INFO:root:{BODY}",
    f"I0501 12:00:00.123456 1234 train.py:42] {BODY}",              # absl / glog
    f"\x1b[32m{BODY}\x1b[0m",                                       # colours
    f"[1,3]<stdout>:3: \x1b[1mINFO:root:{BODY}\x1b[0m",              # several at once
])
def test_posted_prefixes_go_text_stays(line):
    assert strip_launcher_prefix(line) == BODY


@pytest.mark.parametrize("line", [
    "     8388608       2097152   float     sum   1321.5    6.35   11.90  5e-07",   # nccl-tests row
    "09677202c889:5278:5702 [3] NCCL INFO Channel 12/0 : 3[201d0] -> 2[201c0] via P2P/IPC/read",
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "Feb 14 05:03:41 gpu-1 kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.",
    "2024-01-03T10:00:01+0000 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 63, Row Remapper",
])
def test_posted_tool_lines_are_left_alone(line):
    assert strip_launcher_prefix(line) == line



def test_ansi_inside_a_header_goes():
    assert strip_ansi("[4mGPU0[0m	GPU1") == "GPU0	GPU1" and strip_ansi("plain") == "plain"

