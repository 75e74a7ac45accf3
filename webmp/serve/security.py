"""Who may talk to the server, and how much: the Host/Origin/token policy, body limits and the run
socket's rate limits.

Binding anything but loopback needs --allow-remote and a token that the API and the WebSocket
must present: `Authorization: Bearer <token>`, or a cookie. The URL `webmp serve` prints carries the
token once (as Jupyter's does); opening it answers with a redirect to the same URL without it and
sets the cookie (HttpOnly, SameSite=Strict), so the token travels in no URL after that.
Every request is checked first (request_refusal):
its Host must be one of the server's names (loopback, or the address bound; a page of another
site whose name was re-pointed at 127.0.0.1 cannot talk to it), its Origin, when sent, the
server's own, and a POST body JSON of at most 1 MiB (413 before reading a longer one).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

from fastapi import HTTPException, Request, WebSocket
from fastapi.responses import JSONResponse, RedirectResponse, Response

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_JSON_BODY = 1 << 20  # a TrainConfig is a few hundred bytes; POST bodies above this get 413
# A page's data upload (PUT /api/data) is read whole into memory and checked; 32 MiB of text is 32 M
# characters, whose token ids (4 bytes each) still fit WebGPU's default 128 MiB binding.
MAX_UPLOAD_BYTES = 32 << 20
TOKEN_COOKIE = "webmp_token"
# What one page's socket may send (token buckets: a burst, refilled at a rate). A page sends a hello,
# one records message per log interval (a readback of the GPU's metrics ring, a few ms at least, so
# rarely more than ~100 a second even with log_every 1), a summary or an end, and after a resume
# its backlog in chunks of at most MAX_MESSAGE_BYTES; these allow several times that. A socket over
# either is closed with WS_RATE_CLOSE: one client flooding would otherwise take the server's time.
WS_MESSAGES_PER_S, WS_MESSAGE_BURST = 200.0, 1000.0
WS_BYTES_PER_S, WS_BYTES_BURST = 4.0 * 2**20, 16.0 * 2**20
WS_RATE_CLOSE = 4429  # "too many requests", in the application's range of close codes


def host_name(netloc: str) -> str:
    """The host of a Host header or an Origin's netloc, lowercased, without port or brackets."""
    return (urlsplit(f"//{netloc}").hostname or "").lower()


def request_refusal(
    method: str, headers: Any, allowed_hosts: frozenset[str] | None
) -> tuple[int, str] | None:
    """(status, one line) when a request must be refused before any route runs, else None.

    - Host must name this server (allowed_hosts; None: any, for a wildcard bind, where the token
      guards): a page of another site whose name was re-pointed at 127.0.0.1 (DNS rebinding)
      sends its own name.
    - Origin, when sent, must be this server's own (same host and port as Host): a page of another
      site may send requests but not read their answers, and must not change anything.
    - POST bodies must be JSON (a cross-site form or text/plain POST needs no preflight) and at
      most MAX_JSON_BODY bytes (Content-Length, refused before the body is read)."""
    host = headers.get("host", "")
    if allowed_hosts is not None and host_name(host) not in allowed_hosts:
        shown = host_name(host) or "(none)"
        return 403, f"Host {shown!r} is not this server's name (a guard against DNS rebinding)"
    origin = headers.get("origin")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc.lower() != host.lower()):
        return 403, f"requests from another site ({origin}) are refused"
    if method == "POST":
        ctype = headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return 415, f"POST bodies must be application/json, got {ctype or 'no content type'}"
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_JSON_BODY):
            return 413, f"POST bodies are at most {MAX_JSON_BODY} bytes"
    return None


def given_token(headers: Any, cookies: Any) -> str | None:
    """The token a request presents: `Authorization: Bearer`, or the cookie the page got when it
    was opened with ?token= (never a query string: URLs end up in logs and histories)."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return str(auth[7:])
    cookie = cookies.get(TOKEN_COOKIE)
    return str(cookie) if cookie is not None else None


def token_ok(token: str | None, given: str | None) -> bool:
    return token is None or (given is not None and secrets.compare_digest(given.encode(), token.encode()))


Handler = Callable[[Request], Awaitable[Response]]


def request_guard(
    token: str | None, hosts: frozenset[str] | None
) -> Callable[[Request, Handler], Awaitable[Response]]:
    """The app's HTTP middleware: request_refusal's answer; the page's URL with ?token= made a
    cookie (a redirect without it); 401 for an /api request without the token."""

    async def guard(request: Request, call_next: Handler) -> Response:
        refusal = request_refusal(request.method, request.headers, hosts)
        if refusal is not None:
            return JSONResponse({"detail": refusal[1]}, status_code=refusal[0])
        if token is not None and "token" in request.query_params and not request.url.path.startswith("/api/"):
            # the page's URL as `webmp serve` printed it: the token becomes a cookie and leaves the URL
            if not token_ok(token, request.query_params["token"]):
                return JSONResponse({"detail": "wrong token in the URL"}, status_code=401)
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            target = request.url.path + ("?" + urlencode(rest) if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/")
            return response
        if request.url.path.startswith("/api/") and token is not None:
            given = given_token(request.headers, request.cookies)
            if not token_ok(token, given):
                return JSONResponse(
                    {"detail": "a valid token is required (Authorization: Bearer <token>)"}, status_code=401
                )
        return await call_next(request)

    return guard


def socket_refused(ws: WebSocket) -> bool:
    """A socket without the token, from a page of another site or naming another Host (the HTTP
    middleware does not see WebSockets): closed with 4401 before it is accepted."""
    refused = request_refusal("GET", ws.headers, ws.app.state.hosts)
    return not token_ok(ws.app.state.token, given_token(ws.headers, ws.cookies)) or refused is not None


async def read_body(request: Request, limit: int, too_long: str) -> bytes:
    """A request's body, refused with 413 (`too_long`) once it passes `limit` bytes: a body without
    Content-Length (or a wrong one) is cut as it streams in."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(413, too_long)
    return bytes(body)


class RateLimit:
    """Token buckets for one socket: WS_MESSAGE_BURST messages refilled at WS_MESSAGES_PER_S, and
    WS_BYTES_BURST bytes at WS_BYTES_PER_S."""

    def __init__(self, clock: Any = time.monotonic):
        self.clock = clock
        self.last = clock()
        self.messages, self.bytes = WS_MESSAGE_BURST, WS_BYTES_BURST

    def take(self, nbytes: int) -> str | None:
        """Spend one message of nbytes; None, or the reason (a close reason, under 123 bytes) when
        the socket has gone over a limit."""
        now = self.clock()
        elapsed, self.last = now - self.last, now
        self.messages = min(WS_MESSAGE_BURST, self.messages + elapsed * WS_MESSAGES_PER_S) - 1
        self.bytes = min(WS_BYTES_BURST, self.bytes + elapsed * WS_BYTES_PER_S) - nbytes
        if self.messages < 0:
            return f"over {WS_MESSAGES_PER_S:g} messages/s (burst {WS_MESSAGE_BURST:g})"
        if self.bytes < 0:
            return f"over {WS_BYTES_PER_S / 2**20:g} MiB/s (burst {WS_BYTES_BURST / 2**20:g} MiB)"
        return None
