"""Pair classes of a machine description: the ``matrix`` (nvidia-smi topo -m text, inline or
``matrix_file``), the ``[pairs]`` and ``[pcie_pairs]`` tables, and the wired and PCIe class of
every GPU pair they give (NVLinks are wired later, by description_nvlinks.py).
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any, Dict, Optional, Tuple

from gputopo.errors import InputFileError
from gputopo.model.linkclass import PCIE_KINDS, LinkClass

from .description_context import DescContext, check_str
from .records import PAIR_KEY_RE
from .records import GpuDesc, shared_link_class


def read_matrix(ctx: DescContext, data: Dict[str, Any], path: str):
    """The parsed ``matrix`` or ``matrix_file`` (gputopo.probe.smi_parser's matrix), or None."""
    matrix = None
    if "matrix" in data and "matrix_file" in data:
        raise ctx.error("give the matrix as `matrix` text or `matrix_file`, not both", "matrix_file")
    if "matrix" in data:
        mtext = check_str(ctx, data["matrix"], "matrix")
        matrix = _parse_matrix(ctx, mtext, offset=_matrix_offset(ctx))
    elif "matrix_file" in data:
        mpath = check_str(ctx, data["matrix_file"], "matrix_file")
        if not os.path.isabs(mpath) and not path.startswith(("<", "builtin:")):
            mpath = os.path.join(os.path.dirname(os.path.abspath(path)), mpath)
        from gputopo.inputs import MAX_SMI_BYTES, read_user_bytes
        from gputopo.probe.smi_parser import decode_smi_bytes

        try:  # as --from-smi reads it: UTF-8 or PowerShell's UTF-16
            mtext = decode_smi_bytes(read_user_bytes(mpath, "matrix file", MAX_SMI_BYTES))
        except InputFileError as exc:
            raise ctx.error(f"{exc}", "matrix_file") from None
        matrix = _parse_matrix(DescContext(mpath, mtext), mtext, offset=0, source=mpath)
    return matrix


def pair_classes(ctx: DescContext, data: Dict[str, Any], n: int, gpus, matrix, nvswitch: bool
                 ) -> Tuple[Dict[Tuple[int, int], LinkClass], Dict[Tuple[int, int], str]]:
    """(wired class, PCIe kind) of every pair from the matrix or [pairs], [pcie_pairs] and the
    NUMA nodes; on an NVSwitch machine the wired class is the PCIe one until the switch is wired."""
    wired: Dict[Tuple[int, int], LinkClass] = {}
    pcie: Dict[Tuple[int, int], str] = {}
    given: Dict[Tuple[int, int], LinkClass] = {}
    if matrix is not None:
        given = dict(matrix.classes)
    elif "pairs" in data:
        given = _parse_pairs_table(ctx, data["pairs"], n, gpus, "pairs", pcie_only=False)
    pcie_given = (_parse_pairs_table(ctx, data["pcie_pairs"], n, gpus, "pcie_pairs", pcie_only=True,
                                     need_all=False) if "pcie_pairs" in data else {})
    for i in range(n):
        for j in range(i + 1, n):
            cls = given.get((i, j))
            if cls is not None and not cls.is_nvlink:
                if (i, j) in pcie_given and str(pcie_given[(i, j)]) != str(cls):
                    raise ctx.error(f"pair {i},{j} is {cls} in the pair classes but "
                                    f"{pcie_given[(i, j)]} here", "pcie_pairs", f"{i},{j}")
                pcie[(i, j)] = cls.kind
            elif (i, j) in pcie_given:
                pcie[(i, j)] = pcie_given[(i, j)].kind
            else:
                pcie[(i, j)] = _numa_kind(gpus[i], gpus[j])
            if nvswitch:
                wired[(i, j)] = shared_link_class(pcie[(i, j)])  # the NVLinks: description_nvlinks.wire_switch
            elif cls is not None:
                wired[(i, j)] = cls
            else:
                wired[(i, j)] = shared_link_class(pcie[(i, j)])
    return wired, pcie


@functools.lru_cache(maxsize=64)
def _parse_matrix_cached(text: str, source: str):
    from gputopo.probe.smi_parser import parse_topo_matrix

    return parse_topo_matrix(text, source)


def _matrix_offset(ctx: DescContext) -> int:
    """Lines before the matrix text's first line in the file (for error line numbers)."""
    for no, raw in enumerate(ctx.lines, 1):
        m = re.match(r'^\s*matrix\s*=\s*("""|\'\'\'|"|\')(.*)$', raw)
        if m:
            starts_next = m.group(1) in ('"""', "'''") and m.group(2).strip() == ""
            return no if starts_next else no - 1
    return 0


def _parse_matrix(ctx: DescContext, text: str, offset: int, source: Optional[str] = None):
    try:
        return _parse_matrix_cached(text, source or f"{ctx.path} [matrix]")
    except InputFileError as exc:
        msg = str(exc).split(": ", 1)[-1] if ": " in str(exc) else str(exc)
        line = exc.line + offset if exc.line is not None and source is None else exc.line
        raise InputFileError(ctx.path if source is None else source, f"bad matrix: {msg}",
                             line=line, key="matrix" if source is None else None) from None


def _numa_kind(a: GpuDesc, b: GpuDesc) -> str:
    """PCIe class by NUMA node when nothing else says: NODE on one node, SYS across."""
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return "NODE"
    if a.numa_node is None and b.numa_node is None and a.cpu_affinity == b.cpu_affinity:
        return "NODE"
    return "SYS"


def parse_pair_ref(ctx, ref, n, *key) -> Tuple[int, int]:
    if isinstance(ref, str):
        m = PAIR_KEY_RE.match(ref)
        pair = (int(m.group(1)), int(m.group(2))) if m else None
    elif isinstance(ref, list) and len(ref) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in ref):
        pair = (ref[0], ref[1])
    else:
        pair = None
    if pair is None:
        raise ctx.error(f"expected a pair \"I,J\" or [I, J], got {ref!r}", *key)
    i, j = pair
    if i == j:
        raise ctx.error(f"pair {i},{j}: a pair needs two different GPUs", *key)
    for x in pair:
        if not 0 <= x < n:
            raise ctx.error(f"pair {i},{j}: GPU {x} out of range (the machine has GPUs 0..{n - 1})", *key)
    return (min(i, j), max(i, j))


