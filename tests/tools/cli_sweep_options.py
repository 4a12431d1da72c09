"""Option values, output trouble and hostile environments for tests/tools/cli_sweep.py.

Every option of every command given values no one means (empty, NaN, infinities, negatives,
huge integers, unicode and escape sequences, out-of-range and repeated GPU indices, bad --pairs
forms); every output target that cannot take the output; each command under environments that
break colour, encoding, terminal width, plotting and temporary files.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from cli_sweep import Case

BIG = "9" * 400
#: Values that are never a number (or never a sensible one): refused, exit 2.
NOT_NUMBERS = ("", "nan", "inf", "-inf", "1e309", "1\x1b[31m", "é", " ", "0x1g")
#: Values that may be meant somewhere (negative, zero, huge, unicode digits...): judged case by case.
ODD_NUMBERS = ("-1", "0", BIG, "１", "1_0", "0.5", "1e3", "+3")

BENCH = ["bench", "--sim", "seed-8gpu", "--quick", "--tests", "p2p", "--out", "{c}/run"]
NUMERICS = ["numerics", "--sim", "seed-8gpu", "--pairs", "0,1", "--out", "{c}/run"]
PLAN = ["cluster", "--plan", "--nodes", "8"]

#: (name, argv before the value, option, argv after, values refused, values judged)
OPTIONS: List[Tuple[str, List[str], str, List[str], Sequence[str], Sequence[str]]] = [
    ("bench --timeout", BENCH + ["--pairs", "0,1"], "--timeout", [], NOT_NUMBERS + ("0.05", "-1", BIG), ("0.5",)),
    ("bench --cpu-gpus", ["bench", "--fabric", "cpu", "--tests", "p2p", "--quick", "--out", "{c}/run"],
     "--cpu-gpus", [], NOT_NUMBERS + ("0", "65", BIG, "-1"), ()),
    ("bench --sizes", BENCH + ["--pairs", "0,1"], "--sizes", [],
     NOT_NUMBERS + ("0", "-1M", "1T", "M", "nanM", "1M,,2M", "999999G", BIG + "G", "1.5.5M"),
     ("1M,1M", "1m", "1.5M", "4K", "3")),
    ("bench --tests", BENCH[:-3] + ["--out", "{c}/run", "--pairs", "0,1"], "--tests", [],
     ("", "foo", ",", "p2p,foo", "\x1b[2J"), ("p2p,p2p", "P2P", "dp", "collectives")),
    ("bench --class", BENCH, "--class", [], ("", "XYZ", "NV99", "\n", "NV4,SYS"), ("nv4", "NV", "SYS")),
    ("numerics --steps", NUMERICS, "--steps", [], NOT_NUMBERS + ("0", "-1", BIG, "1.5"), ("1",)),
    ("numerics --lr", NUMERICS + ["--steps", "3"], "--lr", [], NOT_NUMBERS + ("0", "-1", BIG), ("1e300",)),
    ("numerics --batch", NUMERICS + ["--steps", "3"], "--batch", [], NOT_NUMBERS + ("0", "-1", BIG, "1.5"),
     ("1", "3")),
    ("numerics --seed", NUMERICS + ["--steps", "3"], "--seed", [], NOT_NUMBERS + ("1.5",),
     ("-1", BIG)),
    ("numerics --model", NUMERICS + ["--steps", "3"], "--model", [], ("", "resnet", "../mlp"),
     ("MLP\n",)),
    ("place N", ["place"], "", ["--sim", "seed-8gpu"], NOT_NUMBERS + ("0", "-1", "9", BIG), ("1", "8")),
    ("place --exclude", ["place", "2", "--sim", "seed-8gpu"], "--exclude", [],
     ("", "8", "-1", "a", "0-7", "0-9", BIG, "0;1"), ("0,0", "3", "1,3,5")),
    ("place --top", ["place", "2", "--sim", "seed-8gpu"], "--top", [], NOT_NUMBERS + ("0", "51", BIG), ("50",)),
    ("diff --threshold", ["diff", "{w}/good", "{w}/good"], "--threshold", [], NOT_NUMBERS + ("-0.1", "2", BIG),
     ("0", "1")),
    ("check --margin", ["check", "--init", "--from", "{w}/good", "--spec", "{c}/s.toml"], "--margin", [],
     NOT_NUMBERS + ("-0.1", "0.95", BIG), ("0", "0.9")),
    ("cluster --nodes", ["cluster", "--plan"], "--nodes", [], NOT_NUMBERS + ("0", "1", "1000001", BIG), ("2",)),
    ("cluster --gbps", PLAN, "--gbps", [], NOT_NUMBERS + ("0", "-1", BIG), ("0.001",)),
    ("cluster --size", PLAN, "--size", [], NOT_NUMBERS + ("0", "-1M", "M", BIG + "G"), ("1", "4K", "1T")),
    ("cluster --samples", PLAN, "--samples", [], NOT_NUMBERS + ("0", "1001", BIG), ("1",)),
    ("cluster --timeout", PLAN, "--timeout", [], NOT_NUMBERS + ("0", "0.5", BIG), ()),
    ("cluster --slow-below", PLAN, "--slow-below", [], NOT_NUMBERS + ("0", "1", BIG), ()),
    ("cluster --seed", PLAN, "--seed", [], ("", "nan", "1.5", "é"), ("-1", BIG)),
    ("cluster --pattern", PLAN, "--pattern", [], ("", "ring", "ALL"), ()),
    ("export --interval", ["export", "--sim", "seed-8gpu", "--textfile", "{c}"], "--interval", [],
     NOT_NUMBERS + ("-1",), ("0", BIG)),
    ("export --listen", ["export", "--sim", "seed-8gpu", "--interval", "nan"], "--listen", [],
     ("", "bogus", ":", "127.0.0.1:99999", "127.0.0.1:-1", "999.1.1.1:80", "127.0.0.1:" + BIG, "[::1", "a:b:c"), ()),
    ("history --since", ["history"], "--since", [],
     ("", "bogus", "30x", "-5d", "2026-13-45", "nan"), ("0d", "30d", "2026-11-01", "0d\n", "99999999d", BIG + "d")),
    ("history --pair", ["history"], "--pair", [], ("", "0,0", "a", "0", "0,1,2", "-1,3"), ("1,0", BIG + ",1")),
    ("history --class", ["history"], "--class", [], ("", "XYZ", "\x1b[31m"), ("nv4",)),
    ("history --limit", ["history"], "--limit", [], NOT_NUMBERS + ("0", "-1"), (BIG,)),
    ("history --machine", ["history"], "--machine", [], (), ("", "\x1b[2J", "%", "_", "'; drop table runs; --")),
    ("import --op", ["import", "nccl-tests", "{fix_nccl}", "--out", "{c}/run"], "--op", [],
     ("", "bogus"), ("all_gather", "ALL_REDUCE", "all_reduce\n")),
    ("import kernel-log --host", ["import", "kernel-log", "{fix_klog}", "--out", "{c}/run"], "--host", [],
     ("",), ("nosuch", "\x1b[2J")),
]

#: Bad forms of GPU pairs and GPU lists.
PAIRS_BAD = ("", "0,0", "0,8", "8,9", "-1,0", "0,1,2", "0", "a,b", "0;1", BIG + ",0", ",", "0,", "0 1",
             "all,0", "0,\x1b[31m1")
PAIRS_ODD = ("１,２", "1,0", "0,1 ", " 0,1", "00,01", "0, 1")
GPUS_BAD = ("", "3-0", "0-", "-", "0--3", "8", "0-999999999", ",", "0,,1", "a", "0-7-9", BIG, "-1")
GPUS_ODD = ("0,0,1", "1,0", "0-1")


def option_cases() -> List[Case]:
    cases = []
    for name, before, opt, after, refused, judged in OPTIONS:
        for i, v in enumerate(list(refused) + list(judged)):
            argv = before + ([opt] if opt else []) + [v] + after
            expect = "usage" if i < len(refused) else "any"
            cases.append(Case("option", f"{name} {v!r}"[:70], argv, expect, quick=i in (1, 2)))
    for v in PAIRS_BAD + PAIRS_ODD:
        bad = v in PAIRS_BAD
        cases.append(Case("option", f"bench --pairs {v!r}"[:70], BENCH + ["--pairs", v], "usage" if bad else "any",
                          quick=v in ("0,8", "0,0")))
        if bad:
            cases.append(Case("option", f"numerics --pairs {v!r}"[:70], NUMERICS[:3] + ["--pairs", v, "--steps", "2"],
                              "usage", quick=False))
    for v in GPUS_BAD + GPUS_ODD:
        bad = v in GPUS_BAD
        cases.append(Case("option", f"bench --gpus {v!r}"[:70], BENCH + ["--gpus", v, "--class", "NV4"],
                          "usage" if bad else "any", quick=v == "0-999999999"))
    repeated = [
        ("bench --pairs twice", BENCH + ["--pairs", "0,1", "--pairs", "0,1"], "any"),
        ("bench --pairs i,j and j,i", BENCH + ["--pairs", "0,1", "--pairs", "1,0"], "any"),
        ("bench --pairs all and 0,1", BENCH + ["--pairs", "all", "--pairs", "0,1"], "usage"),
        ("bench --gpus and --pairs", BENCH + ["--gpus", "0-3", "--pairs", "0,1"], "any"),
        ("bench --pairs outside --gpus", BENCH + ["--gpus", "2-3", "--pairs", "0,1"], "usage"),
        ("bench --class with no pair", BENCH + ["--class", "PIX"], "usage"),
        ("bench --resume and --out", ["bench", "--resume", "{w}/good", "--out", "{c}/x"], "usage"),
        ("bench --retry-hung without --resume", BENCH + ["--pairs", "0,1", "--retry-hung"], "usage"),
        ("bench --fabric cpu with sim model", ["bench", "--fabric", "sim", "--tests", "p2p"], "usage"),
        ("bench --self --tests p2p on 1 GPU", ["bench", "--sim", "h100-pcie-1gpu", "--self", "--quick",
                                               "--tests", "p2p", "--out", "{c}/run"], "any"),
        ("bench on a 1-GPU machine", ["bench", "--sim", "h100-pcie-1gpu", "--quick", "--tests", "p2p",
                                      "--out", "{c}/run"], "any"),
        ("numerics on a 1-GPU machine", ["numerics", "--sim", "h100-pcie-1gpu", "--steps", "2", "--out", "{c}/run"],
         "any"),
        ("place more GPUs than the machine", ["place", "5", "--sim", "pcie-4gpu"], "usage"),
        ("place all excluded", ["place", "1", "--sim", "pcie-4gpu", "--exclude", "0-3"], "refuse"),
        ("check without --spec", ["check", "{w}/good"], "usage"),
        ("check measuring --pairs 0,8", ["check", "--spec", "pcie-box", "--sim", "seed-8gpu", "--pairs", "0,8",
                                         "--quick"], "usage"),
        ("check measuring one pair", ["check", "--spec", "pcie-box", "--sim", "seed-8gpu", "--pairs", "0,1",
                                      "--quick", "--out", "{c}/run"], "any"),
        ("check measuring --resume a finished run", ["check", "--spec", "pcie-box", "--resume", "{w}/good"], "any"),
        ("check --init without --from", ["check", "--init", "--spec", "{c}/s.toml"], "usage"),
        ("check --init --spec onto run.json", ["check", "--init", "--from", "{w}/good", "--spec", "{w}/good/run.json"],
         "usage"),
        ("check --init --spec a shipped name", ["check", "--init", "--from", "{w}/good", "--spec", "pcie-box"],
         "any"),
        ("check --spec a path-like name", ["check", "{w}/good", "--spec", "../../etc/passwd"], "refuse"),
        ("check --spec nosuch", ["check", "{w}/good", "--spec", "nosuch"], "usage"),
        ("diff of one folder with itself", ["diff", "{w}/good", "{w}/good"], "any"),
        ("diff a run and an import", ["diff", "{w}/good", "{w}/imp-nccl"], "any"),
        ("history --plot without --pair", ["history", "--plot", "{c}/p.png"], "usage"),
        ("export without --textfile or --listen", ["export", "--sim", "seed-8gpu"], "any"),
        ("cluster --plan without --nodes", ["cluster", "--plan"], "usage"),
        ("cluster without launcher", ["cluster", "--fabric", "cpu", "--timeout", "5", "--out", "{c}/run"], "any"),
        ("import nccl-tests two logs of other machines", ["import", "nccl-tests", "{fix_nccl}", "{fix_nccl_aws}",
                                                          "--out", "{c}/run"], "any"),
        ("import nccl-tests same log twice", ["import", "nccl-tests", "{fix_nccl}", "{fix_nccl}", "--out", "{c}/run"],
         "any"),
        ("import nccl-tests --topo of another machine", ["import", "nccl-tests", "{fix_nccl}", "--topo", "{w}/scan.json",
                                                         "--out", "{c}/run"], "refuse"),
        ("import nccl-debug --into an import", ["import", "nccl-debug", "{fix_ndebug}", "--into", "{w}/imp-nccl"],
         "refuse"),
        ("unknown command", ["bogus"], "usage"),
        ("unknown import kind", ["import", "bogus", "x"], "usage"),
        ("unknown option", ["scan", "--bogus"], "usage"),
        ("bare import", ["import"], "usage"),
    ]
    for name, argv, expect in repeated:
        cases.append(Case("option", name, argv, expect, help_ok=name == "bare import",
                          quick=name in ("check without --spec", "place all excluded")))
    return cases


#: Commands that write a file or folder the user names: (name, argv with {o}).
WRITERS = [
    ("bench --out", BENCH + ["--pairs", "0,1"]),
    ("import nccl-tests --out", ["import", "nccl-tests", "{fix_nccl}"]),
    ("import kernel-log --out", ["import", "kernel-log", "{fix_klog}"]),
    ("cluster --sim --out", ["cluster", "--sim", "{fix_cluster}"]),
    ("check --junit", ["check", "{w}/good", "--spec", "{w}/spec.toml"]),
    ("check --init --spec", ["check", "--init", "--from", "{w}/good"]),
    ("history --plot", ["history", "--pair", "0,1"]),
    ("export --textfile", ["export", "--sim", "seed-8gpu"]),
]
_WRITER_OPT = {"bench --out": "--out", "import nccl-tests --out": "--out", "import kernel-log --out": "--out",
               "cluster --sim --out": "--out", "check --junit": "--junit", "check --init --spec": "--spec",
               "history --plot": "--plot", "export --textfile": "--textfile"}
OUT_TARGETS = {
    "a regular file": ("file", "refuse-dir"),
    "/dev/full": ("/dev/full", "refuse"),
    "an empty string": ("", "usage"),
    "a symlink loop": ("loop", "refuse"),
    "under a regular file": ("file/sub", "refuse"),
    "a fifo": ("fifo", "refuse"),
    "the healthy run folder": ("{w}/good", "refuse-dir"),
    "a file of the healthy run": ("{w}/good/run.json", "refuse"),
    "a deep new path": ("{c}/a/b/c/d", "any"),
}


def _out_setup(target: str):
    def setup(c):
        import os

        (c / "file").write_text("precious\n")
        os.mkfifo(c / "fifo")
        (c / "loop").symlink_to(c / "loop")
    return setup


def output_cases() -> List[Case]:
    cases = []
    for name, argv in WRITERS:
        is_dir = _WRITER_OPT[name] in ("--out", "--textfile")
        for tname, (target, expect) in OUT_TARGETS.items():
            if expect == "refuse-dir":
                expect = "refuse" if is_dir else "any"
            if name == "export --textfile" and tname == "the healthy run folder":
                expect = "any"  # it adds gputopo.prom there, overwriting nothing of the run
            path = target if target.startswith(("/", "{")) or target == "" else "{c}/" + target
            cases.append(Case("output", f"{name} onto {tname}", argv + [_WRITER_OPT[name], path], expect,
                              setup=_out_setup(target), quick=tname in ("/dev/full", "a file of the healthy run")))
    streamed = [
        ("--help", ["--help"]), ("sims", ["sims"]), ("scan", ["scan", "--sim", "seed-8gpu"]),
        ("scan --format smi", ["scan", "--sim", "seed-8gpu", "--format", "smi"]),
        ("scan --json", ["scan", "--sim", "seed-8gpu", "--json"]), ("scan --csv", ["scan", "--sim", "dgx-h100", "--csv"]),
        ("report", ["report", "{w}/imp-nccl", "--no-plots"]), ("report --json", ["report", "{w}/imp-nccl", "--json"]),
        ("place", ["place", "2", "--sim", "seed-8gpu", "--top", "50"]), ("history", ["history"]),
        ("history --json", ["history", "--json"]), ("diff", ["diff", "{w}/good", "{w}/good"]),
        ("check", ["check", "{w}/good", "--spec", "{w}/spec.toml"]),
        ("cluster --plan", ["cluster", "--plan", "--nodes", "200", "--pattern", "pairwise"]),
        ("import nccl-debug --json", ["import", "nccl-debug", "{fix_ndebug}", "--json"]),
        ("import nccl-tests", ["import", "nccl-tests", "{fix_nccl}", "--out", "{c}/run"]),
        ("bench", BENCH + ["--pairs", "0,1"]), ("bench --json", BENCH + ["--pairs", "0,1", "--json"]),
        ("export --textfile", ["export", "--sim", "seed-8gpu", "--textfile", "{c}"]),
    ]
    for name, argv in streamed:
        cases.append(Case("stdout", f"{name} > /dev/full", argv, "any", stdout="devfull",
                          quick=name in ("scan", "bench")))
        cases.append(Case("stdout", f"{name} | head -1", argv, "any", stdout="head1",
                          quick=name in ("scan --format smi", "report")))
    return cases


ENVS: Dict[str, Dict[str, Optional[str]]] = {
    "PYTHONIOENCODING=ascii": {"PYTHONIOENCODING": "ascii"},
    "NO_COLOR=1": {"NO_COLOR": "1"},
    "NO_COLOR=1 FORCE_COLOR=1": {"NO_COLOR": "1", "FORCE_COLOR": "1"},
    "MPLBACKEND=bogus": {"MPLBACKEND": "bogus"},
    "TERM=dumb": {"TERM": "dumb"},
    "COLUMNS=10": {"COLUMNS": "10"},
    "COLUMNS=0": {"COLUMNS": "0"},
    "COLUMNS=abc": {"COLUMNS": "abc"},
    "LC_ALL=C LANG=C": {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
    "TMPDIR=/nonexistent": {"TMPDIR": "/nonexistent/tmp"},
    "HOME unset": {"HOME": None},
    "GPUTOPO_HISTORY empty": {"GPUTOPO_HISTORY": ""},
    "GPUTOPO_HISTORY a folder": {"GPUTOPO_HISTORY": "{w}"},
    "GPUTOPO_HISTORY /dev/full": {"GPUTOPO_HISTORY": "/dev/full"},
    "XDG_DATA_HOME a file": {"GPUTOPO_HISTORY": None, "XDG_DATA_HOME": "{w}/spec.toml"},
    "CUDA_VISIBLE_DEVICES=garbage": {"CUDA_VISIBLE_DEVICES": "garbage,-1,GPU-x"},
    "PYTHONWARNINGS=error": {"PYTHONWARNINGS": "error"},
}
ENV_COMMANDS = [
    ("scan", ["scan", "--sim", "seed-8gpu"]),
    ("report", ["report", "{c}/copy"]),
    ("check", ["check", "{c}/copy", "--spec", "{w}/spec.toml"]),
    ("place", ["place", "2", "--sim", "seed-8gpu"]),
    ("history", ["history", "--pair", "0,1"]),
    ("import nccl-tests", ["import", "nccl-tests", "{fix_nccl}", "--out", "{c}/imp"]),
    ("bench", BENCH + ["--pairs", "0,1"]),
    ("bench --fabric cpu", ["bench", "--fabric", "cpu", "--cpu-gpus", "2", "--tests", "p2p", "--quick",
                            "--out", "{c}/run2"]),
]


def env_cases(copy_good) -> List[Case]:
    cases = []
    for ename, env in ENVS.items():
        for cname, argv in ENV_COMMANDS:
            if cname == "bench --fabric cpu" and ename not in ("CUDA_VISIBLE_DEVICES=garbage", "TMPDIR=/nonexistent",
                                                               "PYTHONWARNINGS=error"):
                continue
            cases.append(Case("env", f"{cname} under {ename}", argv, "any", env=dict(env), setup=copy_good,
                              timeout=120.0, quick=(ename, cname) in (("NO_COLOR=1", "scan"),
                                                                      ("TMPDIR=/nonexistent", "bench"))))
    return cases
