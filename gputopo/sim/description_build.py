"""Build a simulated machine from a description's parsed TOML: validate every table and make
the :class:`Description` (InputFileError naming the file, the key and the line on bad data).

The tables are read by one module each: pair classes (description_pairs.py), GPUs
(description_gpus.py), NVLinks (description_nvlinks.py), faults (description_faults.py), host,
link model and P2P rules (description_host.py), NICs (nics.py). Hardware states a scan sees are
applied here: ``nvlinks_down`` and ``link_down`` faults make NVLinks inactive (so the pair's class
drops to its PCIe class), ``downtrained`` faults lower the GPU's current PCIe width/generation.
Reading files, ``extends`` and built-in names are above this module (description_files.py,
machine_lookup.py).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable

from .description_checks import check_class_faults
from .description_context import DescContext, check_keys, check_label, parse_clock
from .description_faults import apply_downtrained, build_faults
from .description_gpus import DEFAULT_KEYS, build_gpus, gpu_entries
from .description_host import HOST_KEYS, acs_redirect_bridges, build_host, parse_link_model, parse_p2p
from .description_nvlinks import wire_nvlinks
from .description_pairs import pair_classes, read_matrix
from .records import Fault
from .nics import parse_nics
from .pci import PciAddress
from .records import MachineDesc

_TOP_KEYS = {"extends", "name", "summary", "matrix", "matrix_file", "pairs", "pcie_pairs", "nvswitch",
             "nvswitches", "nvswitch_bus_ids", "gpu_count", "defaults", "gpu", "host",
             "link_model", "p2p", "fault", "nic", "clock",
             "cluster"}  # a cluster's [cluster] table: read by cluster_description.py


class Description(MachineDesc):
    """A simulated machine as built from its description (records.MachineDesc), which can
    rebuild itself with other faults (it keeps the data it was built from)."""

    def with_faults(self, faults: Iterable[Any]) -> "Description":
        """A copy with these faults (Fault objects or dicts as in a file) instead of its own,
        rebuilt so NVML-visible states (link_down, downtrained) follow them."""
        if self._raw is None:
            raise ValueError("this description has no source data to rebuild from")
        raw = dict(self._raw)
        raw["fault"] = [f.to_json() if isinstance(f, Fault) else dict(f) for f in faults]
        return build_description(raw, self.path, text="", source=self.source)


def build_description(data: Dict[str, Any], path: str, text: str = "", source: str = "file",
                      default_name: str = "sim") -> Description:
    """Validate parsed TOML ``data`` and build the Description (InputFileError on bad data).

    ``text`` (the file's text) only serves to find line numbers for errors.
    """
    ctx = DescContext(path, text)
    check_keys(ctx, data, _TOP_KEYS)
    name = check_label(ctx, data.get("name", default_name), "name")
    summary = check_label(ctx, data.get("summary", ""), "summary")

    defaults = check_keys(ctx, data.get("defaults", {}), DEFAULT_KEYS, "defaults")
    host_raw = check_keys(ctx, data.get("host", {}), HOST_KEYS, "host")

    matrix = read_matrix(ctx, data, path)  # the pair matrix, given as text or as a file
    nvswitch = data.get("nvswitch", False)
    if not isinstance(nvswitch, bool):
        raise ctx.error(f"expected true or false, got {nvswitch!r}", "nvswitch")
    if matrix is not None and "pairs" in data:
        raise ctx.error("give the pair classes as `matrix` or as [pairs], not both", "pairs")

    entries = gpu_entries(ctx, data, matrix)
    n = len(entries)
    if n > 1 and not (matrix is not None or "pairs" in data or nvswitch):  # one GPU has no pair
        raise ctx.error("no pair classes: give `matrix` (nvidia-smi topo -m text), a [pairs] table, "
                        "or nvswitch = true", "pairs")
    gpus, specs = build_gpus(ctx, name, entries, defaults, matrix, nvswitch)
    faults = build_faults(ctx, data.get("fault", []), n)  # before NVLinks, which they may take down
    wired, pcie = pair_classes(ctx, data, n, gpus, matrix, nvswitch)
    switch_ids, nv_active = wire_nvlinks(ctx, data, gpus, specs, faults, wired, nvswitch)
    apply_downtrained(ctx, gpus, faults)  # what NVML reports of the GPU's PCIe link
    host = build_host(ctx, host_raw, name)

    taken = {g.lspci_bdf: f"GPU {g.index}" for g in gpus}
    taken.update({PciAddress.parse(s).lspci: "an NVSwitch" for s in switch_ids})
    nics = parse_nics(ctx, data.get("nic", []), gpus, taken)
    desc = Description(name=name, summary=summary, path=path, gpus=gpus, host=host, faults=faults,
                       nvswitch=nvswitch, nvswitch_bus_ids=switch_ids, source=source, nics=nics,
                       _wired=wired, _pcie=pcie, _nv_active=nv_active, _raw=data, _text=text)
    check_class_faults(ctx, faults, desc.pairs(), desc.link_class)
    desc._efficiency, desc._link_rules = parse_link_model(ctx, data.get("link_model", {}))
    desc._p2p_rules = parse_p2p(ctx, data.get("p2p", {}), n)
    desc.clock = parse_clock(ctx, data["clock"]) if "clock" in data else None
    host.acs_redirect_bridges = acs_redirect_bridges(ctx, host_raw, desc)
    return desc
