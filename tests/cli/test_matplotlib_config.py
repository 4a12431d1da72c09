"""With a HOME that cannot be written (containers), gputopo points matplotlib at a folder of its
own under the temp dir instead of letting it print two warning lines about making one."""

from __future__ import annotations

import os
import sys

from gputopo.cli import main as cli_main


def _fresh(monkeypatch, home):
    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)
    monkeypatch.delenv("MPLCONFIGDIR", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))


def test_read_only_home_gets_a_temp_config_dir(monkeypatch, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o555)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    _fresh(monkeypatch, home)
    real_access = os.access
    # root (CI, containers) may write whatever the mode says: the folder is read-only all the same
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).startswith(str(home))
                        else real_access(p, mode))
    cli_main._matplotlib_config_dir()
    assert os.environ["MPLCONFIGDIR"] == str(tmp_path / f"gputopo-matplotlib-{os.getuid()}")
    assert os.path.isdir(os.environ["MPLCONFIGDIR"])


def test_writable_home_is_left_alone(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path)
    cli_main._matplotlib_config_dir()
    assert "MPLCONFIGDIR" not in os.environ
