"""`gputopo cluster`: many nodes, inside torchrun / srun ranks, or a simulated cluster (--sim)."""

from __future__ import annotations

import json
import os
import sys

import click

from gputopo import SCHEMA_VERSION
from gputopo.bench.fabrics.fabric import UNSIMULATED_FABRIC_NAMES
from gputopo.cli.group import cli
from gputopo.cli.history_hook import after_run, history_options, record_exit_code
from gputopo.cli.options import finish
from gputopo.cli.strict import FiniteFloat
from gputopo.errors import GputopoError, UsageError

#: Pairwise on a simulated cluster is N^2/2 modeled pairs: 256 nodes took 0.77 s (docs/performance.md,
#: Performance), so 2,048 take about 45 s; 100,000 (the format's limit) would take days.
MAX_SIM_PAIRWISE_NODES = 2048


def _print_result(res, as_json: bool) -> None:
    doc = res.doc
    if as_json:
        click.echo(json.dumps({"schema_version": SCHEMA_VERSION, "run_dir": str(res.run_dir),
                               "rounds_inter": res.rounds_inter, "time_s": doc.get("time_s"),
                               "time_source": doc.get("time_source"),
                               "findings": [f.to_json() for f in res.findings]}, indent=2))
        return
    sim = "SIMULATED " if doc.get("simulated") else ""
    nodes = len(doc.get("nodes", []))
    click.echo(f"gputopo cluster: {sim}{nodes} nodes, pattern {res.outcome.pattern}: "
               f"{res.rounds_inter} inter-node round(s) (+1 intra-node), "
               f"{doc.get('time_s', 0):.2f} s {doc.get('time_source')} time"
               + (f", {doc['wall_s']:.2f} s wall to simulate" if "wall_s" in doc else ""))
    if doc.get("reference_gbps") is not None:
        from gputopo.report.cluster_view import gbps_text

        from gputopo.report.cluster_view import one_gpu_median

        click.echo(f"  inter-node all_reduce busbw: median {gbps_text(doc['reference_gbps'])} GB/s "
                   f"all GPUs, {gbps_text(one_gpu_median(doc))} GB/s one GPU per node "
                   f"({doc.get('time_source')})")
    for f in res.findings:
        click.echo(f"  {f.kind.upper()} ({f.severity}): {f.message}")
    if not res.findings:
        click.echo("  no findings: every node and node pair measured alike")
    if res.outcome.lost_phase:
        click.echo(f"  the run stopped during {res.outcome.lost_phase}: lost ranks are named above")
    click.echo(f"run folder: {res.run_dir} (report.md, cluster.json, drain.txt)")


@cli.command()
@click.option("--sim", "sim", metavar="FILE",
              help="A simulated cluster: a description with a [cluster] table (FORMAT.md); runs in "
                   "this one process with modeled time.")
@click.option("--plan", "plan_only", is_flag=True, help="Print the rounds and an estimated time; measure nothing.")
@click.option("--nodes", type=click.IntRange(2, 1_000_000), help="--plan: how many nodes.")
@click.option("--pattern", default="random2pass", show_default=True,
              type=click.Choice(["random2pass", "pairwise", "all"]),
              help="Inter-node rounds: random2pass (2 rounds: random pairs, then each suspect with a "
                   "node that passed), pairwise (N-1 rounds, full node matrix), all (one all_reduce).")
@click.option("--fabric", type=click.Choice(list(UNSIMULATED_FABRIC_NAMES)), default="cuda", show_default=True,
              help="Real runs: cuda (NCCL for data) or cpu (gloo, no GPU needed).")
@click.option("--size", "size_text", default="64M", show_default=True, help="all_reduce message size.")
@click.option("--samples", type=click.IntRange(1, 1000), default=5, show_default=True,
              help="Timed all_reduces per group and round (after one warm-up).")
@click.option("--timeout", "timeout_s", type=FiniteFloat(min=1, max=7 * 24 * 3600.0), default=120, show_default=True,
              help="Seconds each round's waits may take (a group's gate, its NCCL set-up, every "
                   "all_reduce) and a rank may stay silent before it is named lost (hang or crash); "
                   "docs/cluster.md, Timeouts.")
@click.option("--slow-below", type=FiniteFloat(0.05, 0.99), default=0.8, show_default=True,
              help="A group below this fraction of the cluster's median busbw is slow.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random pairing (same on all ranks).")
