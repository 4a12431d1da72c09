"""Importers: other tools' results turned into gputopo run folders (nccl-tests text output)."""
