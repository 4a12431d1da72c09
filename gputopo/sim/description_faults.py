"""The ``[[fault]]`` entries of a machine description: checked into :class:`Fault` records
(errors name the entry and key), and the ``downtrained`` ones applied to what NVML reports of the
GPU's PCIe link. ``link_down`` faults are applied by description_nvlinks.py; what the others do
to the bytes moved is the simulated transport's job.
"""

from __future__ import annotations

from typing import Any, List

from gputopo.model.bandwidth import pcie_gbps

from .description_checks import check_fault_fields
from .description_context import DescContext, check_keys
from .records import Fault
from .records import GpuDesc, pcie_theory_gbps

FAULT_KEYS = {"where", "what", "path", "rate", "factor", "description", "width", "gen"}


def build_faults(ctx: DescContext, entries: Any, n: int) -> List[Fault]:
    """The faults of the [[fault]] tables (``entries``) of an ``n``-GPU machine."""
    if not isinstance(entries, list):
        raise ctx.error("expected [[fault]] tables", "fault")
    faults = []
    for k, entry in enumerate(entries):
        check_keys(ctx, entry, FAULT_KEYS, "fault", k)
        for req in ("where", "what"):
            if req not in entry:
                raise ctx.error(f"missing `{req}`", "fault", k, req)
        try:
            f = Fault(**entry)
        except TypeError as exc:
            raise ctx.error(str(exc), "fault", k) from None
        except ValueError as exc:
            msg = str(exc)
            bad = next((key for key in ("what", "path", "where", "rate", "factor", "width", "gen")
                        if msg.startswith(key) or f"{key} =" in msg or f"{key} must" in msg
                        or (key == "what" and "kind" in msg)), None)
            if "downtrained fault is" in msg:
                bad = "where"
            raise ctx.error(msg, "fault", k, *( [bad] if bad else [])) from None
        for g in f.gpus:
            if not 0 <= g < n:
                raise ctx.error(f"GPU {g} out of range (the machine has GPUs 0..{n - 1})", "fault", k, "where")
        faults.append(f)
    check_fault_fields(ctx, entries)
    return faults


def apply_downtrained(ctx: DescContext, gpus: List[GpuDesc], faults: List[Fault]) -> None:
    """Lower the current PCIe width/generation of GPUs with a downtrained fault, and set the
    fault's throughput factor from them unless the file gives one."""
    for k, f in enumerate(faults):
        if f.what != "downtrained":
            continue
        g = gpus[f.gpus[0]]
        healthy = pcie_theory_gbps(g)
        width = f.width if f.width is not None else max(1, g.pcie_width_max // 2)
        gen = f.gen if f.gen is not None else g.pcie_gen_max
        if width > g.pcie_width_max or gen > g.pcie_gen_max:
            raise ctx.error(f"downtrained to x{width} gen{gen} but GPU {g.index} has at most "
                            f"x{g.pcie_width_max} gen{g.pcie_gen_max}", "fault", k)
        g.pcie_width = min(g.pcie_width, width)
        g.pcie_gen = min(g.pcie_gen, gen)
        if not f.factor_given:
            f.factor = round(min(1.0, (pcie_gbps(gen, width) or healthy) / healthy), 4)
