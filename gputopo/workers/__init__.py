"""The worker processes of gputopo: every process the bench and the numerics run their work in
is started here, and runs on one pool.

- ``pool``: the pool (:class:`~gputopo.workers.pool.WorkerProcesses`): workers by key, each a
  process with its log and one Pipe; start, send, wait for messages and deaths, a death in
  words (``died``), stop and kill. The bench's ``Runner`` (bench/runner.py) and the numerics'
  ``WorkerPool`` (numerics/worker.py, and through it the sim's jobs) each drive one, with their
  own messages, deadlines and failure records.
- ``processes``: the multiprocessing context (forkserver with torch preloaded), starting
  processes (:func:`~gputopo.workers.processes.start_processes`, with Ctrl-C held and SIGINT
  blocked; the pool's), stopping the forkserver, a worker log's tail and a process's exit in
  words; in a worker, its start (``enter_worker``: its log, SIGINT ignored, its parent watched,
  the parent's environment) and its end (``leave``: flushed, ``os._exit``).
- ``outcome``: how a job handed to workers ended (``JobOutcome``: delivered, hang, crash with
  exit code and log tail or traceback, oom as the worker reported, killed by SIGKILL), the one
  result type of both supervisors.
- ``peer_mappings``: the ledger of the CUDA peer mappings every live worker holds, and which
  idle workers to retire so that no device is asked for a ninth.
"""
