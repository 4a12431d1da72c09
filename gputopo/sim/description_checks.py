"""Checks of a machine description that span entries, kept out of description_build.py (which builds
the machine): each refuses a file that would simulate something other than what it says, with
the file, the key and the line (exit 2).

- a GPU name no simulated model matches: it used to fall back to a generic GPU silently, so a
  typo ("A100-SMX4") lost the model's NVLinks and memory rate; ``model = "generic"`` (or a
  model's name) says so on purpose;
- two GPUs with one ``uuid`` (NVML's UUIDs are unique; the CUDA index mapping relies on it);
- ``rate`` on a fault that has no rate (only ``corrupt`` and ``nan`` hit a fraction of elements),
  ``factor`` on one without a factor (``slow``, ``downtrained``): silently ignored before;
- a ``class:`` fault that matches no pair of the machine: a fault that can never fire;
- a downtrained ``width``/``gen`` no PCIe link has.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

from .gpu_models import GENERIC, GpuModel, MODEL_KEYS, find_model

#: The fields of a fault that only some kinds have.
RATE_KINDS = ("corrupt", "nan")
FACTOR_KINDS = ("slow", "downtrained")


def resolve_model(ctx, name: str, model: Any, name_key: Sequence[Any], model_key: Sequence[Any]) -> Tuple[GpuModel, str]:
    """(the simulated model, the key it is found by) for a GPU ``name`` and its optional
    ``model`` field; InputFileError when the name (or model) is no model gputopo simulates."""
    known = ", ".join(MODEL_KEYS)
    if model is not None:
        if not isinstance(model, str):
            raise ctx.error(f"expected a model name, got {model!r}", *model_key)
        if model.strip().lower() == "generic":
            return GENERIC, "generic"
        found = find_model(model)
        if found is None:
            raise ctx.error(f"unknown GPU model {model!r}; models: {known}, or \"generic\"", *model_key)
        return found, model
    found = find_model(name)
    if found is None:
        raise ctx.error(f"unknown GPU name {name!r}: no simulated GPU model matches it (models: {known}); "
                        "use a name that contains one, or set model = \"generic\" (or one of them) beside it",
                        *name_key)
    return found, ""


def check_unique_uuids(ctx, uuids: List[Tuple[str, Sequence[Any]]]) -> None:
    """``uuids``: (uuid, its key) per GPU in index order; the second GPU with a UUID is refused."""
    seen: Dict[str, int] = {}
    for idx, (uid, key) in enumerate(uuids):
        if uid.lower() in seen:
            raise ctx.error(f"uuid {uid} is also GPU {seen[uid.lower()]}'s: every GPU has its own UUID", *key)
        seen[uid.lower()] = idx


#: PCIe link widths that exist (lanes), for a downtrained fault's ``width``.
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)


def check_fault_fields(ctx, entries: List[Dict[str, Any]]) -> None:
    """A ``rate`` or ``factor`` on a fault kind that does not use it; a downtrained ``width``
    no PCIe link has, or a ``gen`` beyond the PCIe generations."""
    for k, entry in enumerate(entries):
        what = entry.get("what")
        if entry.get("width") is not None and entry["width"] not in PCIE_WIDTHS:
            raise ctx.error(f"PCIe width must be {', '.join(map(str, PCIE_WIDTHS))} lanes, got {entry['width']!r}",
                            "fault", k, "width")
        if entry.get("gen") is not None and not 1 <= entry["gen"] <= 6:
            raise ctx.error(f"PCIe generation must be 1..6, got {entry['gen']!r}", "fault", k, "gen")
        if "rate" in entry and what not in RATE_KINDS:
            raise ctx.error(f"rate applies to {' and '.join(RATE_KINDS)} faults (the fraction of elements hit); "
                            f"a {what} fault has none", "fault", k, "rate")
        if "factor" in entry and what not in FACTOR_KINDS:
            raise ctx.error(f"factor applies to {' and '.join(FACTOR_KINDS)} faults (the fraction of throughput "
                            f"left); a {what} fault has none", "fault", k, "factor")


def check_class_faults(ctx, faults, pairs: List[Tuple[int, int]], class_of) -> None:
    """A ``class:`` fault must match at least one pair (``class_of(i, j)``: the pair's LinkClass)."""
    classes: Optional[List[Any]] = None
    for k, f in enumerate(faults):
        if f.link_class is None:
            continue
        if classes is None:
            classes = [class_of(i, j) for i, j in pairs]
        if not any(f.matches_class(c) for c in classes):
            present = ", ".join(sorted({str(c) for c in classes})) or "none"
            raise ctx.error(f"{f.where!r} matches no pair of this machine (its classes: {present}): "
                            "the fault could never fire", "fault", k, "where")
