"""Each GPU's device minor number (``/dev/nvidia<minor>``, NVML's ``nvmlDeviceGetMinorNumber``):
the number Slurm's ``SLURM_JOB_GPUS`` and a prolog's ``CUDA_VISIBLE_DEVICES`` give a job's GPUs
by (gres.conf's ``File=/dev/nvidiaN``), which is neither NVML's index nor CUDA's.

Read through the NVML library object (gputopo/probe/nvml_lib.py: pynvml on a real machine, the
fake NVML on a simulated one, opened by gputopo/sim/nvml_door.py); a GPU whose minor number cannot be read is left out of the map.
"""

from __future__ import annotations

from typing import Any, Dict


def read_minor_numbers(lib: Any) -> Dict[int, int]:
    """NVML index -> minor number, for every GPU NVML answers for."""
    out: Dict[int, int] = {}
    for k in range(int(lib.nvmlDeviceGetCount())):
        try:
            out[k] = int(lib.nvmlDeviceGetMinorNumber(lib.nvmlDeviceGetHandleByIndex(k)))
        except Exception:  # noqa: BLE001 - pynvml.NVMLError: that GPU's number is not known
            continue
    return out

