"""The worker processes of gputopo: every process the bench and the numerics run their work in
is started here.

- ``processes``: the multiprocessing context (forkserver with torch preloaded), starting a
  worker (:func:`~gputopo.workers.processes.start_processes`, with Ctrl-C held and SIGINT blocked),
  stopping the forkserver, a worker log's tail and a process's exit in words; in a worker, its
  output sent to its log and its exit with its parent.
- ``peer_mappings``: the ledger of the CUDA peer mappings every live worker holds, and which
  idle workers to retire so that no device is asked for a ninth.

The supervisors that drive them (the bench's ``Runner``, bench/runner.py, over a Pipe; the
numerics' ``WorkerPool``, numerics/worker.py, over Queues) start their processes through
``start_processes`` and count peer mappings in one ``PeerLedger``.
"""
