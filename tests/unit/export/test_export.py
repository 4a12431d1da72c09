"""`gputopo export` (issue 19): node_exporter's textfile and /metrics over HTTP on 127.0.0.1,
parsed with prometheus_client's own parser; 50 scrapes at once share one scan; a client that
goes away mid-answer, a bad path, a taken port; an NVML error on one GPU. Every server runs on
an ephemeral port and is shut down; every loop is bounded in count and time."""

from __future__ import annotations

import concurrent.futures
import socket
import struct
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputopo.export.cache import ScanCache
from gputopo.export.server import make_server, parse_listen
from gputopo.export.sources import history_reader, scan_findings_of
from gputopo.sim.description import load_description
from gputopo.sim.scan import scan_description
from helpers.cli import gputopo_here


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams, name):
    return [s for s in fams[name].samples if s.name.startswith(name)]


class CountingScanner:
    """Scans a simulated machine; remembers how many scans ran and the most at once."""

    def __init__(self, desc_name="seed-8gpu", delay_s=0.0, **fake):
        self.desc = load_description(desc_name)
        self.fake, self.delay_s = fake, delay_s
        self.calls = self.active = self.most_at_once = 0
        self._lock = threading.Lock()

    def __call__(self):
        with self._lock:
            self.calls += 1
            self.active += 1
            self.most_at_once = max(self.most_at_once, self.active)
        try:
            time.sleep(self.delay_s)
            return scan_description(self.desc, **self.fake)
        finally:
            with self._lock:
                self.active -= 1


@pytest.fixture
def serve():
    servers = []

    def start(scanner, interval_s=60.0, history=None):
        cache = ScanCache(scanner, scan_findings_of, history_reader(history), interval_s)
        srv = make_server(cache, "127.0.0.1", 0)
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        t.start()
        servers.append((srv, t))
        return f"http://127.0.0.1:{srv.server_address[1]}", srv

    yield start
    for srv, t in servers:
        srv.shutdown()
        srv.server_close()
        t.join(10)


def get(url, timeout=60):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def test_metrics_over_http_parse_with_help_type_and_the_expected_names(serve, tmp_path):
    desc = tmp_path / "errs.toml"
    desc.write_text('extends = "seed-8gpu"\nname = "errs"\n[defaults]\nnvlink_errors = { "2" = { crc_flit = 7 } }\n')
    url, _srv = serve(CountingScanner(str(desc)))
    status, ctype, text = get(url + "/metrics")
    assert status == 200 and ctype.startswith("text/plain")
    assert "# HELP gputopo_nvlink_errors_total" in text and "# TYPE gputopo_nvlink_errors_total counter" in text
    fams = families(text)
    errs = {(s.labels["gpu"], s.labels["link"], s.labels["counter"]): s.value
            for s in samples(fams, "gputopo_nvlink_errors")}
    assert fams["gputopo_nvlink_errors"].type == "counter"
    assert errs[("3", "2", "crc_flit")] == 7 and errs[("3", "1", "crc_flit")] == 0
    assert fams["gputopo_simulated"].samples[0].value == 1
    active = {s.labels["gpu"]: s.value for s in samples(fams, "gputopo_nvlinks_active")}
    assert len(active) == 8 and set(active.values()) == {4.0}  # NV4 pairs
    classes = {(s.labels["gpu_a"], s.labels["gpu_b"]): s.labels["link_class"]
               for s in samples(fams, "gputopo_pair_link_class_info")}
    assert len(classes) == 28 and classes[("5", "6")] == "NODE" and classes[("6", "7")] == "NV4"
    width = {(s.labels["gpu"], s.labels["state"]): s.value for s in samples(fams, "gputopo_pcie_link_width_lanes")}
    assert width[("0", "max")] == 16
    kinds = {s.labels["kind"] for s in samples(fams, "gputopo_findings")}
    assert {"iommu", "acs", "link-errors"} <= kinds
    for name in ("gputopo_temperature_celsius", "gputopo_power_watts", "gputopo_last_scan_timestamp_seconds",
                 "gputopo_scan_errors", "gputopo_gpu_info", "gputopo_pcie_replays", "gputopo_xid_events"):
        assert name in fams, name
    assert samples(fams, "gputopo_scan_errors")[0].value == 0


def test_a_bad_path_is_404_and_the_server_keeps_serving(serve):
    url, _srv = serve(CountingScanner())
    with pytest.raises(urllib.error.HTTPError) as e:
        get(url + "/metricz")
    assert e.value.code == 404
    assert get(url + "/metrics")[0] == 200


def test_fifty_concurrent_scrapes_share_one_scan(serve):
    scanner = CountingScanner(delay_s=0.3)
    url, _srv = serve(scanner, interval_s=60.0)
    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(lambda _k: get(url + "/metrics", timeout=120), range(50), timeout=180))
    assert all(status == 200 for status, _c, _t in results)
    assert scanner.calls == 1 and scanner.most_at_once == 1
    scans = {samples(families(t), "gputopo_scans")[0].value for _s, _c, t in results}
    assert scans == {1.0}  # every scrape served the one scan


def test_with_no_interval_scans_never_overlap(serve):
    scanner = CountingScanner(delay_s=0.05)
    url, _srv = serve(scanner, interval_s=0.0)
    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        list(pool.map(lambda _k: get(url + "/metrics", timeout=120), range(20), timeout=180))
    assert scanner.most_at_once == 1 and 1 <= scanner.calls <= 20


def test_a_client_that_goes_away_mid_answer_costs_nothing(serve):
    url, srv = serve(CountingScanner())
    port = srv.server_address[1]
    for _k in range(5):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(16).startswith(b"HTTP/1.")  # the answer started...
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # ...and the client resets the connection
    half = socket.create_connection(("127.0.0.1", port), timeout=30)
    half.sendall(b"GET /met")  # a request cut short
    half.close()
    assert get(url + "/metrics")[0] == 200


