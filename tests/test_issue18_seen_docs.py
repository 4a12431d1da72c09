"""Issue 18, "What a person sees": gputopo/sim/FORMAT.md is shipped inside the package, so every
document it cites must be in the repository (it once cited a DESIGN.md that is not)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_format_md_cites_only_files_in_the_repository():
    doc = (ROOT / "gputopo" / "sim" / "FORMAT.md").read_text(encoding="utf-8")
    cited = set(re.findall(r"\b([A-Za-z_][\w./-]*\.md)\b", doc))
    missing = [c for c in sorted(cited)
               if not (ROOT / c).exists() and not (ROOT / "gputopo" / "sim" / c).exists()]
    assert not missing, f"FORMAT.md cites files the repository does not have: {missing}"


def test_every_examples_file_the_readme_names_is_shipped():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"\bexamples/[\w./-]*\.(?:toml|log|txt)\b", readme))
    assert named, "the README names no example file (the pattern no longer matches it)"
    missing = sorted(n for n in named if not (ROOT / n).is_file())
    assert not missing, f"the README names example files the repository does not ship: {missing}"


def test_the_readme_nccl_debug_into_example_works_as_written(tmp_path):
    """Issue 18: the README's `import nccl-debug --into` example used a log whose bus ids were not
    those of any built-in machine, so a user could not reproduce it. Its commands, run as written
    (in a copy of the repository's layout: reports/ under the working folder), must give what it
    shows: the pair's transport and why DDP survived where DataParallel went NaN."""
    import os
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    bench = "gputopo bench --sim seed-8gpu --pairs 5,6 --pairs 6,7 --quick --out reports/seed-ddp"
    imp = "gputopo import nccl-debug examples/nccl-debug-seed-8gpu.log --into reports/seed-ddp"
    assert f"$ {bench}\n$ {imp}\n" in readme
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "nccl-debug-seed-8gpu.log").write_bytes(
        (ROOT / "examples" / "nccl-debug-seed-8gpu.log").read_bytes())
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200", GPUTOPO_HISTORY=str(tmp_path / "history.sqlite"))
    outs = []
    for line in (bench, imp):
        proc = subprocess.run([sys.executable, "-m", "gputopo", *line.split()[1:]], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    out = " ".join(outs[1].split())
    assert "gpu-node-07/0000:8a:00.0 <-> gpu-node-07/0000:b1:00.0 │ 5,6 │ NODE │ SHM │ SHM/direct/direct" in out
    assert "gpu-node-07/0000:b1:00.0 <-> gpu-node-07/0000:b2:00.0 │ 6,7 │ NV4 │ P2P │ P2P/CUMEM/read" in out
    assert ("DDP survived because NCCL used SHM (host memory) on this pair, not the peer-to-peer path "
            "nn.DataParallel copies over") in out
