"""The worker processes of gputopo: every process the bench and the numerics run their work in
is started here.

- ``processes``: the multiprocessing context (forkserver with torch preloaded), starting a
  worker (:func:`~gputopo.workers.processes.start_processes`, with Ctrl-C held and SIGINT blocked),
  stopping the forkserver, a worker log's tail and a process's exit in words; in a worker, its
  start (``enter_worker``: its log, SIGINT ignored, its parent watched, the parent's
  environment) and its end (``leave``: flushed, ``os._exit``).
- ``outcome``: how a job handed to workers ended (``JobOutcome``: delivered, hang, crash with
  exit code and log tail or traceback), the one result type of both supervisors.
- ``peer_mappings``: the ledger of the CUDA peer mappings every live worker holds, and which
  idle workers to retire so that no device is asked for a ninth.

The supervisors that drive them (the bench's ``Runner``, bench/runner.py, over a Pipe; the
numerics' ``WorkerPool``, numerics/worker.py, over Queues) start their processes through
``start_processes``, count peer mappings in one ``PeerLedger`` and say how a job ended with
one ``JobOutcome``.
"""
