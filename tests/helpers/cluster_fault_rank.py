"""A `gputopo cluster` rank that hangs, dies, fails or is signalled in an inter-node round (tests only).

GPUTOPO_TEST_FAULT="MODE:RANKS[:ROUND]" (RANKS: a rank, ranks joined by commas, or ``all``;
ROUND: the inter-node round, default 1):

- ``hang``: that rank sleeps for an hour when the round starts;
- ``crash`` / ``stop``: it SIGKILLs / SIGSTOPs itself when the round starts;
- ``term``: it SIGTERMs itself when the round starts, then goes on as the signal lets it;
- ``raise``: its first all_reduce of the round raises (once), as a rank whose NIC fails NCCL
  setup would, after its peers have started waiting for it;
- ``connecthang``: its data group's first ``allreduce`` call of the round never returns (once;
  ``ProcessGroupGloo.allreduce`` replaced on the class), as NCCL's communicator set-up or its
  first-use transport connect would on a fabric that never answers.

Every other rank runs the real command. Run it under torchrun or as plain processes in place of
`-m gputopo`. GPUTOPO_TEST_PIDDIR: each rank writes ``rank<RANK>.pid`` there (torchrun's RANK),
for a test that signals a rank from outside.
"""

import os
import signal
import sys
import time

from gputopo.cluster import dist_backend

_parts = os.environ.get("GPUTOPO_TEST_FAULT", "none:-1").split(":")
_mode = _parts[0]
_ranks = None if _parts[1] == "all" else {int(x) for x in _parts[1].split(",")}  # None: every rank
_round = int(_parts[2]) if len(_parts) > 2 else 1
_real_round = dist_backend.DistBackend.measure_round
_real_time = dist_backend.DistBackend._time_all_reduce
_state = {"round": None, "raised": False}


def _faulty(self, index, groups):
    _state["round"] = index
    if (_ranks is None or self.rank in _ranks) and index == _round:
        if _mode == "hang":
            time.sleep(3600)
        if _mode == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(3600)  # continued: still never answers
        if _mode == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        if _mode == "term":
            os.kill(os.getpid(), signal.SIGTERM)
    return _real_round(self, index, groups)


def _raising(self, *args, **kwargs):
    if _mode == "raise" and (_ranks is None or self.rank in _ranks) and _state["round"] == _round \
            and not _state["raised"]:
        _state["raised"] = True
        raise RuntimeError("injected fault: this rank's all_reduce failed (test)")
    return _real_time(self, *args, **kwargs)


dist_backend.DistBackend.measure_round = _faulty
if os.environ.get("GPUTOPO_TEST_PIDDIR") and "RANK" in os.environ:
    with open(os.path.join(os.environ["GPUTOPO_TEST_PIDDIR"], f"rank{os.environ['RANK']}.pid"), "w") as f:
        f.write(str(os.getpid()))
dist_backend.DistBackend._time_all_reduce = _raising

if _mode == "connecthang":
    import torch.distributed as _dist

    _real_allreduce = _dist.ProcessGroupGloo.allreduce
    _rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "-1")))

    def _hanging_allreduce(self, *args, **kwargs):
        if (_ranks is None or _rank in _ranks) and _state["round"] == _round and not _state["raised"]:
            _state["raised"] = True
            time.sleep(3600)  # never returns within the run
        return _real_allreduce(self, *args, **kwargs)

    _dist.ProcessGroupGloo.allreduce = _hanging_allreduce

if __name__ == "__main__":
    from gputopo.cli.main import main

    main(sys.argv[1:])
