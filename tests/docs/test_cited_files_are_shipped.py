"""Issue 18, "What a person sees": every document the description format cites must be in the
repository (it once cited a design note that never was); tests/docs/test_doc_references.py holds every
page to the same rule. The example files the README and docs/ name must be shipped."""

import re

from helpers.paths import REPO

ROOT = REPO


def test_format_md_cites_only_files_in_the_repository():
    doc = (ROOT / "gputopo" / "sim" / "FORMAT.md").read_text(encoding="utf-8")
    cited = set(re.findall(r"\b([A-Za-z_][\w./-]*\.md)\b", doc))
    missing = [c for c in sorted(cited)
               if not (ROOT / c).exists() and not (ROOT / "gputopo" / "sim" / c).exists()]
    assert not missing, f"FORMAT.md cites files the repository does not have: {missing}"


def test_every_examples_file_the_readme_names_is_shipped():
    readme = "\n".join(p.read_text(encoding="utf-8")
                       for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    named = set(re.findall(r"\bexamples/[\w./-]*\.(?:toml|log|txt)\b", readme))
    assert named, "the README names no example file (the pattern no longer matches it)"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"the README names example files the repository does not ship: {missing}"
