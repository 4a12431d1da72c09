"""Open the history database: where it is, its schema version, its migrations.

Why WAL and a busy timeout: two gputopo runs on one machine (a CI gate and a person) may
finish at the same moment; WAL lets readers go on while one writer commits, the busy timeout
makes the second writer wait for the first instead of failing, and each run is written in one
transaction (record.py), so a run killed mid-write leaves nothing half-written.

Every problem with the database (corrupt, locked past the timeout, from a newer gputopo, a
path that cannot be written) is raised as HistoryError: one line, exit 2.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gputopo.errors import UsageError

#: The environment variable that names the database (same as --history PATH).
HISTORY_ENV = "GPUTOPO_HISTORY"
#: Seconds a writer waits for another one before the database counts as locked.
BUSY_TIMEOUT_S = 10.0


class HistoryError(UsageError):
    """The history database cannot be used (exit 2, one line naming the file)."""


def default_history_path() -> Path:
    """``$GPUTOPO_HISTORY``, else ``$XDG_DATA_HOME/gputopo/history.sqlite`` (XDG's default
    ``~/.local/share`` when the variable is unset or empty)."""
    env = os.environ.get(HISTORY_ENV)
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "gputopo" / "history.sqlite"


_SCHEMA_V1 = """
CREATE TABLE machines (
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,          -- simulated|hostname|sorted GPU UUIDs
    hostname TEXT NOT NULL,
    simulated INTEGER NOT NULL,
    sim_name TEXT,
    driver TEXT,
    first_seen_s REAL NOT NULL
);
CREATE TABLE machine_gpus (
    machine_id INTEGER NOT NULL REFERENCES machines(id),
    nvml_index INTEGER NOT NULL,
    uuid TEXT, bus_id TEXT, model TEXT,
    PRIMARY KEY (machine_id, nvml_index)
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    machine_id INTEGER NOT NULL REFERENCES machines(id),
    command TEXT NOT NULL,             -- scan | bench | numerics | check | cluster | import
    time_s REAL NOT NULL,              -- when the run happened (UTC epoch, or a sim's clock if set)
    time_source TEXT NOT NULL,         -- "wall" | "sim-clock"
    recorded_s REAL NOT NULL,
    argv TEXT NOT NULL,                -- JSON list
    run_dir TEXT,
    simulated INTEGER NOT NULL,
    sim_name TEXT,
    fabric TEXT,
    status TEXT,                       -- run.json's status (complete, interrupted...) or "scan"
    verdict TEXT,
    errors INTEGER NOT NULL,           -- error findings of the run itself
    driver TEXT,
    gputopo_version TEXT
);
CREATE INDEX runs_by_machine ON runs(machine_id, time_s);
CREATE TABLE figures (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    gpus TEXT NOT NULL,                -- "5,6"
    link_class TEXT,
    series TEXT NOT NULL,
    direction TEXT,
    size_bytes INTEGER NOT NULL,
    gbps REAL,                         -- median busbw (algbw where the factor is 1), NULL: failed
    metric TEXT,
    wrong INTEGER,
    timing TEXT NOT NULL,              -- cuda-events | wall | modeled
    headline INTEGER NOT NULL          -- 1: the series' headline size
);
CREATE INDEX figures_by_run ON figures(run_id);
CREATE INDEX figures_by_pair ON figures(gpus, run_id);
CREATE INDEX figures_by_class ON figures(link_class, run_id);
CREATE TABLE findings (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    kind TEXT NOT NULL, severity TEXT NOT NULL, gpus TEXT, link_class TEXT, message TEXT,
    origin TEXT NOT NULL,              -- "run" (the run's own report) | "history"
    evidence TEXT                      -- JSON, history findings only (a run's stays in its folder)
);
CREATE INDEX findings_by_run ON findings(run_id);
CREATE TABLE counters (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    gpu_uuid TEXT NOT NULL, nvml_index INTEGER NOT NULL, bus_id TEXT,
    counter TEXT NOT NULL,             -- nvlink_crc_flit, pcie_replay, ecc_corrected_volatile, xid...
    link INTEGER,                      -- the NVLink, for nvlink_* counters
    value INTEGER NOT NULL
);
CREATE INDEX counters_by_run ON counters(run_id);
CREATE INDEX counters_by_gpu ON counters(gpu_uuid, counter, link);
"""

_LAYOUT_V3 = """
CREATE TABLE layout (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    uuids TEXT NOT NULL,               -- a GPU's UUID, or a pair's two (lower NVML index first, space apart)
    link_class TEXT,                   -- a pair's class as the scan read it (NV12, PXB...), NULL for a GPU
    nvlinks INTEGER NOT NULL,          -- a GPU's active NVLinks, a pair's NVLinks between them
    fabric TEXT                        -- a GPU's: "nvswitch" (reaches an NVSwitch or is in an NVLink fabric), else NULL
);
CREATE INDEX layout_by_run ON layout(run_id);
"""

#: Ordered migrations: entry k brings a database from version k to k + 1. Never edit one that
#: shipped; append a new one (and a test that migrates a database of the old version).
MIGRATIONS: list[tuple[str, Callable[[Any], Any]]] = [
    ("machines, runs, figures, findings, counters", lambda c: c.executescript(_SCHEMA_V1)),
    # what each run's verdict judged (report/judged.py's counts, JSON; NULL: recorded before, or a scan)
    ("runs.judged", lambda c: c.execute("ALTER TABLE runs ADD COLUMN judged TEXT")),
    # what the scan saw of the machine's links (record.py layout_of): what `gate` declares from
    ("layout", lambda c: c.executescript(_LAYOUT_V3)),
]
SCHEMA_VERSION = len(MIGRATIONS)


def open_history(path, *, create: bool = True) -> sqlite3.Connection:
    """Open (and create or migrate) the database at ``path``; HistoryError on any problem."""
    path = Path(path)
    try:
        exists = path.exists()
    except OSError as e:  # a folder on the way that cannot be searched (EACCES)
        raise HistoryError(f"history database {path}: cannot open ({_reason(e)}); choose "
                           "another with --history PATH or skip it with --no-history") from None
    if not create and not exists:
        raise HistoryError(f"history database {path}: no such file (no run recorded there yet)")
    if exists:  # a folder or /dev/full: SQLite's own words were "unable to open database
        from gputopo.inputs import user_file_problem  # file" or "cannot rollback"

        problem = user_file_problem(path)
        if problem:
            raise HistoryError(f"history database {path}: {problem}; choose another with --history PATH "
                               "or skip it with --no-history")
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    except (OSError, sqlite3.Error) as e:
        raise HistoryError(f"history database {path}: cannot open ({_reason(e)}); choose "
                           "another with --history PATH or skip it with --no-history") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # WAL + NORMAL: a commit survives a killed process (not a power cut's last commit) and
        # never corrupts the database; FULL would fsync every commit for no gain here
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        _migrate(conn, path)
    except sqlite3.Error as e:
        conn.close()
        raise HistoryError(f"history database {path}: {_reason(e)}; choose another with "
                           "--history PATH or skip it with --no-history") from None
    except HistoryError:
        conn.close()
        raise
    return conn


def _reason(e: BaseException) -> str:
    import errno

    if isinstance(e, OSError) and e.errno in (errno.EEXIST, errno.ENOTDIR) and e.filename:
        return f"{e.filename} is a file, not a folder"  # `--history notes.txt/h.sqlite`
    text = str(e) or type(e).__name__
    if "file is not a database" in text or "malformed" in text:
        return f"corrupt ({text})"
    if "locked" in text or "busy" in text:
        return f"locked by another process for over {BUSY_TIMEOUT_S:g} s ({text})"
    if "readonly" in text or "unable to open" in text:
        return f"not writable ({text})"
    return text


def schema_version(conn: sqlite3.Connection) -> int | None:
    """The version the database says it has; None for an empty (new) database."""
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
    if not has:
        return None
    row = conn.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else None


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring the database to SCHEMA_VERSION, each migration in its own transaction."""
    conn.execute("BEGIN IMMEDIATE")  # one migrator at a time; the others wait, then see it done
    try:
        version = schema_version(conn)
        if version is None:
            tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
            if tables:
                raise HistoryError(f"history database {path}: not a gputopo history (it has tables "
                                   "but no schema_version); choose another with --history PATH")
            conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO schema_version VALUES (0)")
            version = 0
        if version > SCHEMA_VERSION:
            raise HistoryError(f"history database {path} has schema version {version}, newer than "
                               f"this gputopo's {SCHEMA_VERSION}: upgrade gputopo or choose another "
                               "database with --history PATH")
        for k in range(version, SCHEMA_VERSION):
            _name, step = MIGRATIONS[k]
            for statement in _statements(step):
                conn.execute(statement)
            conn.execute("UPDATE schema_version SET version = ?", (k + 1,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(step: Callable[[Any], Any]) -> list[str]:
    """The SQL statements of a migration, run one by one inside the open transaction
    (``executescript`` would commit it)."""
    collected: list[str] = []

    class _Collect:
        def executescript(self, script: str) -> None:
            collected.extend(s.strip() for s in script.split(";") if s.strip())

        def execute(self, sql: str, *args) -> None:
            collected.append(sql)

    step(_Collect())
    return collected
