"""glm5lib.http against a real HTTP server on loopback."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from glm5lib import http
from glm5lib.masking import MASK


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_GET(self):
        routes = self.server.routes  # type: ignore[attr-defined]
        if self.path == "/auth":
            ok = self.headers.get("Authorization") == "Bearer k3y-value"
            self._send(200 if ok else 401, b'{"ok": true}' if ok else b"no")
            return
        status, body = routes.get(self.path, (404, b"not found"))
        self._send(status, body)

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(routes):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.routes = routes  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def server():
    srv = _serve({
        "/get_server_info": (404, b""),
        "/server_info": (200, json.dumps({"api_key": "abc", "max_running_requests": 64}).encode()),
        "/health": (200, b""),
        "/broken": (200, b"{not json"),
        "/boom": (500, b"Internal Server Error"),
    })
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_get_statuses_and_bodies(server):
    assert http.get(server, "/health").ok
    boom = http.get(server + "/", "boom")
    assert boom.status == 500 and boom.body == b"Internal Server Error" and boom.reached
    assert "HTTP 500" in boom.describe()
    assert http.get(server, "/auth", api_key="k3y-value").ok
    assert http.get(server, "/auth", api_key="wrong").status == 401


def test_unreachable_is_status_zero_with_a_reason():
    from glm5lib.server import find_free_port
    response = http.get(f"http://127.0.0.1:{find_free_port()}", "/health", timeout=2)
    assert response.status == 0 and not response.reached and response.error
    assert "could not be reached" in response.describe()


def test_get_json_and_server_info_fallback_masks(server):
    assert http.get_json(server, "/broken") is None
    assert http.get_json(server, "/boom") is None
    info = http.server_info(server)
    assert info == {"api_key": MASK, "max_running_requests": 64}


def test_server_info_empty_when_neither_path_answers(server):
    assert http.server_info(server + "/nothing-here") == {}
