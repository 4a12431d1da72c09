"""A `gputopo cluster` rank that hangs or dies at its first inter-node round (tests only).

GPUTOPO_TEST_FAULT="hang:RANK", "crash:RANK" or "stop:RANK": that rank sleeps for an hour, is
SIGKILLed or SIGSTOPped (by itself) when the round starts; every other rank runs the real command. Run it under torchrun or as
plain processes in place of `-m gputopo`.
"""

import os
import signal
import sys
import time

from gputopo.cluster import dist_backend

_mode, _rank = os.environ.get("GPUTOPO_TEST_FAULT", "none:-1").split(":")
_real = dist_backend.DistBackend.measure_round


def _faulty(self, index, groups):
    if self.rank == int(_rank):
        if _mode == "hang":
            time.sleep(3600)
        if _mode == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
            time.sleep(3600)  # continued: still never answers
        os.kill(os.getpid(), signal.SIGKILL)
    return _real(self, index, groups)


dist_backend.DistBackend.measure_round = _faulty

if __name__ == "__main__":
    from gputopo.cli.main import main

    main(sys.argv[1:])