def parse_class(ctx, text, pcie_only, *key) -> LinkClass:
    try:
        cls = LinkClass.parse(check_str(ctx, text, *key))
    except ValueError:
        cls = None
    if cls is None or cls.kind == "X" or (pcie_only and cls.is_nvlink):
        allowed = ", ".join(PCIE_KINDS) if pcie_only else "NV<n>, " + ", ".join(PCIE_KINDS)
        raise ctx.error(f"unknown link class {text!r} (expected {allowed})", *key)
    return cls


def _parse_pairs_table(ctx, table, n, gpus, name, pcie_only, need_all=True) -> Dict[Tuple[int, int], LinkClass]:
    if not isinstance(table, dict):
        raise ctx.error("expected a table", name)
    out: Dict[Tuple[int, int], LinkClass] = {}

    def put(pair, cls, key):
        if pair in out and out[pair] != cls:
            raise ctx.error(f"pair {pair[0]},{pair[1]} given twice ({out[pair]} and {cls})", name, key)
        out[pair] = cls

    default: Optional[LinkClass | str] = None  # a class, "numa" or none given
    for key, value in table.items():
        if key == "default":
            if value == "numa":
                default = "numa"
            else:
                default = parse_class(ctx, value, pcie_only, name, key)
                if default.is_nvlink:
                    raise ctx.error("the default class must be a PCIe class or \"numa\"", name, key)
        elif PAIR_KEY_RE.match(key):
            put(parse_pair_ref(ctx, key, n, name, key), parse_class(ctx, value, pcie_only, name, key), key)
        else:
            cls = parse_class(ctx, key, pcie_only, name, key)
            if not isinstance(value, list):
                raise ctx.error(f"write either \"I,J\" = \"{cls}\" or {cls} = [\"I,J\", ...]", name, key)
            for ref in value:
                put(parse_pair_ref(ctx, ref, n, name, key), cls, key)
    if not need_all:
        return out
    for i in range(n):
        for j in range(i + 1, n):
            if (i, j) in out:
                continue
            if default is None:
                raise ctx.error(f"pair {i},{j} has no class; list it or set default = \"SYS\" "
                                "(or \"numa\": NODE on one NUMA node, SYS across)", name)
            out[(i, j)] = default if isinstance(default, LinkClass) else shared_link_class(_numa_kind(gpus[i], gpus[j]))
    return out

