"""The repository explains itself (issue 35): every document the code, the tests and the docs
name is in the repository, and the docs stay in step with the code they describe.

- Every ``*.md`` path named in a source, test, script or page exists (the code once cited two
  design notes that were never committed), and so does every relative link of a page, with its
  ``#anchor`` where it names one. Files of other projects cited as sources are listed in
  EXTERNAL with the repository they are in.
- Nothing names a path outside the repository (a sibling ``shared`` checkout).
- docs/findings.md documents exactly the finding kinds the code has (model/finding.py KINDS):
  a new kind without its row fails here.
- docs/performance.md quotes only scripts that exist, and `make perf` runs each of them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

from helpers.paths import REPO

ROOT = REPO

#: Folders that are not the repository's own text.
SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache",
             "build", "dist", "gputopo.egg-info", "reports", "node_modules"}
#: Kinds of file whose text may name a document.
TEXT_SUFFIXES = {".py", ".md", ".toml", ".csv", ".cfg", ".ini", ".sh", ".txt", ".yml", ".yaml"}
#: Files of other projects cited as sources (with where they are), not documents of this one.
EXTERNAL = {
    "hardware/asus-esc8000a-e12.md": "luigifcruz/stelline",
    "compute/accelerator/nvidia/debug.md": "stas00/ml-engineering",
    "micro-benchmarks/nccl-tests/README.md": "stas00/ml-engineering",
    "doc/PERFORMANCE.md": "NVIDIA/nccl-tests",
    "Azure_Results/ND_H200_v5_results.md": "Azure/AI-benchmarking-guide",
    "Azure_Results/ND_GB200_v6_results.md": "Azure/AI-benchmarking-guide",
    "chapter/c7-training-optimization-intra-topology.md": "gnosia93/training-on-eks",
    "tensorflow/contrib/gdr/README.md": "tensorflow/tensorflow",
    "education/intro_dl_sharc_dgx1/lab05.md": "RSE-Sheffield/GPUComputing.github.io",
    "content/post/03302024-nvlink-and-gpu/index.md": "sushruta/sushruta.github.io",
    "gpu/h100/mgmt_gpu_on_dl380agen11.md": "HPE-Japan-Presales/e-learning",
}
#: A bare ``name.md`` that the code handles as a file name (a quoted "report.md") is an output
#: gputopo or its tools write, wherever it is named, not a document of the repository.
_QUOTED = re.compile(r"""["']([\w.-]+\.md)["']""")
_MD = re.compile(r"(?<![\w/.-])((?:\.{1,2}/)*[\w][\w./-]*\.md)\b")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
OUTSIDE = "../" + "shared"  # spelled in two parts so this file does not name it


def repo_files() -> Iterator[Path]:
    """The repository's own text files: sources, tests, scripts and pages; of the test data only
    tests/fixtures/README.md (the rest is other tools' output and expected outputs, as printed)."""
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS for part in rel.parts[:-1]) or not path.is_file():
            if not (rel.parts[:1] == ("reports",) and rel.name == "README.md" and path.is_file()):
                continue
        if rel.parts[:2] in (("tests", "fixtures"), ("tests", "data")) and rel != Path("tests/fixtures/README.md"):
            continue  # other tools' outputs and expected outputs, quoted as printed
        if path.suffix in TEXT_SUFFIXES or path.name in ("Makefile", "run"):
            yield path


def _exists(name: str, where: Path, basenames: Set[str]) -> bool:
    return ((ROOT / name).exists() or (where.parent / name).exists()
            or ("/" not in name and name in basenames))


def named_documents() -> List[Tuple[str, int, str]]:
    """(file, line, name) of every *.md name in the repository's text files."""
    out = []
    for path in repo_files():
        if path == Path(__file__).resolve():
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in _MD.finditer(line):
                out.append((str(path.relative_to(ROOT)), no, m.group(1)))
    return out


def written_files() -> Set[str]:
    """Bare *.md names the product code and its scripts handle by name (quoted in a .py file
    outside tests/): the files they write."""
    return {name for p in repo_files() if p.suffix == ".py" and p.relative_to(ROOT).parts[0] != "tests"
            for name in _QUOTED.findall(p.read_text(encoding="utf-8", errors="replace"))}


def test_every_named_document_is_in_the_repository():
    basenames = {p.name for p in repo_files()}
    written = written_files()
    missing = []
    for where, no, name in named_documents():
        if name in EXTERNAL or name in written:
            continue
        if not _exists(name, ROOT / where, basenames):
            missing.append(f"{where}:{no}: {name}")
    assert not missing, "documents named but not in the repository:\n" + "\n".join(missing)


