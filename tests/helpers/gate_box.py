"""A lab box for `gputopo gate`'s declared layer: 4 RTX A6000 with NV4 bridges 0-1 and 2-3 (NODE
between them) on a simulated day, or the same box (same name: the same hostname and GPU UUIDs,
so the same machine in the history) with its 0-1 bridge gone."""

from pathlib import Path

from history_box import BOX  # the history tests' lab box: the same machine


def box(tmp: Path, name: str, bridge_01: bool = True, day: int = 1) -> str:
    text = BOX.replace("2026-11-01", f"2026-11-{day:02d}")
    if not bridge_01:  # the 0-1 bridge gone: PCIe (PHB) between them, their NVLinks not connected
        text = text.replace("GPU0\t X \tNV4", "GPU0\t X \tPHB").replace("GPU1\tNV4\t X ", "GPU1\tPHB\t X ")
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return str(path)
