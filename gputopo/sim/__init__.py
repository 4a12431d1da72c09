"""Simulated machines: description files, a fake NVML, a fake host root and lspci.

Nothing here imports torch, pandas or matplotlib; importing the package loads nothing heavy
(``load_description`` and friends live in gputopo.sim.description).
"""
