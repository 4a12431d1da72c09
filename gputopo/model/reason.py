"""The one reason grammar: how gputopo names what is wrong with a node in one short line, for a
Slurm drain reason (`gputopo health --as slurm-healthcheck`), node-problem-detector's message,
a Nagios status line and `gputopo cluster`'s drain.txt.

A reason is one or more segments, the worst first, joined by ``; ``::

    gputopo: <kind> <subject>[ <detail>]; gputopo: <kind> <subject>[ <detail>][; +N more]

- every segment starts ``gputopo: ``: the mark of ownership (as LBNL NHC's ``NHC:``), so a
  drain whose reason starts with it is gputopo's to update or resume, and no other;
- ``<kind>`` is a finding kind (docs/findings.md), first, since ``sinfo -R`` shows only the first
  20 characters of a reason;
- ``<subject>`` is one token, no space: ``gpu5``, ``gpus4-7``, ``mlx5_0/1``, ``host``, ``node``;
- ``<detail>`` is free text without ``;`` (a ``;`` becomes ``,``), printable ASCII only;
- the whole reason is at most :data:`MAX_REASON` (120) characters: segments that do not fit are
  counted in a last ``; +N more``; a first segment too long on its own has its detail shortened
  (``...``). The NPD line is built the same way to fit :data:`NPD_BYTES` (80), never cut.

:data:`REASON_RE` is the documented regular expression (docs/fleet.md) every reason matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence

from .finding import Finding, gpu_ranges, worst_first

PREFIX = "gputopo: "
SEPARATOR = "; "
#: The longest reason: Slurm keeps more, but `sinfo -R` and humans read the start.
MAX_REASON = 120
#: node-problem-detector keeps at most this many bytes of a custom plugin's output.
NPD_BYTES = 80
ELLIPSIS = "..."

_KIND = r"[a-z0-9][a-z0-9-]*"
_SUBJECT = r"[!-:<-~]+"  # printable ASCII, no space, no ';'
_DETAIL = r"[ -:<-~]*[!-:<-~]"  # printable ASCII, no ';', not ending in a space
SEGMENT_PATTERN = rf"gputopo: (?P<kind>{_KIND}) (?P<subject>{_SUBJECT})(?: (?P<detail>{_DETAIL}))?"
_SEGMENT_ANON = rf"gputopo: {_KIND} {_SUBJECT}(?: {_DETAIL})?"
#: The documented regular expression of a whole reason (docs/fleet.md).
REASON_PATTERN = rf"^{_SEGMENT_ANON}(?:; {_SEGMENT_ANON})*(?:; \+[1-9][0-9]* more)?$"
REASON_RE = re.compile(REASON_PATTERN)
SEGMENT_RE = re.compile(rf"^{SEGMENT_PATTERN}$")
_MORE_RE = re.compile(r"^\+([1-9][0-9]*) more$")


@dataclass(frozen=True)
class Segment:
    """One thing wrong: a finding kind, what it is about, and a few words."""

    kind: str
    subject: str
    detail: str = ""

    def text(self) -> str:
        return f"{PREFIX}{self.kind} {self.subject}" + (f" {self.detail}" if self.detail else "")


def clean(text: str, semicolons: bool = False) -> str:
    """Printable ASCII, one line, single spaces, no space at the ends; no ``;`` (a ``,`` instead)
    unless ``semicolons``."""
    out = "".join(c if " " <= c <= "~" else ("?" if c not in "\t\r\n" else " ") for c in str(text))
    return re.sub(r" +", " ", out if semicolons else out.replace(";", ",")).strip()


def _token(text: str, fallback: str) -> str:
    tok = clean(text).replace(" ", "_")
    return tok or fallback


def segment(kind: str, subject: str, detail: str = "") -> Segment:
    """A segment with its parts made to fit the grammar."""
    k = re.sub(r"[^a-z0-9-]", "-", str(kind).lower()).lstrip("-") or "unknown"
    return Segment(k, _token(subject, "node"), clean(detail))


def finding_subject(f: Finding, default: str = "host") -> str:
    """``gpu5``, ``gpus4-7``, a NIC port (``mlx5_0/1``), else ``default``."""
    if f.gpus:
        return (f"gpu{gpu_ranges(f.gpus)}" if len(f.gpus) == 1 else f"gpus{gpu_ranges(f.gpus)}")
    ev = f.evidence or {}
    nic, port = ev.get("nic"), ev.get("port")
    if isinstance(nic, str) and nic:
        return f"{nic}/{port}" if port is not None else nic
    return default


_LEAD = re.compile(r"^(?:GPUs? [0-9,\- ]+(?:\([A-Z0-9#]+\))?: ?|node \S+:? )")


def finding_detail(f: Finding, words: int = 8) -> str:
    """A few words of a finding's message: its place (already the subject) left out, up to the
    first clause's end."""
    text = _LEAD.sub("", clean(f.message), count=1)
    for stop in (" (", ": ", ", so ", ". "):
        cut = text.find(stop)
        if cut > 0:
            text = text[:cut]
    parts = text.split(" ")
    return " ".join(parts[:words]) + (ELLIPSIS if len(parts) > words else "")


