"""Renderings of a Summary: summary.json, results.csv, report.md, report.html, PNG plots, terminal.

Each module has one job; pandas and matplotlib are imported inside the functions that use them.
"""
