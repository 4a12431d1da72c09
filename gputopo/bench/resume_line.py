"""The one line `bench --resume DIR` says before it measures anything: which run it continues
(machine, fabric, SIMULATED), how much of it is done and how much is left, and which tests the
run measures (from its run.json, never the command line). Without it a resume starts a
progress bar and the user cannot tell whether it picked up the run they meant.
"""

from __future__ import annotations

from collections.abc import Sequence


def resume_line(run_dir: str, machine: str, fabric: str, simulated: bool, tests: Sequence[str],
                self_gpus: Sequence[int], total: int, to_go: int) -> str:
    """'resuming D: bench on seed-8gpu (SIMULATED), 312 of 1008 measurements done, 696 to go;
    tests p2p,dp,collectives'."""
    on = f"{machine or 'an unnamed machine'} ({'SIMULATED' if simulated else f'fabric {fabric}'})"
    if not tests and not self_gpus:  # `numerics --resume`: its pairs are counted as they start
        return f"resuming {run_dir}: numerics on {on}"
    done = total - to_go
    left = "nothing to go" if to_go == 0 else f"{to_go} to go"
    what = ",".join(tests) or "none"
    if self_gpus:
        what += " and each GPU alone"
    return (f"resuming {run_dir}: bench on {on}, {done} of {total} measurement"
            f"{'s' if total != 1 else ''} done, {left}; tests {what}")
