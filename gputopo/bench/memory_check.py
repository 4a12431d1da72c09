"""Will the largest message fit? Checked before a run starts, so that `--sizes 1T` is a usage
error (exit 2) and not a worker killed by the out-of-memory killer and reported as a crash.

The estimate is deliberately simple and stated in the message: a step holds a few buffers of
the largest size per GPU (source, destination, the copy verified against), so a worker needs
about ``BUFFERS_PER_GPU`` x size per GPU it serves. On the sim and cpu fabrics every "GPU"
buffer lives in host memory; on cuda the host holds the staged copies and each GPU its own
buffers (its free memory is read through NVML where it can be).
"""

from __future__ import annotations

from typing import Dict, Optional, Union

from gputopo.errors import UsageError

from .fabrics.fabric import Fabric, fabric_named
from .options import format_size

#: Buffers of the message size a step holds per GPU at once (see the suites).
BUFFERS_PER_GPU = 4
#: Most bytes of generated patterns a sim/cpu worker keeps in host memory (patterns.py).
HOST_CACHE_BYTES = 512 << 20


def host_available_bytes(meminfo: str = "/proc/meminfo") -> Optional[int]:
    """MemAvailable of this host in bytes, or None where it cannot be read (not Linux)."""
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def check_sizes_fit(size_bytes: int, fabric: Union[str, Fabric], workers: int, gpus_per_worker: int = 2,
                    host_free: Optional[int] = None,
                    gpu_free: Optional[Dict[int, int]] = None) -> None:
    """UsageError when a message of ``size_bytes`` cannot fit: in host memory (``host_free``
    bytes, None = not known) for ``workers`` workers of ``gpus_per_worker`` GPUs each on the sim
    and cpu fabrics (staging only on cuda), or in a GPU's free memory (``gpu_free``, NVML index
    -> bytes) on cuda."""
    size = format_size(size_bytes)
    per_gpu = BUFFERS_PER_GPU * size_bytes
    fabric = fabric_named(fabric)
    if fabric.memory == "gpu":
        host_need = 2 * size_bytes  # the staged copy's host buffers
        for gpu, free in sorted((gpu_free or {}).items()):
            if per_gpu > free:
                raise UsageError(
                    f"--sizes: the largest message ({size}) needs at least {_gib(per_gpu)} on each "
                    f"GPU ({BUFFERS_PER_GPU} buffers), but GPU {gpu} has {_gib(free)} free; "
                    "use smaller --sizes")
    else:  # and each worker's cache of generated patterns (patterns.py)
        host_need = (per_gpu * gpus_per_worker + HOST_CACHE_BYTES) * max(1, workers)
    if host_free is not None and host_need > host_free:
        where = ("for staging through host memory" if fabric.memory == "gpu" else
                 f"in host memory ({max(1, workers)} worker(s) x ({gpus_per_worker} GPU(s) x "
                 f"{BUFFERS_PER_GPU} buffers + {_gib(HOST_CACHE_BYTES)} of patterns), the "
                 f"{fabric} fabric keeps GPU buffers there)")
        raise UsageError(f"--sizes: the largest message ({size}) needs at least {_gib(host_need)} "
                         f"{where}, but only {_gib(host_free)} is available; use smaller --sizes")

