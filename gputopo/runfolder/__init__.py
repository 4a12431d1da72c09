"""The run folder: the one place that knows its layout, writes it and reads it back
(docs/run-folder.md is the contract).

``layout`` (file names, status values, schema versions read, DEFAULT_BASE_DIR), ``writer``
(claim a folder, its lock, run.json and its status, appended lines), ``reader`` (every raw
file parsed, with damaged-line accounting), ``imported`` (the writer of imported runs),
``resume`` (what ``--resume`` reads, verifies, redoes and says), ``settings`` (run.json's
``nccl_env`` and ``numerics_options``) and ``cluster`` (a cluster run's folder, where each
rank still writes its own files). Importing this package imports none of them: each command
takes the module it needs.
"""
