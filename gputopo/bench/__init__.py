"""Benchmarks: Topology + fabric -> Measurements (peer copies, DataParallel's primitives,
collectives, --self), run in long-lived worker processes with timeouts.

The CLI's entry point is :mod:`gputopo.bench.api` (``run_bench``, ``BenchOptions``, the flag
parsers, the ``--json`` document, the terminal summary and the progress bar). Importing this
package or ``gputopo.bench.api`` never imports torch: only worker processes do.

Modules: ``options`` (flags, presets), ``plan`` (steps and cases), ``spec`` (the one timing and
verification loop), ``suites`` (every test, written once, by family),
``patterns`` (known inputs, bit-exact checks), ``fabrics/`` (cuda, cpu, sim), ``worker`` /
``runner`` (processes, timeouts, step failures), ``results`` / ``summary`` (RunResult, JSON,
terminal). The run folder it writes is gputopo.runfolder's.
"""
