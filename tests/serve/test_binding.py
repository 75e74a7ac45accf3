"""Binding and the token: loopback unless --allow-remote with a token, the token on the API and the
WebSocket (a cookie, never a query string), Host and Origin refusals, body limits, and `webmp
serve` itself in a subprocess (the URL it prints, Ctrl-C)."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys

import pytest
from starlette.websockets import WebSocketDisconnect

from tests.serve.helpers import (
    BASE,
    SMALL,
    create,
    receive_json,
    serving,
)
from webmp.serve.app import create_app
from webmp.serve.cli import cli_serve, server_token
from webmp.serve.security import MAX_JSON_BODY, request_refusal


def test_binding_elsewhere_needs_the_flag_and_a_token(capsys):
    assert server_token("127.0.0.1", False, None) is None
    assert server_token("::1", False, None) is None
    with pytest.raises(ValueError, match="--allow-remote"):
        server_token("0.0.0.0", False, None)
    assert cli_serve(["--host", "0.0.0.0", "--port", "0"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    generated = server_token("0.0.0.0", True, None)
    assert generated and len(generated) >= 24 and generated != server_token("0.0.0.0", True, None)
    assert server_token("192.168.1.5", True, "given") == "given"


def test_token_is_required_by_api_and_websocket(tmp_path):
    """The API and the WebSocket take the token from `Authorization: Bearer` or the page's cookie,
    never from a query string (URLs end up in logs); the page's URL with ?token= is answered with a
    redirect to the same URL without it, setting the cookie (Jupyter's model)."""
    with serving(create_app(tmp_path, token="s3cret-token")) as c:
        assert c.get("/").status_code == 200  # the page itself is public
        assert c.get("/api/runs").status_code == 401
        assert c.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/api/runs", json=SMALL).status_code == 401
        ok = {"Authorization": "Bearer s3cret-token"}
        run_id = c.post("/api/runs", json=SMALL, headers=ok).json()["id"]
        plan = f"/api/runs/{run_id}/plan"
        assert c.get(plan, params={"f16": "emulated"}).status_code == 401
        assert c.get(plan, params={"f16": "emulated", "token": "s3cret-token"}).status_code == 401
        assert c.get(plan, params={"f16": "emulated"}, headers=ok).status_code == 200
        for query, headers in (
            ("", {}),
            ("?token=s3cret-token", {}),
            ("", {"Authorization": "Bearer wrong"}),
        ):
            with pytest.raises(WebSocketDisconnect) as e:
                with c.websocket_connect(
                    f"ws://127.0.0.1/api/runs/{run_id}/ws{query}", headers=headers
                ) as ws:
                    receive_json(ws)
            assert e.value.code == 4401
        with c.websocket_connect(f"ws://127.0.0.1/api/runs/{run_id}/ws", headers=ok) as ws:
            assert receive_json(ws)["type"] == "welcome"
        # the printed URL: a wrong token is refused; the right one becomes a cookie and leaves the URL
        assert c.get("/?token=wrong", follow_redirects=False).status_code == 401
        r = c.get(f"/?run={run_id}&token=s3cret-token", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == f"/?run={run_id}"
        cookie = r.headers["set-cookie"]
        assert "webmp_token=s3cret-token" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    with serving(create_app(tmp_path, token="s3cret-token")) as c:
        c.cookies.set("webmp_token", "s3cret-token")
        assert c.get(plan, params={"f16": "emulated"}).status_code == 200
        with c.websocket_connect(f"ws://127.0.0.1/api/runs/{run_id}/ws") as ws:
            assert receive_json(ws)["type"] == "welcome"


def test_websocket_from_another_site_or_host_is_refused(client):
    """Origin must be this server's own (not just equal to a Host the attacker also chooses), and
    Host one of its names (DNS rebinding)."""
    run_id = create(client)["id"]
    for url, origin in (
        (f"ws://127.0.0.1/api/runs/{run_id}/ws", "http://evil.example"),
        (f"ws://evil.example/api/runs/{run_id}/ws", "http://evil.example"),  # rebinding: both agree
        (f"ws://evil.example/api/runs/{run_id}/ws", None),
    ):
        with pytest.raises(WebSocketDisconnect) as e:
            with client.websocket_connect(url, headers={"origin": origin} if origin else {}) as ws:
                receive_json(ws)
        assert e.value.code == 4401, (url, origin)
    with client.websocket_connect(f"ws://127.0.0.1/api/runs/{run_id}/ws", headers={"origin": BASE}) as ws:
        assert receive_json(ws)["type"] == "welcome"


def test_dns_rebinding_cross_site_posts_and_big_bodies_are_refused(client):
    """Issue 9 items 2, 3, 5: a Host that is not the server's name gets 403 on every path; a POST
    from another Origin, or not JSON (a form or text/plain needs no CORS preflight), creates
    nothing; a body over MAX_JSON_BODY gets 413 from its Content-Length, before it is read, and
    without one once it passes the limit."""
    before = len(client.get("/api/runs").json())
    for path in ("/api/info", "/api/runs", "/"):
        r = client.get(path, headers={"host": "evil.example"})
        assert r.status_code == 403 and "DNS rebinding" in r.json()["detail"], path
    r = client.post("/api/runs", json={"steps": 5}, headers={"host": "evil.example:8000"})
    assert r.status_code == 403
    r = client.post("/api/runs", json={"steps": 5}, headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and "another site" in r.json()["detail"]
    r = client.post("/api/runs", json={"steps": 5}, headers={"origin": "null"})
    assert r.status_code == 403
    r = client.post("/api/runs", content=b'{"steps": 5}', headers={"content-type": "text/plain"})
    assert r.status_code == 415 and "application/json" in r.json()["detail"]
    big = b'{"steps": 5, "pad": "' + b"x" * MAX_JSON_BODY + b'"}'
    r = client.post("/api/runs", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413

    def chunks():
        yield big

    r = client.post("/api/runs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413  # streamed without Content-Length
    assert len(client.get("/api/runs").json()) == before
    for host in ("127.0.0.1:8000", "localhost", "[::1]:9"):  # the loopback names, any port
        assert client.get("/api/info", headers={"host": host}).status_code == 200, host
    r = client.post("/api/runs", json={"steps": 5}, headers={"origin": BASE})  # the page itself
    assert r.status_code == 201


def test_request_refusal_rules():
    hosts = frozenset({"127.0.0.1", "localhost", "::1", "box.lan"})
    ok = {"host": "box.lan:8000", "origin": "http://box.lan:8000", "content-type": "application/json"}
    assert request_refusal("POST", ok, hosts) is None
    assert request_refusal("GET", {"host": "evil.example"}, None) is None  # wildcard bind: the token guards
    assert request_refusal("GET", {"host": "box.lan:8000", "origin": "http://box.lan:9000"}, hosts)[0] == 403
    assert request_refusal("POST", {**ok, "content-length": "x"}, hosts)[0] == 413
    assert (
        request_refusal("PUT", {"host": "localhost", "content-type": "application/octet-stream"}, hosts)
        is None
    )


def start_serve(tmp_path) -> tuple[subprocess.Popen, str, int]:
    """`webmp serve --port 0` in a subprocess: the process and the host and port of the URL it
    printed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "webmp", "serve", "--port", "0", "--runs", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if "http://127.0.0.1:" not in line:
        proc.kill()
        pytest.fail(f"webmp serve printed {line!r}: {proc.communicate(timeout=10)[1]}")
    host, port = line.split("http://", 1)[1].split()[0].rstrip("/").split(":")
    return proc, host, int(port)


def get_info(host: str, port: int) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", "/api/info")
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_webmp_serve_binds_loopback_and_prints_the_url(tmp_path):
    proc, host, port = start_serve(tmp_path)
    try:
        assert get_info(host, port)[1]["token_required"] is False
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    "wait", [pytest.param(False, marks=pytest.mark.slow), True], ids=["at-once", "serving"]
)
def test_webmp_serve_ends_on_ctrl_c_with_one_line(tmp_path, wait):
    """SIGINT (Ctrl-C), right after the URL is printed or once requests are served: a one-line
    message, no traceback, exit status 0 (ending the server is what Ctrl-C is for)."""
    proc, host, port = start_serve(tmp_path)
    try:
        if wait:
            assert get_info(host, port)[0] == 200
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines()[-1] == "webmp serve: stopped (Ctrl-C)", err
    assert proc.returncode == 0
