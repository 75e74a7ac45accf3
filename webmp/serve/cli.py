"""`webmp serve`: its flags, the token it requires, binding the socket, the URL it prints, and serving
until Ctrl-C (uvicorn); the app itself is webmp/serve/app.py's. `LocalServer`
(webmp/serve/client.py) binds and serves the same way in a thread.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import signal
import socket
import sys
from typing import Any

from fastapi import FastAPI

from ..resources import UPLOT_DIR
from .app import create_app
from .security import LOOPBACK_NAMES, host_name

WS_PROTOCOL_MAX_BYTES = 4 * 2**20  # frames above this are cut by uvicorn itself (connection closed)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def page_url(host: str, port: int, token: str | None) -> str:
    if host in ("0.0.0.0", "::"):  # every interface: name this machine
        host = socket.gethostname()
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def server_token(host: str, allow_remote: bool, token: str | None) -> str | None:
    """The token to require: None on loopback unless one is given; remote binding needs allow_remote."""
    if is_loopback(host):
        return token
    if not allow_remote:
        raise ValueError(
            f"refusing to bind {host}: it is reachable from other machines. Pass --allow-remote "
            "(a token is then required by the API and the page) or bind 127.0.0.1"
        )
    return token or os.environ.get("WEBMP_TOKEN") or secrets.token_urlsafe(24)


def bind_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    return sock


def make_server(app: FastAPI):
    import uvicorn

    return uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_max_size=WS_PROTOCOL_MAX_BYTES))


def port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is a number from 0 to 65535, got {text!r}")
    return port


def serve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="webmp serve",
        description="Serve the browser runtime: the page trains "
        "on navigator.gpu and streams its records to this server",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, this machine only)"
    )
    p.add_argument("--port", type=port_number, default=8000, help="TCP port (default 8000; 0: any free one)")
    p.add_argument("--runs", default="runs", help="directory holding the run directories (default runs/)")
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow binding an address other machines can reach; requires a token",
    )
    p.add_argument(
        "--token",
        default=None,
        help="token the API and page must present (default: none on loopback; generated, or "
        "$WEBMP_TOKEN, with --allow-remote)",
    )
    return p


def announce(args: argparse.Namespace, port: int, token: str | None) -> None:
    """The URL of the page (with the token, once) and, bound beyond this machine, how to reach it."""
    print(
        f"webmp: serving the browser runtime at {page_url(args.host, port, token)}  (runs in {args.runs}/)",
        flush=True,
    )
    if not is_loopback(args.host):
        print(
            "webmp: note: browsers only expose WebGPU to secure contexts (https or localhost); from "
            "another machine, forward the port (ssh -L 8000:localhost:8000 ...) or put the server "
            "behind https",
            flush=True,
        )


def run_until_interrupted(server: Any, sock: socket.socket, on_start: Any) -> bool:
    """Serve on `sock` (after `on_start()`) until the server exits; whether Ctrl-C ended it.

    Ctrl-C at any moment asks the server to stop. uvicorn has its own handler only while it serves
    (and raises the signal again once it has shut down); before that, Python's default handler
    would raise KeyboardInterrupt wherever the start-up happens to be, and inside asyncio's runner
    that can be swallowed, leaving a server that never started shutting down."""
    interrupted: list[int] = []

    def on_sigint(signum: int, frame: Any) -> None:
        interrupted.append(signum)
        server.should_exit = True

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        on_start()
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        interrupted.append(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, previous)
    return bool(interrupted)


def cli_serve(argv: list[str]) -> int:
    args = serve_parser().parse_args(argv)
    try:
        token = server_token(args.host, args.allow_remote, args.token)
    except ValueError as e:
        print(f"webmp serve: {e}", file=sys.stderr)
        return 2
    wildcard = args.host in ("0.0.0.0", "::")
    # a wildcard bind has no one name: any Host, the (then required) token guards
    hosts = None if wildcard else LOOPBACK_NAMES | {host_name(args.host)}
    app = create_app(args.runs, token, hosts)
    if not UPLOT_DIR.is_dir():
        print(
            "webmp serve: web/node_modules/uplot is missing, so the page draws no charts; run "
            "`npm ci --prefix web`",
            file=sys.stderr,
        )
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as e:
        print(f"webmp serve: cannot bind {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    port = sock.getsockname()[1]
    if run_until_interrupted(make_server(app), sock, lambda: announce(args, port, token)):
        # Ctrl-C is how a server is ended, not a failure: status 0, as `python -m http.server`
        print("webmp serve: stopped (Ctrl-C)", file=sys.stderr, flush=True)
    return 0