def finding_segment(f: Finding, default_subject: str = "host") -> Segment:
    return segment(f.kind, finding_subject(f, default_subject), finding_detail(f))


def segments_of(findings: Iterable[Finding], default_subject: str = "host") -> List[Segment]:
    """One segment per finding, worst first (severity, then the kind table's order)."""
    return [finding_segment(f, default_subject) for f in worst_first(list(findings))]


def _size(text: str) -> int:
    return len(text.encode("ascii", "replace"))


def _shortened(seg: Segment, room: int) -> Optional[str]:
    """``seg``'s text in at most ``room`` characters, its detail cut at a word (``...``); None
    when not even its kind and subject fit."""
    bare = Segment(seg.kind, seg.subject).text()
    if _size(seg.text()) <= room:
        return seg.text()
    if _size(bare) > room:
        return None
    left = room - _size(bare) - 1 - len(ELLIPSIS)
    words = seg.detail.removesuffix(ELLIPSIS).split(" ")
    kept: List[str] = []
    for w in words:
        if _size(" ".join(kept + [w])) > left:
            break
        kept.append(w)
    return f"{bare} {' '.join(kept)}{ELLIPSIS}" if kept else bare


def reason(segments: Sequence[Segment], limit: int = MAX_REASON) -> str:
    """The reason of ``segments`` (worst first, as given) in at most ``limit`` characters (bytes:
    the text is ASCII): as many whole segments as fit, then ``; +N more`` for the rest. Empty
    when there is no segment."""
    if not segments:
        return ""
    texts = [s.text() for s in segments]
    n = len(texts)
    for keep in range(n, 0, -1):
        tail = "" if keep == n else f"{SEPARATOR}+{n - keep} more"
        room = limit - _size(tail)
        head = SEPARATOR.join(texts[:keep - 1])
        head_room = room - (_size(head) + len(SEPARATOR) if head else 0)
        last = _shortened(segments[keep - 1], head_room) if keep == 1 else (
            texts[keep - 1] if _size(texts[keep - 1]) <= head_room else None)
        if last is not None:
            return (head + SEPARATOR if head else "") + last + tail
    # not even the first segment's kind and subject fit beside the count: its subject is cut to
    # the room left (a subject is one token: any cut of it is one too)
    first = segments[0]
    tail = "" if n == 1 else f"{SEPARATOR}+{n - 1} more"
    room = limit - _size(PREFIX) - len(first.kind) - 1 - _size(tail)
    if room < 1:
        raise ValueError(f"a reason of {limit} characters cannot hold the kind {first.kind!r} and its count")
    return Segment(first.kind, first.subject[:room]).text() + tail


def findings_reason(findings: Iterable[Finding], limit: int = MAX_REASON, default_subject: str = "host") -> str:
    return reason(segments_of(findings, default_subject), limit)


def is_reason(text: str) -> bool:
    return bool(REASON_RE.match(text))


def is_ours(text: Optional[str]) -> bool:
    """Whether a drain reason is gputopo's (it starts with ``gputopo:``)."""
    return bool(text) and str(text).startswith(PREFIX.rstrip())


def parse(text: str) -> tuple[List[Segment], int]:
    """A reason back into its segments and the count of ``+N more`` (ValueError when it is not one)."""
    if not is_reason(text):
        raise ValueError(f"not a gputopo reason: {text!r}")
    parts = text.split(SEPARATOR)
    more = 0
    m = _MORE_RE.match(parts[-1])
    if m:
        more = int(m.group(1))
        parts = parts[:-1]
    out = []
    for p in parts:
        sm = SEGMENT_RE.match(p)
        assert sm is not None
        out.append(Segment(sm.group("kind"), sm.group("subject"), sm.group("detail") or ""))
    return out, more
