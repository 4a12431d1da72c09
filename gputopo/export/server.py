"""`gputopo export --listen HOST:PORT`: /metrics over HTTP for Prometheus.

A small threading HTTP server (not prometheus_client's, which serves metrics on every path):
GET /metrics answers the text format, anything else 404. A client that goes away mid-answer
costs its own thread only; each connection has a timeout so a stalled one cannot pile up.
"""

from __future__ import annotations

import errno
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from gputopo.errors import UsageError

from .families import GputopoCollector

#: Seconds a connection may stay silent (reading the request or taking the answer).
CONNECTION_TIMEOUT_S = 30.0
_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout)


def parse_listen(text: str) -> tuple[str, int]:
    """``127.0.0.1:9400``, ``[::1]:9400`` or ``:9400`` (loopback) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"--listen {text!r}: give HOST:PORT, e.g. 127.0.0.1:9400")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if isinstance(sys.exc_info()[1], _GONE):
            return  # the scraper went away: nothing to report
        super().handle_error(request, client_address)


def make_server(cache, host: str = "127.0.0.1", port: int = 9400) -> ThreadingHTTPServer:
    """Bind (UsageError, one line, when the address is taken or not ours) and return the server;
    the caller runs ``serve_forever()`` and ``shutdown()``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GputopoCollector(cache))

    class Handler(BaseHTTPRequestHandler):
        timeout = CONNECTION_TIMEOUT_S

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._send(404, b"not found: gputopo serves /metrics\n", "text/plain; charset=utf-8")
                return
            self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            try:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except _GONE:
                self.close_connection = True

        def log_message(self, format, *args) -> None:
            pass

    server_cls = type("Server", (_Server,), {"address_family": socket.AF_INET6 if ":" in host
                                             else socket.AF_INET})
    try:
        return server_cls((host, port), Handler)
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise UsageError(f"--listen {host}:{port}: the address is in use (another exporter "
                             "already serves it?); choose another port") from None
        raise UsageError(f"--listen {host}:{port}: cannot listen there ({e.strerror or e})") from None
