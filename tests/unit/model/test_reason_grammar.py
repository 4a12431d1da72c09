"""The one reason grammar (gputopo/model/reason.py), property-tested with hypothesis: every
segment starts ``gputopo: ``, the whole fits its limit (120 characters; NPD's 80 bytes), it
matches the documented regex and reads back into the segments it was made of, worst first,
with ``; +N more`` counting exactly what did not fit."""

import re

from hypothesis import given, settings, strategies as st

from gputopo.model import Finding
from gputopo.model.finding_kinds import kind_names
from gputopo.model.reason import (MAX_REASON, NPD_BYTES, PREFIX, REASON_PATTERN, findings_reason, is_ours, parse,
                                  reason, segment, segments_of)
from helpers.paths import REPO

kinds = st.one_of(st.sampled_from(kind_names()), st.from_regex(r"[a-z][a-z0-9-]{0,30}", fullmatch=True))
texts = st.text(max_size=200)  # any unicode, ';', newlines, control characters
segments = st.builds(segment, kinds, texts, texts)
limits = st.sampled_from([MAX_REASON, NPD_BYTES, 60])  # room for the longest kind (31) and its count


@settings(max_examples=300, deadline=None)
@given(st.lists(segments, min_size=1, max_size=12), limits)
def test_every_reason_fits_matches_and_reads_back(segs, limit):
    text = reason(segs, limit)
    assert len(text.encode()) <= limit and text.isascii()
    assert re.match(REASON_PATTERN, text), text
    assert all(part.startswith(PREFIX) for part in text.split("; ") if not part.startswith("+"))
    back, more = parse(text)
    assert len(back) + more == len(segs)  # nothing dropped without being counted
    for got, made in zip(back, segs):
        assert (got.kind, got.subject) == (made.kind, made.subject[:len(got.subject)])
        if len(back) > 1:  # whole segments, only a lone first one may be shortened
            assert got == made
    assert is_ours(text)


@settings(max_examples=200, deadline=None)
@given(st.lists(segments, min_size=1, max_size=6))
def test_what_fits_is_said_whole(segs):
    whole = "; ".join(s.text() for s in segs)
    if len(whole) <= MAX_REASON:
        assert reason(segs) == whole


severities = st.sampled_from(["error", "warning", "info"])


@st.composite
def findings(draw):
    kind = draw(st.sampled_from([k for k in kind_names() if k not in ("dummy-link",)]))
    gpus = draw(st.one_of(st.none(), st.lists(st.integers(0, 1023), min_size=1, max_size=8)))
    return Finding(kind, draw(severities), draw(texts), gpus=gpus)


@settings(max_examples=200, deadline=None)
@given(st.lists(findings(), min_size=1, max_size=10))
def test_findings_worst_first(fs):
    segs = segments_of(fs)
    order = ["error", "warning", "info"]
    sev = {id(s): f.severity for s, f in zip(segs, sorted(fs, key=lambda f: f.sort_key))}
    ranks = [order.index(sev[id(s)]) for s in segs]
    assert ranks == sorted(ranks)
    text = findings_reason(fs, NPD_BYTES)
    assert len(text.encode()) <= NPD_BYTES and re.match(REASON_PATTERN, text)


def test_a_finding_says_its_place_once():
    f = Finding("nvlink-down", "error", "GPU 5: 0 NVLinks active, 12 down (links 0-11); its peers have 12", gpus=[5])
    assert findings_reason([f]) == "gputopo: nvlink-down gpu5 0 NVLinks active, 12 down"
    f = Finding("acs", "warning", "ACS redirect is on in 12 PCIe bridge(s) above GPU(s) 0-7: ...", gpus=list(range(8)))
    assert findings_reason([f]).startswith("gputopo: acs gpus0-7 ACS redirect is on")


def test_sinfo_R_shows_the_kind():
    f = Finding("xid", "error", "GPU 3: Xid 79 (GPU has fallen off the bus)", gpus=[3])
    assert findings_reason([f])[:20] == "gputopo: xid gpu3 Xi"


def test_the_documented_regex_is_the_code_s():
    doc = (REPO / "docs" / "fleet.md").read_text(encoding="utf-8")
    assert REASON_PATTERN in doc, "docs/fleet.md must show the regex gputopo/model/reason.py matches"
