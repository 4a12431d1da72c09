"""NCCL's transport per pair in a report: imported job logs merged
into the pairs, and the sentence that ties a DataParallel-only failure to NCCL's route ("DDP
survived because NCCL used SHM on this pair")."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

#: Transport families that do not use the GPUs' peer DMA path.
NOT_PEER = ("SHM", "NET")
_KIND_SHORT = {"SHM": "SHM (host memory)", "NET": "the network"}
_SOURCE_WORDS = {"modeled": "NCCL's route as modeled for this simulated machine",
                 "nccl-debug": "NCCL's INFO log during this run",
                 "imported": "the imported NCCL_DEBUG=INFO log of your job"}


def attach_imported_transports(rows: List[Any], nccl_debug: Dict[str, Any]) -> None:
    """Give each pair row the transport an imported job log shows for it; a transport measured
    in this run (NCCL's own log on the cuda fabric) stays, a modeled one is replaced."""
    by_pair = {tuple(r["gpus"]): r for r in nccl_debug.get("pairs", []) if r.get("gpus")}
    for row in rows:
        rec = by_pair.get(tuple(row.gpus))
        if rec is None:
            continue
        if row.nccl_transport is None or row.nccl_transport.get("source") == "modeled":
            row.nccl_transport = rec


def ddp_survived_clause(rows: List[Any]) -> Optional[str]:
    """'DDP survived because NCCL used SHM (host memory) on this pair, not the peer path DataParallel
    copies over' when DDP trained fine on pairs where DataParallel did not and NCCL's transport on
    them is known and is not peer-to-peer; None otherwise."""
    survived = [p for p in rows if p.numerics.get("ddp") == "ok" and p.numerics.get("dp") not in (None, "ok")]
    known = [p.nccl_transport for p in survived if isinstance(p.nccl_transport, dict) and "kind" in p.nccl_transport
             and p.nccl_transport.get("used", True) is True]  # one whose set-up failed, or may have, not known used
    if not survived or len(known) < len(survived) or any(t["kind"] not in NOT_PEER for t in known):
        return None
    kinds = sorted({t["kind"] for t in known})
    sources = {t.get("source") for t in known}
    where = "this pair" if len(survived) == 1 else f"these {len(survived)} pairs"
    how = " or ".join(_KIND_SHORT.get(k, k) for k in kinds)
    told = " and ".join(_SOURCE_WORDS.get(str(s), str(s)) for s in sorted(sources, key=str))
    return (f"DDP survived because NCCL used {how} on {where}, not the peer-to-peer path "
            f"nn.DataParallel copies over ({told})")
