"""An NvbOutput's matrices as gputopo Measurements, one per printed cell.

Test names are ``nvbandwidth.<matrix key>`` (``nvbandwidth.device_to_device_memcpy_read_ce``,
``nvbandwidth.device_to_device_bidirectional_memcpy_read_ce_total``), so every testcase stays its
own series in the report. GPUs are the CUDA device numbers nvbandwidth printed. nvbandwidth
prints a median bandwidth over its trials, not times: each cell becomes one sample, the time the
printed GB/s gives for the copy size (the default buffer of that version; ``-b`` is not printed,
so the size is marked assumed). Timing is ``cuda-events`` (nvbandwidth times copies with CUDA
events). Latency cells (ns) keep their time and carry no bytes and no buffer size. N/A cells (no peer access, the
diagonal) are not measurements and are skipped; their count is kept in the import summary.
"""

from __future__ import annotations

from gputopo.model import Measurement
from gputopo.model.measurement import FIGURES_OF_GPUS

from .nvbandwidth_records import NvbMatrix, NvbOutput

#: Testcases printed as one row with a column per GPU (host side, all-to-one, one-to-all, local).
ONE_ROW_TESTCASES = ("host_to_", "device_to_host", "all_to_", "one_to_all", "device_local", "host_device_latency")


def _flow(tc: str, row: int, col: int) -> tuple[tuple[int, ...], str]:
    """(GPUs, direction) of one cell of a GPU x GPU matrix, from the testcase's name."""
    gpus = tuple(sorted((row, col)))
    if "latency" in tc:
        return gpus, f"{row}<->{col}"
    if "_read" in tc:  # the row GPU reads from the column GPU: data column -> row
        return gpus, f"{col}->{row}"
    return gpus, f"{row}->{col}"


def _one_row_flow(tc: str, gpu: int) -> str:
    """Direction of a host / all-to-one / one-to-all / local cell (one row, a column per GPU)."""
    both = "bidirectional" in tc or "latency" in tc
    if tc.startswith(("host_to_device", "host_to_all")):
        return f"host<->{gpu}" if both else f"host->{gpu}"
    if tc.startswith(("device_to_host", "all_to_host")):
        return f"{gpu}<->host" if both else f"{gpu}->host"
    if tc.startswith("all_to_one"):
        return f"all->{gpu}"
    if tc.startswith("one_to_all"):
        return f"{gpu}->all"
    if tc.startswith("device_local"):
        return f"{gpu}->{gpu}"
    return f"host<->{gpu}" if tc.startswith("host") else str(gpu)


def matrix_measurements(out: NvbOutput, m: NvbMatrix) -> list[Measurement]:
    key = m.key or m.testcase
    if not key or not m.columns:
        return []
    tc = m.testcase or key
    size = out.buffer_mib << 20
    square = not tc.startswith(ONE_ROW_TESTCASES)
    bidir_total = key.endswith("_total")  # v0.6+: both directions' sum; _1/_2 and v0.5's are one stream
    res = []
    for r, row in enumerate(m.cells):
        for c, v in enumerate(row):
            if v is None or c >= len(m.columns):
                continue
            col = int(m.columns[c])
            if square:
                rlabel = m.row_labels[r] if r < len(m.row_labels) else str(r)
                rr = int(rlabel) if rlabel.isdigit() else r
                if rr == col:
                    gpus: tuple[int, ...] = (col,)
                    direction = f"{col}->{col}"
                else:
                    gpus, direction = _flow(tc, rr, col)
            else:
                gpus, direction = (col,), _one_row_flow(tc, col)
            res.append(_measurement(out, m, key, gpus, direction, v, size, r, c, bidir_total))
    return [x for x in res if x is not None]


def _measurement(out: NvbOutput, m: NvbMatrix, key: str, gpus, direction: str, v: float, size: int,
                 r: int, c: int, bidir_total: bool) -> Measurement | None:
    extra = {"source": "nvbandwidth", "file": out.source.rsplit("/", 1)[-1], "testcase": m.testcase,
             "matrix": key, "cell": [r, c], "printed": v, "unit": m.unit, "line": m.line or None}
    if m.unit != "ns":  # a latency testcase times one access: it has no buffer size
        extra["size_assumed"] = (f"nvbandwidth {out.version or '?'} default buffer ({out.buffer_mib} MiB); "
                                 "-b is not printed")
    if m.unit == "ns":
        if v <= 0:
            return None
        return Measurement(test=f"nvbandwidth.{key}", gpus=gpus, size_bytes=0, samples_s=[v * 1e-9],
                           timing="cuda-events", fabric="cuda", figures_of=FIGURES_OF_GPUS, direction=direction,
                           bytes_per_iter=0,
                           extra=extra)
    moved = size * 2 if bidir_total else size
    samples = [moved / (v * 1e9)] if v > 0 else []
    if not samples:
        extra["time_not_available"] = f"nvbandwidth printed {v} GB/s"
    return Measurement(test=f"nvbandwidth.{key}", gpus=gpus, size_bytes=size, samples_s=samples,
                       timing="cuda-events", fabric="cuda", figures_of=FIGURES_OF_GPUS,
                       direction="both" if bidir_total else direction,
                       bytes_per_iter=moved, extra=extra)


def output_measurements(out: NvbOutput) -> list[Measurement]:
    res: list[Measurement] = []
    for m in out.matrices:
        res += matrix_measurements(out, m)
    return res
