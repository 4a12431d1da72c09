"""How an imported nvbandwidth / p2pBandwidthLatencyTest output's GPUs were matched to ``--topo``'s
(importers/matrix_import.py ``match_devices``, kept in imported.json as ``gpu_numbering``), said as
a note: the output numbers GPUs as CUDA does (fastest first by default, reordered by
CUDA_VISIBLE_DEVICES), the topology as nvidia-smi does (PCI bus order), and every link class the
report gives a pair rests on that match. Where the match is an assumption (no bus ids in the
output) the note says so; where nothing could match them, it says why the pairs have no class."""

from __future__ import annotations

from typing import Any, Dict, List

from .run_folder import Run

#: How every note here begins (the terminal picks them out of a summary's notes).
GPU_NUMBERS = "GPU numbers: "
#: Its words per basis.
_LEAD = {"bus id": "matched by bus id", "bus order": "matched by PCI bus order",
         "number": "assumed", "none": "not matched to --topo"}


def gpu_numbering_notes(run: Run) -> List[str]:
    notes: List[str] = []
    for doc in run.imported:
        numbering: Any = doc.get("gpu_numbering")
        if not isinstance(numbering, dict) or not numbering.get("note"):
            continue
        lead = _LEAD.get(str(numbering.get("basis")), str(numbering.get("basis")))
        note = f"{GPU_NUMBERS}{lead}: {numbering['note']} ({doc.get('file', '?')})"
        if note not in notes:
            notes.append(note)
    return notes


#: How a note on the import's --topo file begins ("--topo FILE: the text ends after row NIC2 ...").
TOPO_FILE = "--topo "


def topology_file_notes(run: Run) -> List[str]:
    """What reading an import's --topo file said (importers/user_inputs.py ``load_topo_file``:
    an `nvidia-smi topo -m` text cut after a row, without its legend), kept in run.json as
    ``options.topology_notes``, each already "--topo FILE: ..."."""
    options: Any = run.info.get("options")
    said: Any = options.get("topology_notes") if isinstance(options, dict) else None
    if not isinstance(said, list):
        return []
    return [n for n in said if isinstance(n, str) and n.startswith(TOPO_FILE)]


def numbering_of(doc: Dict[str, Any]) -> Dict[int, int] | None:
    """{output's device number: the run's GPU number} of an imported output, None where its
    GPUs kept the output's own numbers."""
    numbering = doc.get("gpu_numbering")
    if not isinstance(numbering, dict) or not isinstance(numbering.get("mapping"), list):
        return None
    return {int(k): int(v) for k, v in numbering["mapping"]}
