"""Fabrics: what a benchmark runs on. ``cuda`` (real GPUs, CUDA events, NCCL), ``cpu`` (worker
processes over gloo, wall clock), ``sim`` (a simulated machine's link model and faults).
``fabric`` (the Fabric object and the one lookup by name) imports no torch; every other module
is imported only inside worker processes (they import torch)."""
