"""Drain ownership (gputopo/fleet/slurm.py) without a process: what sinfo's lines mean, and what
each verdict does to a node drained by nobody, by gputopo, by another owner or with no reason."""

import pytest

from gputopo.fleet.slurm import Called, NodeState, SlurmError, decide, read_node, scontrol_argv

OURS = "gputopo: nvlink-down gpu5 0 NVLinks active, 12 down"


def _sinfo(stdout: str, code: int = 0, seen=None):
    def run(argv, timeout_s):
        if seen is not None:
            seen.append((list(argv), timeout_s))
        return Called(code, stdout, "sinfo: error: Unable to contact slurm controller" if code else "")
    return run


def test_sinfo_is_asked_for_the_one_node_in_the_documented_form():
    seen: list = []
    st = read_node("/opt/slurm/bin/sinfo", "gpu07", _sinfo("gpu07|idle|none\n", seen=seen))
    assert seen[0][0] == ["/opt/slurm/bin/sinfo", "-h", "-N", "-n", "gpu07", "-o", "%N|%T|%E"]
    assert 0 < seen[0][1] <= 10  # bounded: an unreachable slurmctld never holds the check
    assert st == NodeState("gpu07", "idle", "") and not st.drained


@pytest.mark.parametrize("line, drained, reason", [
    ("n1|drained|gputopo: xid gpu3 79", True, "gputopo: xid gpu3 79"),
    ("n1|draining|bad DIMM; ticket 42", True, "bad DIMM; ticket 42"),
    ("n1|drained*|none", True, ""),  # not responding, drained with no reason
    ("n1|mixed+drain|maintenance", True, "maintenance"),
    ("n1|allocated|none", False, ""),
    ("n1|idle~|none", False, ""),  # powered down
    ("n1|down*|Not responding", False, "Not responding"),
])
def test_sinfo_states_and_reasons_as_slurm_prints_them(line, drained, reason):
    st = read_node("sinfo", "n1", _sinfo(line + "\n"))
    assert st.drained is drained and st.reason == reason


def test_a_node_in_two_partitions_is_one_node():
    st = read_node("sinfo", "n1", _sinfo("n1|drained|gputopo: ecc gpu0 x\nn1|drained|gputopo: ecc gpu0 x\n"))
    assert st.reason == "gputopo: ecc gpu0 x"


@pytest.mark.parametrize("stdout, code", [("", 0), ("n2|idle|none\n", 0), ("", 1)])
def test_sinfo_that_cannot_say_is_an_error_not_a_state(stdout, code):
    with pytest.raises(SlurmError):
        read_node("sinfo", "n1", _sinfo(stdout, code))


def _st(state="idle", reason=""):
    return NodeState("n1", state, reason)


@pytest.mark.parametrize("state, verdict, on_unknown, kind", [
    (_st(), "fail", "ignore", "drain"),                           # nobody's: drained
    (_st("drained", OURS), "fail", "ignore", "none"),             # ours, same reason: nothing
    (_st("drained", "gputopo: xid gpu1 79"), "fail", "ignore", "update"),  # ours, new reason
    (_st("drained", "bad PSU"), "fail", "ignore", "none"),        # another owner's: left
    (_st("drained", ""), "fail", "ignore", "none"),               # empty reason: never touched
    (_st("drained", OURS), "pass", "ignore", "resume"),           # ours: resumed on a pass
    (_st("drained", OURS), "warn", "ignore", "resume"),           # a warning is no drain reason
    (_st("drained", "bad PSU"), "pass", "ignore", "none"),        # another owner's: never resumed
    (_st("drained", ""), "pass", "ignore", "none"),               # empty reason: never touched
    (_st("drained", "NHC: check_fs_mount"), "pass", "ignore", "none"),
    (_st(), "not-judged", "ignore", "none"),                      # not judged drains nothing
    (_st(), "not-judged", "drain", "drain"),                      # unless asked to
    (_st("drained", OURS), "not-judged", "ignore", "none"),       # nor resumes on nothing judged
    (_st(), "pass", "ignore", "none"),
])
def test_ownership(state, verdict, on_unknown, kind):
    assert decide(state, verdict, OURS, on_unknown).kind == kind


def test_a_reason_merely_containing_gputopo_is_not_ours():
    assert decide(_st("drained", "see gputopo: later"), "pass", OURS).kind == "none"


def test_scontrol_forms():
    drain = decide(_st(), "fail", OURS)
    assert scontrol_argv("scontrol", "n1", drain, OURS) == ["scontrol", "update", "NodeName=n1", "State=DRAIN",
                                                           f"Reason={OURS}"]
    resume = decide(_st("drained", OURS), "pass", OURS)
    assert scontrol_argv("scontrol", "n1", resume, "") == ["scontrol", "update", "NodeName=n1", "State=RESUME"]
    assert scontrol_argv("scontrol", "n1", decide(_st(), "pass", ""), "") is None
