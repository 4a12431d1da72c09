"""Launcher and logging prefixes removed before any importer parses a line, and nothing else."""

import pytest

from gputopo.importers.line_prefixes import (strip_ansi, strip_launcher_prefix, strip_mpi_tag,
                                             strip_python_logging, strip_srun_label)

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
def test_prefixes_go_text_stays(line):
    assert strip_launcher_prefix(line) == BODY


@pytest.mark.parametrize("line", [
    "     8388608       2097152   float     sum   1321.5    6.35   11.90  5e-07",   # nccl-tests row
    "09677202c889:5278:5702 [3] NCCL INFO Channel 12/0 : 3[201d0] -> 2[201c0] via P2P/IPC/read",
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
    "Feb 14 05:03:41 gpu-1 kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.",
    "2024-01-03T10:00:01+0000 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 63, Row Remapper",
])
def test_tool_lines_are_left_alone(line):
    assert strip_launcher_prefix(line) == line


def test_each_kind_alone():
    assert strip_mpi_tag("[1,5]<stdout>:x") == "x" and strip_mpi_tag("0: x") == "0: x"
    assert strip_srun_label("7: x") == "x" and strip_srun_label("[1,5]<stdout>:x") == "[1,5]<stdout>:x"
    assert strip_python_logging("WARNING:torch.distributed:x") == "x"
    assert strip_ansi("\x1b[4mGPU0\x1b[0m\tGPU1") == "GPU0\tGPU1" and strip_ansi("plain") == "plain"
