"""CUDA device index of each GPU, computed from CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER.

NVML numbers every GPU of the machine; CUDA numbers only the GPUs CUDA_VISIBLE_DEVICES lets it
see, in the order that variable lists them, counted in CUDA's own enumeration order. gputopo keeps
both indices (docs/scan.md) and never imports torch to find the CUDA one, so it is computed here:

- CUDA's enumeration order is PCI bus order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``. The default,
  ``FASTEST_FIRST``, puts faster devices first and breaks ties by PCI bus id, so on a machine whose
  GPUs are all the same model it is PCI bus order too. That is the **assumption** made when the
  variable is not PCI_BUS_ID and every GPU has the same name; when the models differ the CUDA
  index is ``NotAvailable`` with a reason that says to set ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
- ``CUDA_VISIBLE_DEVICES`` entries are integers (positions in that order), GPU UUIDs
  (``GPU-8a2c...``) or unique UUID prefixes, with or without the ``GPU-`` prefix. As in CUDA
  (and torch's ``_parse_visible_devices``, which mirrors it), parsing stops at the first entry
  that is invalid (unknown, ambiguous, negative, out of range): only the devices before it are
  visible (so ``-1`` hides every GPU); a *repeated* device hides every GPU; an integer entry is
  read like ``strtoul`` (``1gpu`` is 1). Unset means all visible.
- ``MIG-...`` entries make CUDA devices MIG instances, not GPUs: every GPU's CUDA index is then
  NotAvailable.

gputopo's workers (bench and numerics) always run with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
(:data:`WORKER_ORDER`); :func:`worker_cuda_indices` is the mapping they see, whatever the
user's shell sets, and is the one used to decide which GPUs a run can measure.

Pure functions on plain data; unit-tested without any GPU.
"""

from __future__ import annotations

import re
from typing import List, Mapping, Optional, Sequence, Tuple, Union

from gputopo.model.bus_id import try_parse
from gputopo.model.values import NotAvailable

CudaIndex = Union[int, NotAvailable]

_INT_RE = re.compile(r"^[+-]?\d+")  # strtoul reads the leading number: "1gpu" is 1
#: The CUDA_DEVICE_ORDER every gputopo worker process runs with (bench and numerics workers).
WORKER_ORDER = "PCI_BUS_ID"


def _pci_order(bus_ids: Sequence[Optional[str]]) -> List[int]:
    """Positions 0..n-1 sorted by PCI bus id; NVML order when any bus id is unknown (NVML enumerates
    by bus id too, so this only matters for a lost GPU whose bus id cannot be read)."""
    n = len(bus_ids)
    known = [b for b in bus_ids if isinstance(b, str) and b]
    if len(known) < n:
        return list(range(n))
    return sorted(range(n), key=lambda k: _bus_sort_key(known[k]))


def _bus_sort_key(bus_id: str) -> Tuple[int, ...]:
    """PCI order (domain, bus, device, function); text that is no address sorts last."""
    return try_parse(bus_id) or (1 << 62,)


def _match_uuid(entry: str, uuids: Sequence[Optional[str]]) -> Optional[int]:
    """Position of the one GPU whose UUID starts with ``entry`` (GPU- optional), else None."""
    want = entry.strip().lower()
    if not want.startswith("gpu-"):
        want = "gpu-" + want
    hits = [k for k, u in enumerate(uuids)
            if isinstance(u, str) and ("gpu-" + u.lower().removeprefix("gpu-")).startswith(want)]
    return hits[0] if len(hits) == 1 else None


def cuda_indices(bus_ids: Sequence[Optional[str]], uuids: Sequence[Optional[str]],
                 names: Sequence[Optional[str]] = (),
                 env: Optional[Mapping[str, str]] = None) -> List[CudaIndex]:
    """CUDA index of each GPU, given in NVML order by bus id, UUID and name (None where unknown).

    ``env`` defaults to ``os.environ``. Returns one int or NotAvailable(reason) per GPU.
    """
    if env is None:
        import os

        env = os.environ
    n = len(bus_ids)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    order = (env.get("CUDA_DEVICE_ORDER") or "FASTEST_FIRST").strip().upper()

    if visible is not None and any(e.strip().upper().startswith("MIG-") for e in visible.split(",")):
        return [NotAvailable(f"CUDA_VISIBLE_DEVICES={visible} names MIG instances: CUDA devices "
                             "are MIG instances, not whole GPUs")] * n

    if order != "PCI_BUS_ID":
        known = {nm for nm in names if isinstance(nm, str)}
        if len(known) > 1:
            return [NotAvailable(f"CUDA_DEVICE_ORDER={order} orders GPUs fastest first and these "
                                 "GPUs differ in model; set CUDA_DEVICE_ORDER=PCI_BUS_ID to know "
                                 "the CUDA index")] * n
        # Same model everywhere: fastest-first ties break by PCI bus id (module docstring).

    enum_order = _pci_order(bus_ids)  # CUDA enumeration position -> NVML position
    if visible is None:
        chosen = enum_order
    else:
        chosen = []
        for entry in visible.split(","):
            entry = entry.strip()
            m = _INT_RE.match(entry)
            if m:
                k = int(m.group(0))
                pos = enum_order[k] if 0 <= k < n else None
            elif entry:
                pos = _match_uuid(entry, uuids)
            else:
                pos = None
            if pos is None:
                break  # CUDA stops at the first invalid entry
            if pos in chosen:
                chosen = []  # a repeated device hides them all (torch: "results in empty set")
                break
            chosen.append(pos)

    result: List[CudaIndex] = [
        NotAvailable(f"not visible to CUDA (CUDA_VISIBLE_DEVICES={visible})")] * n
    for cuda_idx, pos in enumerate(chosen):
        result[pos] = cuda_idx
    return result


def worker_cuda_indices(bus_ids: Sequence[Optional[str]], uuids: Sequence[Optional[str]],
                        names: Sequence[Optional[str]] = (),
                        env: Optional[Mapping[str, str]] = None) -> List[CudaIndex]:
    """:func:`cuda_indices` as a gputopo worker sees them: ``env`` (default os.environ) with
    CUDA_DEVICE_ORDER forced to :data:`WORKER_ORDER`, as the workers force it."""
    if env is None:
        import os

        env = os.environ
    return cuda_indices(bus_ids, uuids, names, env={**env, "CUDA_DEVICE_ORDER": WORKER_ORDER})
