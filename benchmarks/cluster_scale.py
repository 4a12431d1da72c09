"""How `gputopo cluster` scales: rounds and time to find one slow node among 64, 256 and 1,024
simulated nodes (random2pass, and pairwise for comparison), in one process on the sim fabric.

Prints, per cluster size and pattern: the inter-node rounds, the modeled time of the run (what
the rounds would take on the modeled network, incl. group setup), the wall time this process
took to simulate it, and whether the slow node was found (and nothing else flagged).

    python benchmarks/cluster_scale.py [--sizes 64,256,1024] [--node dgx-h100] [--pairwise-max 256]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

# Runs from a checkout without gputopo installed, as the other benchmarks do.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64,256,1024")
    ap.add_argument("--node", default="dgx-h100")
    ap.add_argument("--pairwise-max", type=int, default=256,
                    help="largest cluster also run with --pattern pairwise (N-1 rounds)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    from gputopo.cluster.job import ClusterOptions, run_sim_cluster
    from gputopo.sim.cluster_description import parse_cluster

    print(f"{'nodes':>6} {'pattern':>12} {'rounds':>7} {'modeled s':>10} {'wall s':>8}  result")
    for n in (int(x) for x in args.sizes.split(",")):
        bad = random.Random(args.seed + n).randrange(n)
        c = parse_cluster(f'[cluster]\nnodes = {n}\nnode = "{args.node}"\n[cluster.link]\ngbps = 45\n'
                          f'[[cluster.fault]]\nwhere = "node:{bad}"\nwhat = "slow"\nfactor = 0.4\n',
                          "<benchmark>")
        patterns = ["random2pass"] + (["pairwise"] if n <= args.pairwise_max else [])
        for pattern in patterns:
            t0 = time.perf_counter()
            res = run_sim_cluster(c, ClusterOptions(pattern=pattern, seed=args.seed), write=False)
            wall = time.perf_counter() - t0
            flagged = sorted(f.evidence.get("node") for f in res.findings if f.kind == "slow-node")
            ok = flagged == [c.node_name(bad)] and len(res.findings) == 1
            print(f"{n:>6} {pattern:>12} {res.rounds_inter:>7} {res.doc['time_s']:>10.1f} {wall:>8.2f}  "
                  f"{'found ' + flagged[0] if ok else 'WRONG: ' + repr(flagged)}")


if __name__ == "__main__":
    main()