@click.option("--gbps", type=FiniteFloat(min=0.001, max=1e6), default=45.0, show_default=True,
              help="--plan: inter-node busbw assumed for the estimate (GB/s).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Run folder (default: under reports/).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@history_options
def cluster(sim, plan_only, nodes, pattern, fabric, size_text, samples, timeout_s, slow_below,
            seed, gbps, out_dir, as_json):
    """Check many nodes at once: every node scans itself (mismatches by hostname), measures its
    own GPUs, then node pairs are measured in rounds; slow nodes, slow links and lost ranks are
    named by host, with a drain.txt for Slurm. Runs inside each rank of a launch:

    \b
      torchrun --nnodes N --nproc-per-node G --rdzv-backend c10d \\
               --rdzv-endpoint HOST:29400 -m gputopo cluster
      srun --ntasks-per-node G gputopo cluster
      gputopo cluster --sim cluster.toml          # a simulated cluster, one process
      gputopo cluster --plan --nodes 1024 --pattern pairwise
    """
    from gputopo.bench.options import parse_size

    size_bytes = parse_size(size_text, "--size")
    if plan_only:
        from gputopo.cluster.patterns import plan

        if nodes is None:
            raise UsageError("--plan needs --nodes N")
        est = plan(nodes, pattern, size_bytes=size_bytes, samples=samples, gbps=gbps)
        if as_json:
            click.echo(json.dumps({"schema_version": SCHEMA_VERSION, **vars(est), "total_s": est.total_s}, indent=2))
        else:
            click.echo("\n".join(est.lines()))
        return
    if nodes is not None:
        raise UsageError("--nodes goes with --plan (a run's nodes are the launch's, or the --sim file's)")
    from gputopo.cluster.job import ClusterOptions

    opts = ClusterOptions(pattern=pattern, size_bytes=size_bytes, samples=samples, timeout_s=timeout_s,
                          slow_below=slow_below, seed=seed, out_dir=out_dir, argv=list(sys.argv[1:]))
    if sim:
        from gputopo.cluster.job import run_sim_cluster
        from gputopo.sim.cluster_description import load_cluster

        desc = load_cluster(sim)
        if pattern == "pairwise" and desc.nodes > MAX_SIM_PAIRWISE_NODES:
            raise UsageError(f"--pattern pairwise on {desc.nodes:,} simulated nodes is "
                             f"{desc.nodes * (desc.nodes - 1) // 2:,} node pairs: more than this process "
                             f"simulates in minutes (at most {MAX_SIM_PAIRWISE_NODES:,} nodes); use "
                             "random2pass, or --plan for the estimate")
        res = run_sim_cluster(desc, opts)
        _print_result(res, as_json)
        after_run(res.run_dir, "cluster")
        finish(1 if res.outcome.lost_phase else 0)
        return
    from gputopo.errors import require_torch

    require_torch("gputopo cluster (a real run's ranks meet through torch.distributed)")
    _run_rank(fabric, opts, as_json)


def _run_rank(fabric: str, opts, as_json: bool) -> None:
    """One rank of a real launch. It ends with os._exit: torch's exit-time teardown of process
    groups can abort (gloo, docs/architecture.md) or wait on a lost peer; results are on disk by then."""
    from gputopo.cluster.job import run_dist_cluster
    from gputopo.cluster.launch import launch_env

    env = launch_env()
    code = 0
    try:
        res = run_dist_cluster(env, fabric, opts)
        if res.outcome.lost_phase:
            code = 1
            if res.run_dir is None:
                click.echo(f"gputopo: rank {env.rank} ({env.node_name}): the run stopped during "
                           f"{res.outcome.lost_phase}; the rank that writes the run folder names "
                           "the lost ranks", err=True)
        if res.run_dir is not None:  # rank 0, or the lowest live rank when rank 0 is lost
            _print_result(res, as_json)
            code = record_exit_code(res.run_dir, "cluster") or code
    except GputopoError as e:  # every rank says it (a rank's own problem), with its exit code
        click.echo(f"gputopo: error: {e}", err=True)
        code = e.exit_code
    except Exception as e:  # noqa: BLE001 - one line per rank, then the same hard exit
        click.echo(f"gputopo: rank {env.rank} ({env.node_name}): {type(e).__name__}: "
                   f"{str(e).splitlines()[0] if str(e) else ''}", err=True)
        code = 4
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
