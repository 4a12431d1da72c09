"""An internal error during a run: exit 4, one line on the terminal, the traceback in the run
folder (docs/run-folder.md), and the measurements made before it kept."""

import pytest

from gputopo.cli.main import main


@pytest.mark.slow
def test_internal_error_after_measuring_saves_traceback_in_run_folder(tmp_path, monkeypatch, capsys):
    import gputopo.report.render as render

    def broken_render(run_dir, **kw):
        raise RuntimeError("renderer exploded")

    monkeypatch.setattr(render, "render_run", broken_render)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--sim", "pcie-4gpu", "--quick", "--pairs", "0,1", "--tests", "p2p",
              "--out", str(out)])
    assert exit_info.value.code == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "renderer exploded" in err[0] and str(out / "error.txt") in err[0]
    assert "RuntimeError: renderer exploded" in (out / "error.txt").read_text()
    assert (out / "measurements.jsonl").read_text().count("\n") > 0