def test_the_check_finds_a_missing_document(tmp_path):
    """The checker itself: a made-up name is missing, real ones are found wherever they live."""
    basenames = {p.name for p in repo_files()}
    assert not _exists("docs/no-such-page.md", ROOT / "README.md", basenames)
    assert _exists("docs/run-folder.md", ROOT / "README.md", basenames)
    assert _exists("../docs/run-folder.md", ROOT / "reports" / "README.md", basenames)
    assert _exists("run-folder.md", ROOT / "docs" / "check.md", basenames)
    assert any(name == "docs/architecture.md" for _, _, name in named_documents())
    assert "report.md" in written_files() and "no-such-page.md" not in written_files()


def test_nothing_names_a_path_outside_the_repository():
    found = []
    for path in repo_files():
        if path == Path(__file__).resolve():
            continue
        for no, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE in line or "/work/" + "shared" in line:
                found.append(f"{path.relative_to(ROOT)}:{no}")
    assert not found, "paths outside the repository named at:\n" + "\n".join(found)


#: A repository path a page names: a file of the code, tests, scripts or examples.
_PATH = re.compile(r"(?<![\w/.-])((?:gputopo|tests|benchmarks|tools|examples)/[\w./<>-]*\.(?:py|toml|csv|log|txt)"
                   r"|[a-z_]+/[\w/]*[\w]\.py)\b")


def test_every_source_file_a_page_names_exists():
    """The pages name modules (`bench/runlog.py`, relative to gputopo/, or from the root) and
    example files; a module moved or renamed must take the pages along."""
    bad = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for no, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for name in _PATH.findall(line):
                if "<" in name or name in EXTERNAL:
                    continue
                if not ((ROOT / name).exists() or (ROOT / "gputopo" / name).exists()):
                    bad.append(f"{page.relative_to(ROOT)}:{no}: {name}")
    assert not bad, "files the pages name that are not in the repository:\n" + "\n".join(bad)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> Set[str]:
    out = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def test_every_relative_link_of_a_page_resolves():
    pages = [p for p in repo_files() if p.suffix == ".md"]
    bad = []
    for page in pages:
        in_code = False
        for no, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_code = not in_code
            if in_code:
                continue
            for target in _LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = (page.parent / path).resolve() if path else page
                where = f"{page.relative_to(ROOT)}:{no}: {target}"
                if not dest.exists():
                    bad.append(where + " (no such file)")
                elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                    bad.append(where + " (no such heading)")
    assert not bad, "links that lead nowhere:\n" + "\n".join(bad)


def documented_kinds() -> Dict[str, int]:
    """Kind -> how many table rows of docs/findings.md start with it."""
    rows: Dict[str, int] = {}
    for line in (ROOT / "docs" / "findings.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*`([a-z0-9-]+)`\s*\|", line)
        if m:
            rows[m.group(1)] = rows.get(m.group(1), 0) + 1
    return rows


def test_findings_page_documents_every_kind_once():
    from gputopo.model.finding import KINDS

    rows = documented_kinds()
    undocumented = sorted(set(KINDS) - set(rows))
    unknown = sorted(set(rows) - set(KINDS))
    twice = sorted(k for k, n in rows.items() if n > 1)
    assert not undocumented, f"finding kinds without a row in docs/findings.md: {undocumented}"
    assert not unknown, f"docs/findings.md documents kinds the code does not have: {unknown}"
    assert not twice, f"docs/findings.md documents these kinds more than once: {twice}"


def test_every_kind_is_made_somewhere():
    """Each kind of the vocabulary is written as a literal by code that can emit it (the model's
    list aside), so the page documents what the code can say, not a name nothing uses."""
    from gputopo.model.finding import KINDS

    text = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "gputopo").rglob("*.py")
                     if p != ROOT / "gputopo" / "model" / "finding.py")
    unused = [k for k in KINDS if f'"{k}"' not in text]
    assert not unused, f"finding kinds no module names: {unused}"


def _perf_recipe() -> List[str]:
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = next(k for k, ln in enumerate(lines) if ln.startswith("perf:"))
    recipe = []
    for ln in lines[start + 1:]:
        if not ln.startswith("\t"):
            break
        recipe.append(ln)
    return recipe


def test_make_perf_runs_every_script_the_performance_page_quotes():
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    table = [ln for ln in page.splitlines() if ln.startswith("|")]
    quoted = set(re.findall(r"benchmarks/[\w-]+\.py", "\n".join(table)))
    assert quoted, "docs/performance.md's table quotes no script"
    recipe = "\n".join(_perf_recipe())
    for script in sorted(quoted):
        assert (ROOT / script).is_file(), f"docs/performance.md quotes {script}, which does not exist"
        assert script in recipe, f"`make perf` does not run {script}, which docs/performance.md quotes"


def test_the_readme_stays_a_readme():
    """Reference material lives in docs/; the README is what a new user reads first."""
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 330, f"README.md has {n} lines: move reference material into docs/"
