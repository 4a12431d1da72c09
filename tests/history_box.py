"""The lab box the history tests run day after day: 4 RTX A6000 (NV4 pairs 0-1 and 2-3, NODE
between them), a simulated clock per day, GPU 2's NVLink 1 recovery counter, maybe a slow pair."""

from pathlib import Path

BOX = '''name = "lab-box"
summary = "4x RTX A6000, NV4 pairs 0-1 2-3, NODE between them"
matrix = """
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV4\tNODE\tNODE\t0-31\t0
GPU1\tNV4\t X \tNODE\tNODE\t0-31\t0
GPU2\tNODE\tNODE\t X \tNV4\t0-31\t0
GPU3\tNODE\tNODE\tNV4\t X \t0-31\t0
"""
clock = 2026-11-01T08:00:00Z
[defaults]
name = "NVIDIA RTX A6000"
[host]
iommu = "passthrough"
'''


def day(tmp: Path, n: int, recovery: int, slow: float = 0.0) -> str:
    """Day ``n`` of the lab box: its clock, GPU 2's NVLink 1 recovery counter, maybe a slow pair."""
    (tmp / "lab-box.toml").write_text(BOX)
    text = (f'extends = "lab-box.toml"\nname = "lab-box"\nclock = 2026-11-{n:02d}T08:00:00Z\n'
            f'gpu = [{{}}, {{}}, {{ nvlink_errors = {{ "1" = {{ recovery = {recovery} }} }} }}, {{}}]\n')
    if slow:
        text += f'[[fault]]\nwhere = "pair:2,3"\nwhat = "slow"\nfactor = {slow}\n'
    path = tmp / f"day{n}.toml"
    path.write_text(text)
    return str(path)
