"""The nvidia-smi parsers the GPU tests compare gputopo with (tests/smi_reference.py), on
text as nvidia-smi prints it (formats of driver 470 to 570: `nvlink -s` lists each link as
"Link N: 26.562 GB/s" or "Link N: <inactive>" under "GPU N: name (UUID: ...)")."""

from __future__ import annotations

import pytest
from smi_reference import as_int, cuda_version, mig_mode, parse_nvlink_status, parse_query_csv

NVLINK_S = """\
GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-4ddbceb2-23c9-64aa-bb9a-acb9e5fdf29b)
\t Link 0: 25 GB/s
\t Link 1: 25 GB/s
\t Link 2: <inactive>
GPU 1: NVIDIA H100 PCIe (UUID: GPU-c752b888-0508-f23f-f262-bf3f2a422884)
\t Link 0: <inactive>
\t Link 1: <inactive>
GPU 2: NVIDIA L4 (UUID: GPU-0990d9e9-d5f5-2e88-226b-093aeb9da1b5)
GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-c8f1845a-f99c-542c-88e8-048c40c4312d)
NVML: Unable to retrieve NVLink information as all links are inActive
GPU 10: NVIDIA H100 80GB HBM3 (UUID: GPU-a819f304-e203-399c-8583-ac41b1045ec2)
\t Link 17: 26.562 GB/s
"""


def test_nvlink_status_per_gpu_and_link():
    got = parse_nvlink_status(NVLINK_S)
    assert got[0] == {0: 25.0, 1: 25.0, 2: None}
    assert got[1] == {0: None, 1: None}  # an unbridged PCIe card: listed, inactive
    assert got[2] == {} and got[3] == {}  # no NVLink / all inactive: no active link
    assert got[10] == {17: 26.562}


def test_query_csv_rows_by_field():
    fields = ("index", "name", "pcie.link.width.max", "mig.mode.current")
    text = "0, NVIDIA A100-SXM4-80GB, 16, Disabled\n1, NVIDIA L4, 16, [N/A]\n\n"
    rows = parse_query_csv(text, fields)
    assert rows[1] == {"index": "1", "name": "NVIDIA L4", "pcie.link.width.max": "16",
                       "mig.mode.current": "[N/A]"}
    assert [mig_mode(r["mig.mode.current"]) for r in rows] == ["disabled", None]
    assert as_int("16") == 16 and as_int("[Not Supported]") is None
    with pytest.raises(ValueError, match="3 cells for 4 fields"):
        parse_query_csv("0, x, 16\n", fields)


def test_cuda_version_from_the_header():
    head = ("| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |\n"
            "|-----------------------------------------+------------------------+----------------------+\n")
    assert cuda_version(head) == "12.4"
    assert cuda_version("No devices were found") is None
