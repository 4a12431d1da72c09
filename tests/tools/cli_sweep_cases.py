"""The case tables of tests/tools/cli_sweep.py: what each command reads and the bad forms of it.

Placeholders in argv: {w} the sweep's work folder (the valid fixtures prepare_fixtures made),
{c} the case's own folder (its cwd; a setup writes its damaged copies there). Built from
tables, not written out: every command x every input kind, every option x odd values.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable, List, Optional

from cli_sweep import FIXTURES, REPO, Case

ROOT = os.geteuid() == 0  # root reads a mode-000 file anyway: those cases are left out

FIX = {
    "desc": REPO / "examples" / "sick-a100.toml",
    "cluster": REPO / "examples" / "cluster-64.toml",
    "smi": FIXTURES / "topo" / "autodl_2x2080ti_pix.txt",
    "smi8": FIXTURES / "topo" / "seed-8gpu-nv4-pairs.txt",
    "klog": FIXTURES / "xid" / "bumblebee-677_xid32_xid31.txt",
    "nccl": FIXTURES / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt",
    "ndebug": FIXTURES / "nccl-debug" / "megatron-516_p4d_8gpu_p2p-ipc-read_busid_excerpt.log",
    "nvb": FIXTURES / "nvbandwidth" / "nvbandwidth-50_6xa6000_d2d_read_ce_v0.8.txt",
    "nvbjson": FIXTURES / "nvbandwidth" / "constructed_json_v0.8_2gpu_read_ce_h2d_waived.json",
    "p2p": FIXTURES / "p2pbw" / "stelline_asus-esc8000a_4xrtx6000ada.txt",
    "p2ptopo": FIXTURES / "topo" / "stelline_asus-esc8000a_4xrtx6000ada_amd_nics.txt",
}

#: Another format's file, fed where one kind is expected (wrong-format input).
WRONG = {"desc": "nccl", "cluster": "desc", "smi": "p2p", "klog": "nccl", "nccl": "p2p", "ndebug": "nvb",
         "nvb": "p2p", "p2p": "nvb", "spec": "desc", "hist": "nccl", "topo": "klog",
         "p2ptopo": "nvb"}

#: Kinds of input file: those a command must refuse, and those it may read or refuse.
REFUSE_KINDS = ("empty", "binary", "folder", "devnull", "devzero", "fifo", "loop", "missing", "unreadable",
                "hugeline", "wrong")
ANY_KINDS = ("truncated", "utf16", "latin1", "nul", "crlf", "bom")
QUICK_KINDS = ("empty", "binary", "fifo", "wrong", "truncated", "utf16")


def make_input(kind: str, dest: Path, valid: Optional[Path], wrong: Optional[Path]) -> bool:
    """Make ``dest`` an input of this kind (from the valid file where the kind needs one);
    False when the kind cannot be made here (mode 000 as root)."""
    data = valid.read_bytes() if valid else b"name = 'x'\n"
    if kind == "empty":
        dest.write_bytes(b"")
    elif kind == "binary":
        dest.write_bytes(bytes(range(256)) * 64)
    elif kind == "truncated":
        dest.write_bytes(data[: len(data) // 2])
    elif kind == "folder":
        dest.mkdir()
    elif kind in ("devnull", "devzero"):
        dest.symlink_to(f"/dev/{kind[3:]}")
    elif kind == "fifo":
        os.mkfifo(dest)
    elif kind == "loop":
        dest.symlink_to(dest)
    elif kind == "missing":
        pass
    elif kind == "unreadable":
        if ROOT:
            return False
        dest.write_bytes(data)
        dest.chmod(0)
    elif kind == "hugeline":
        dest.write_bytes(b"a" * (3 << 20) + b"\n")
    elif kind == "wrong":
        dest.write_bytes(wrong.read_bytes() if wrong else b"hello\n")
    elif kind == "utf16":
        dest.write_bytes(data.decode("utf-8", "replace").encode("utf-16"))
    elif kind == "latin1":
        dest.write_bytes(b"# caf\xe9 \xff\n" + data)
    elif kind == "nul":
        dest.write_bytes(data[: len(data) // 3] + b"\0\0\0" + data[len(data) // 3:])
    elif kind == "crlf":
        dest.write_bytes(data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
    elif kind == "bom":
        dest.write_bytes(b"\xef\xbb\xbf" + data)
    else:
        raise ValueError(kind)
    return True


def _input_setup(kind: str, valid: Optional[Path], wrong: Optional[Path], name: str = "in"):
    def setup(c: Path):
        make_input(kind, c / name, valid, wrong)
    return setup


def prepare_fixtures(work: Path, gputopo: Callable) -> None:
    """The valid inputs every case starts from, made once by the CLI itself."""
    (work / "home").mkdir()
    (work / "xdg").mkdir()
    gputopo("bench", "--sim", "seed-8gpu-healthy", "--pairs", "0,1", "--pairs", "0,2", "--quick",
            "--tests", "p2p,numerics", "--out", str(work / "good"))
    gputopo("check", "--init", "--from", str(work / "good"), "--spec", str(work / "spec.toml"))
    (work / "scan.json").write_bytes(gputopo("scan", "--sim", "seed-8gpu-healthy", "--json").stdout)
    (work / "scan4.json").write_bytes(gputopo("scan", "--sim", "pcie-4gpu", "--json").stdout)
    gputopo("import", "nccl-tests", str(FIX["nccl"]), "--out", str(work / "imp-nccl"))
    gputopo("import", "nvbandwidth", str(FIX["nvb"]), "--out", str(work / "imp-nvb"))
    gputopo("import", "kernel-log", str(FIX["klog"]), "--out", str(work / "imp-klog"))


def _v(work: Path, key: str) -> Optional[Path]:
    """The valid file of an input kind (the fixtures made in the work folder included)."""
    extra = {"spec": work / "spec.toml", "topo": work / "scan.json", "hist": None}
    return extra[key] if key in extra else FIX[key]


#: Commands that read one input file: (name, argv with {f}, kind of file, quick).
FILE_READERS = [
    ("scan --sim", ["scan", "--sim", "{f}"], "desc", True),
    ("scan --from-smi", ["scan", "--from-smi", "{f}"], "smi", True),
    ("scan --kernel-log", ["scan", "--sim", "seed-8gpu", "--kernel-log", "{f}"], "klog", False),
    ("place --sim", ["place", "2", "--sim", "{f}"], "desc", False),
    ("bench --sim", ["bench", "--sim", "{f}", "--pairs", "0,1", "--quick", "--tests", "p2p", "--out", "{c}/run"],
     "desc", False),
    ("numerics --sim", ["numerics", "--sim", "{f}", "--pairs", "0,1", "--steps", "5", "--out", "{c}/run"],
     "desc", False),
    ("export --sim", ["export", "--sim", "{f}", "--textfile", "{c}"], "desc", False),
    ("health --sim", ["health", "--sim", "{f}"], "desc", False),
    ("health --kernel-log", ["health", "--sim", "seed-8gpu", "--kernel-log", "{f}"], "klog", False),
    ("cluster --sim", ["cluster", "--sim", "{f}", "--out", "{c}/run"], "cluster", True),
    ("check --spec", ["check", "{w}/good", "--spec", "{f}"], "spec", True),
    ("import nccl-tests", ["import", "nccl-tests", "{f}", "--out", "{c}/run"], "nccl", True),
    ("import nccl-tests --topo", ["import", "nccl-tests", str(FIX["nccl"]), "--topo", "{f}", "--out", "{c}/run"],
     "smi", False),
    ("import nccl-debug", ["import", "nccl-debug", "{f}"], "ndebug", True),
    ("import nvbandwidth", ["import", "nvbandwidth", "{f}", "--out", "{c}/run"], "nvb", True),
    ("import nvbandwidth json", ["import", "nvbandwidth", "{f}", "--out", "{c}/run"], "nvbjson", False),
    ("import p2pbw --topo", ["import", "p2pbw", str(FIX["p2p"]), "--topo", "{f}", "--out", "{c}/run"],
     "p2ptopo", False),
    ("import p2pbw", ["import", "p2pbw", "{f}", "--out", "{c}/run"], "p2p", True),
    ("import kernel-log", ["import", "kernel-log", "{f}", "--out", "{c}/run"], "klog", True),
]

#: Files a command only opens as a database: an empty file is a fresh database, not an error.
HISTORY_READERS = [
    ("history --history", ["history", "--history", "{f}"]),
    ("scan --history", ["scan", "--sim", "seed-8gpu", "--history", "{f}"]),
]


def file_cases(work: Path) -> List[Case]:
    cases = []
    for name, argv, key, quick in FILE_READERS:
        valid = _v(work, key)
        wrong = _v(work, WRONG.get(key, "nccl"))
        cases.append(Case("file", f"{name} <valid>", [a.replace("{f}", str(valid)) for a in argv], "ok", quick=quick))
        for kind in REFUSE_KINDS + ANY_KINDS:
            if kind == "unreadable" and ROOT:
                continue
            if kind in ANY_KINDS and argv[0] in ("bench", "numerics", "place", "export"):
                continue  # the description reader of scan --sim; here they would only run a sim
            expect = "refuse" if kind in REFUSE_KINDS else "any"
            cases.append(Case("file", f"{name} <{kind}>", [a.replace("{f}", "{c}/in") for a in argv], expect,
                              setup=_input_setup(kind, valid, wrong), quick=quick and kind in QUICK_KINDS))
    for name, argv in HISTORY_READERS:
        for kind in ("empty", "binary", "truncated", "folder", "devnull", "fifo", "loop", "wrong"):
            expect = "any" if kind in ("empty", "devnull") else "refuse"
            if name.startswith("scan"):
                expect = "any"  # the scan itself succeeds; it must say it could not record (one line)
            cases.append(Case("history", f"{name} <{kind}>", [a.replace("{f}", "{c}/in") for a in argv], expect,
                              setup=_history_setup(kind, work), quick=kind in ("binary", "fifo")))
    cases += _stdin_cases()
    return cases


def _history_setup(kind: str, work: Path):
    def setup(c: Path):
        if kind == "truncated":
            db = work / "history.sqlite"
            data = db.read_bytes() if db.exists() else b"SQLite format 3\0" + b"\1" * 100
            (c / "in").write_bytes(data[: max(100, len(data) // 2)])
        else:
            make_input(kind, c / "in", None, FIX["nccl"])
    return setup


def _stdin_cases() -> List[Case]:
    # `-` is stdin only where the help says so: elsewhere it is a file name, and there is none
    cases = [Case("stdin", "import nccl-tests - <valid, not read>", ["import", "nccl-tests", "-", "--out", "{c}/run"],
                  "usage", stdin=FIX["nccl"].read_bytes()),
             Case("stdin", "scan --sim - <valid, not read>", ["scan", "--sim", "-"], "usage",
                  stdin=FIX["desc"].read_bytes())]
    for name, argv, key in [("scan --from-smi -", ["scan", "--from-smi", "-"], "smi"),
                            ("import p2pbw -", ["import", "p2pbw", "-", "--out", "{c}/run"], "p2p"),
                            ("import nvbandwidth -", ["import", "nvbandwidth", "-", "--out", "{c}/run"], "nvb"),
                            ("import kernel-log -", ["import", "kernel-log", "-", "--out", "{c}/run"], "klog")]:
        data = FIX[key].read_bytes()
        cases.append(Case("stdin", f"{name} <valid>", argv, "ok", stdin=data, quick=key == "smi"))
        cases.append(Case("stdin", f"{name} <closed>", argv, "refuse"))
        cases.append(Case("stdin", f"{name} <empty>", argv, "refuse", stdin=b""))
        cases.append(Case("stdin", f"{name} <binary>", argv, "refuse", stdin=bytes(range(256)) * 64,
                          quick=key == "nccl"))
        cases.append(Case("stdin", f"{name} <utf16>", argv, "any", stdin=data.decode().encode("utf-16")))
    return cases


def _copy_good(work: Path):
    def setup(c: Path):
        shutil.copytree(work / "good", c / "copy", symlinks=True)  # not {c}/run: bench writes there
    return setup


def all_cases(work: Path) -> List[Case]:
    """Every case of the sweep, {fix_*} placeholders filled in."""
    from cli_sweep_options import env_cases, option_cases, output_cases
    from cli_sweep_runs import run_cases

    fixes = {f"{{fix_{k}}}": str(v) for k, v in FIX.items()}
    fixes["{fix_nccl_aws}"] = str(FIXTURES / "nccl-tests" / "awsome-dt_slurm_srun-label_2xp5_all_reduce.txt")
    cases = file_cases(work) + run_cases(work) + option_cases() + output_cases() + env_cases(_copy_good(work))
    for case in cases:
        for k, v in fixes.items():
            case.argv = [a.replace(k, v) for a in case.argv]
    return cases
