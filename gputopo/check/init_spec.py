"""`gputopo check --init --from DIR`: a spec written from a known-good run, so a fleet can be held
to its own baseline: the run's topology exactly (GPU count, class of every pair, NVLinks up per
GPU, PCIe generation and width), and its measured figures minus a margin (bandwidth per class,
busbw per collective and class), with every integrity rule on.

The text is TOML with comments, ready to commit and edit; `check` on the same run passes.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

from gputopo.errors import UsageError
from gputopo.model import is_value
from gputopo.model.collectives import PREFIX, is_collective
from gputopo.report.coverage import unreadable
from gputopo.report.classes import UNKNOWN_CLASS
from gputopo.report.summary import Summary, summarize_dir
from gputopo.writable import check_writable_file, write_text_file

from .spec import ANY, BUSBW_OPS, INTEGRITY_KEYS, SPEC_SCHEMA_VERSION

#: Measured figures are lowered by this fraction to make the minimums (0.2 = 20 % below).
DEFAULT_MARGIN = 0.20


def _q(s: str) -> str:
    """A TOML basic string (JSON string escapes are valid TOML ones)."""
    return json.dumps(s, ensure_ascii=False)


def _floor(x: float, margin: float) -> float:
    v = x * (1 - margin)
    return float(f"{v:.3g}") if v >= 1 else round(v, 4)


def init_spec_text(summary: Summary, margin: float = DEFAULT_MARGIN, force: bool = False) -> str:
    """The spec text for ``summary``'s run. UsageError when the run is not known-good (it has
    error findings) unless ``force``."""
    if not 0 <= margin < 1:
        raise UsageError(f"--margin must be in [0, 1), got {margin}")
    why = unreadable(summary.run)
    if why:  # not even --force: a partial or damaged run has no figures for what it lacks
        raise UsageError(f"{summary.run.path}: not a baseline: {why}")
    errors = [f for f in summary.findings if f.severity == "error"]
    if errors and not force:
        kinds = ", ".join(sorted({f.kind for f in errors}))
        raise UsageError(f"{summary.run.path}: not a known-good run ({len(errors)} error finding(s): {kinds}); "
                         "fix the machine or pass --force to take it as the baseline anyway")
    run, topo = summary.run, summary.run.topology
    now = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    L: List[str] = [
        f"# gputopo acceptance spec, written by `gputopo check --init --from {run.path}` on {now}.",
        f"# Baseline: machine {run.machine!r}, fabric {run.fabric}, "
        f"{'SIMULATED' if run.simulated else 'real hardware'}; measured minimums lowered by {margin:.0%}.",
        "# Edit freely; every key is documented in gputopo/check/specs/pcie-box.toml.",
        f"schema_version = {SPEC_SCHEMA_VERSION}",
        f"name = {_q('baseline-' + (run.machine or 'run'))}",
        f"description = {_q(f'baseline of {run.machine} from {run.path}')}",
        "strict = false  # true: a rule with no data to judge (not measured) fails instead of being skipped",
        "",
    ]
    if errors:
        L.insert(3, f"# WARNING: taken with --force from a run with {len(errors)} error finding(s).")
    if topo is not None:
        L += ["[topology]", f"gpu_count = {len(topo.gpus)}"]
        if topo.pairs:
            L += ["", "# The link class of every pair, as the baseline's scan read it.", "[topology.pairs]"]
            L += [f'"{p.gpus[0]},{p.gpus[1]}" = {_q(str(p.link_class))}' for p in sorted(topo.pairs, key=lambda p: p.gpus)]
        L.append("")
        L += _nvlink_section(summary)
        L += _pcie_section(summary)
    L += _bandwidth_section(summary, margin)
    L += _busbw_section(summary, margin)
    L += ["# Wrong data, NaN/divergence in training, hangs and crashes fail the check.", "[integrity]"]
    L += [f"{k} = true" for k in INTEGRITY_KEYS]
    L += ["", "[findings]", "# Any finding of these kinds fails the check.", 'fail_on = ["gpu-lost"]', ""]
    return "\n".join(L)


def _nvlink_section(summary: Summary) -> List[str]:
    topo = summary.run.topology
    if topo is None:
        return []
    gpus = [g for g in topo.gpus if g.lost is None]
    if not any(g.nvlinks for g in gpus):
        return []
    L = ["[nvlink]", "# NVLinks up per GPU on the baseline (a GPU may have more, never fewer).", "[nvlink.links_up]"]
    L += [f'"{g.nvml_index}" = {len(g.active_nvlinks())}' for g in gpus]
    totals: Dict[str, int] = defaultdict(int)
    for g in gpus:
        per: Dict[str, int] = defaultdict(int)
        for lk in g.nvlinks:
            for c, v in lk.errors.items():
                if is_value(v):
                    per[c] += int(v)
        for c, v in per.items():
            totals[c] = max(totals[c], v)
    if totals:
        L += ["", "# Highest per-GPU NVLink error counter totals on the baseline (counters only grow",
              "# until reboot: raise these if a healthy machine trips them).", "[nvlink.max_errors]"]
        L += [f"{c} = {v}" for c, v in sorted(totals.items())]
    return L + [""]


def _pcie_section(summary: Summary) -> List[str]:
    topo = summary.run.topology
    if topo is None:
        return []
    gpus = [g for g in topo.gpus if g.lost is None]
    gens = [g.pcie.gen_max if is_value(g.pcie.gen_max) else g.pcie.gen_current for g in gpus]
    gens = [x for x in gens if is_value(x)]
    widths = [g.pcie.width_current for g in gpus if is_value(g.pcie.width_current)]
    replays = [g.pcie.replay_counter for g in gpus if is_value(g.pcie.replay_counter)]
    if not (gens or widths or replays):
        return []
    L = ["[pcie]"]
    if gens:
        L.append(f"min_gen = {min(gens)}  # maximum PCIe generation each GPU supports (idle GPUs run lower)")
    if widths:
        L.append(f"min_width = {min(widths)}  # current link width of each GPU")
    if all(is_value(g.pcie.width_current) and is_value(g.pcie.width_max)
           and g.pcie.width_current >= g.pcie.width_max for g in gpus) and widths:
        L.append("full_width = true  # every GPU's link runs at its full width")
    if replays:
        L.append(f"max_replay = {max(replays)}  # highest PCIe replay counter on the baseline")
    return L + [""]


def _bandwidth_section(summary: Summary, margin: float) -> List[str]:
    if not any(m.of_gpus for m in summary.run.measurements):
        why = ("the baseline measured no GPU link (cpu fabric)" if summary.run.measurements
               else "the baseline has no measurements")
        return [f"# No bandwidth or busbw minimums: {why}.", ""]
    L = []
    for c in summary.classes:
        if c.link_class == UNKNOWN_CLASS or c.min_gbps is None or not c.series:
            continue
        if is_collective(c.series):
            continue  # collectives are held by [busbw]
        L += [f"[bandwidth.{_q(c.link_class)}]",
              f"# {c.pairs_measured} pair(s) measured: median {c.median_gbps:.3g}, lowest {c.min_gbps:.3g} GB/s ({c.series})",
              f"series = {_q(c.series)}",
              f"min_gbps = {_floor(c.min_gbps, margin)}", ""]
    return L


def _busbw_section(summary: Summary, margin: float) -> List[str]:
    if not any(m.of_gpus for m in summary.run.measurements):
        return []
    lowest: Dict[str, Dict[str, float]] = defaultdict(dict)
    for p in summary.pairs:
        for series, d in p.series.items():
            if not is_collective(series) or series.endswith("(in-place)"):
                continue
            op = series[len(PREFIX):]
            if op not in BUSBW_OPS:
                continue
            sel = p.link_class if (p.link_class and len(p.gpus) == 2) else ANY
            cur = lowest[op].get(sel)
            lowest[op][sel] = d["gbps"] if cur is None else min(cur, d["gbps"])
    L = []
    for op, per in sorted(lowest.items()):
        L += [f"[busbw.{op}]", f"# lowest busbw per class on the baseline, minus {margin:.0%} (GB/s, largest size)"]
        if ANY in per:  # "*" also covers the classed pairs: it must hold for the lowest of all
            per = {**per, ANY: min(per.values())}
        L += [f"{_q(sel)} = {_floor(v, margin)}" for sel, v in sorted(per.items())]
        L.append("")
    return L


def write_init_spec(run_dir, out_path, margin: float = DEFAULT_MARGIN, force: bool = False,
                    overwrite: bool = False) -> Path:
    """Write the baseline spec of ``run_dir`` to ``out_path`` (refuses to overwrite unless asked)."""
    out = Path(out_path)
    if out.exists() and not out.is_fifo() and not overwrite:  # a pipe loses nothing: written to
        raise UsageError(f"{out}: exists; choose another --spec path or remove it")
    check_writable_file(out, "--spec")
    text = init_spec_text(summarize_dir(run_dir), margin=margin, force=force)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_file(out, text, "--spec")
    return out


def baseline_spec(summary: Summary, margin: float = DEFAULT_MARGIN, force: bool = False):
    """The baseline as a parsed Spec (what `check` would load from the written text)."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10
        import tomli as tomllib

    from .spec import parse_spec

    return parse_spec(tomllib.loads(init_spec_text(summary, margin, force)), "<baseline>")