def test_an_nvml_error_on_one_gpu_leaves_the_rest_and_counts(serve):
    url, _srv = serve(CountingScanner(lost=[3], errors={("nvmlDeviceGetTemperature", 5): 999}))
    fams = families(get(url + "/metrics")[2])
    lost = {s.labels["gpu"]: s.value for s in samples(fams, "gputopo_gpu_lost")}
    assert lost["3"] == 1 and sum(lost.values()) == 1
    active = {s.labels["gpu"] for s in samples(fams, "gputopo_nvlinks_active")}
    assert active == {"0", "1", "2", "4", "5", "6", "7"}
    temps = {s.labels["gpu"] for s in samples(fams, "gputopo_temperature_celsius")}
    assert "5" not in temps and "4" in temps
    assert samples(fams, "gputopo_scan_errors")[0].value >= 2


def test_a_scan_that_fails_whole_keeps_the_last_result():
    good = CountingScanner()
    state = {"fail": False}

    def scan():
        if state["fail"]:
            raise RuntimeError("driver went away")
        return good()

    clock = [1000.0]
    cache = ScanCache(scan, scan_findings_of, history_reader(None), 10.0, clock=lambda: clock[0])
    first = cache.current()
    state["fail"] = True
    clock[0] += 5
    assert cache.current() is first  # inside the interval: no scan
    clock[0] += 10
    snap = cache.current()
    assert snap.topology is first.topology and snap.scan_errors == 1
    assert "driver went away" in (snap.last_error or "")


def test_pair_figures_and_last_run_come_from_the_history(serve, tmp_path):
    from gputopo.history.record import Figure, RunRecord, machine_identity
    from gputopo.recording import save

    scanner = CountingScanner()
    topo = scanner()
    db = tmp_path / "h.sqlite"
    save(db, machine_identity(topo, "seed-8gpu"), RunRecord(
        "bench", 1_790_000_000.0, "sim-clock", [], "/r", True, "seed-8gpu", "sim", "complete", "ok", 0,
        "t", [Figure((5, 6), "NODE", "p2p.copy", "5->6", 1 << 26, 21.5, "algbw", 3, "modeled", True)]))
    url, _srv = serve(scanner, history=db)
    fams = families(get(url + "/metrics")[2])
    (bw,) = samples(fams, "gputopo_pair_bandwidth_bytes_per_second")
    assert bw.labels == {"gpu_a": "5", "gpu_b": "6", "link_class": "NODE", "series": "p2p.copy",
                         "direction": "5->6"} and bw.value == pytest.approx(21.5e9)
    assert samples(fams, "gputopo_pair_wrong_elements")[0].value == 3
    assert samples(fams, "gputopo_last_run_timestamp_seconds")[0].value == 1_790_000_000.0


def test_textfile_is_written_whole_and_parses(tmp_path):
    out = tmp_path / "textfile"
    code, _stdout, err = gputopo_here("export", "--sim", "seed-8gpu", "--textfile", str(out))
    assert code == 0, err
    assert [p.name for p in out.iterdir()] == ["gputopo.prom"]  # no temporary file left
    fams = families((out / "gputopo.prom").read_text())
    assert len(samples(fams, "gputopo_gpu_info")) == 8 and "gputopo_nvlink_errors" in fams


def test_a_second_exporter_on_the_same_port_is_one_line_and_exit_2(serve):
    _url, srv = serve(CountingScanner())
    code, _out, err = gputopo_here("export", "--sim", "seed-8gpu", "--listen",
                                   f"127.0.0.1:{srv.server_address[1]}")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "in use" in lines[0] and "Traceback" not in err


def test_listen_is_loopback_unless_an_address_is_given_and_options_are_checked():
    assert parse_listen(":9400") == ("127.0.0.1", 9400)
    assert parse_listen("0.0.0.0:9100") == ("0.0.0.0", 9100)
    assert parse_listen("[::1]:9400") == ("::1", 9400)
    for args in (["export"], ["export", "--listen", "nohost"], ["export", "--listen", ":1", "--textfile", "x"]):
        code, _o, err = gputopo_here(*args)
        assert code == 2 and len(err.strip().splitlines()) == 1, (args, err)


def test_no_driver_is_exit_3_before_serving(monkeypatch):
    """Without --sim on a machine with no NVIDIA driver the first scan fails: exit 3, one line."""
    from click.testing import CliRunner

    from gputopo.cli.main import _register, cli
    from gputopo.errors import NoHardwareError
    from gputopo.export import sources

    _register()

    def no_driver():
        raise NoHardwareError("no NVIDIA driver (NVML library not found)")

    monkeypatch.setattr(sources, "scanner", lambda sim: no_driver)
    r = CliRunner().invoke(cli, ["export", "--listen", "127.0.0.1:0"])
    assert isinstance(r.exception, NoHardwareError) and r.exception.exit_code == 3


@pytest.mark.parametrize("args, says", [
    (["--textfile", "OUT", "--interval", "nan"], "'nan' is not a finite number"),
    (["--listen", "127.0.0.1:0", "--interval", "inf"], "'inf' is not a finite number"),
    (["--textfile", "OUT", "--interval", "5"], "--interval is ignored with --textfile"),
])
def test_interval_must_be_finite_and_used(tmp_path, args, says):
    """The sweep found --interval nan/inf accepted (exit 0): NaN passes every range check."""
    args = [str(tmp_path / "prom") if a == "OUT" else a for a in args]
    code, out, err = gputopo_here("export", "--sim", "seed-8gpu", *args, timeout=60)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / "prom").exists()
