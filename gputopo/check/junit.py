"""JUnit XML of a check verdict: one testcase per rule and pair (or GPU); failures carry the
evidence, so a CI page shows which pair failed which rule and by how much.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from gputopo.writable import write_text_file

from .rules import FAILED, SKIPPED
from .verdict import Verdict


def junit_xml(verdict: Verdict) -> str:
    c = verdict.counts()
    suites = ET.Element("testsuites", name="gputopo check", tests=str(len(verdict.outcomes)),
                        failures=str(c[FAILED]), skipped=str(c[SKIPPED]), errors="0")
    suite = ET.SubElement(suites, "testsuite", name=f"gputopo check {verdict.spec.name}",
                          tests=str(len(verdict.outcomes)), failures=str(c[FAILED]),
                          skipped=str(c[SKIPPED]), errors="0", time="0")
    props = ET.SubElement(suite, "properties")
    for k, v in (("spec", verdict.spec.path), ("run", str(verdict.summary.run.path)),
                 ("simulated", str(verdict.summary.simulated).lower()),
                 ("fabric", str(verdict.summary.run.fabric))):
        ET.SubElement(props, "property", name=k, value=v)
    for o in verdict.outcomes:
        case = ET.SubElement(suite, "testcase", classname=f"gputopo.check.{o.rule}", name=o.name, time="0")
        if o.status == FAILED:
            fail = ET.SubElement(case, "failure", message=o.message, type=o.rule)
            fail.text = json.dumps({"gpus": o.gpus, "link_class": o.link_class, "evidence": o.evidence},
                                   indent=2, default=str)
        elif o.status == SKIPPED:
            ET.SubElement(case, "skipped", message=o.message)
        else:
            out = ET.SubElement(case, "system-out")
            out.text = o.message
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def write_junit(verdict: Verdict, path) -> Path:
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    write_text_file(p, junit_xml(verdict), "--junit")
    return p
