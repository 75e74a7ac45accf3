"""The two WebSocket protocols (webmp/serve/messages.py says their messages):

  WS /api/runs/{id}/ws      the training page: its hello, records and summary, each answered with an
                            ack or an error; one page per run trains; a socket sending faster than
                            the rate limits allow (webmp/serve/security.py) is closed with code 4429
  WS /api/runs/{id}/follow  a viewer: the records so far, then the new ones and status changes as
                            they come (any number of viewers per run)

Both close a socket without the token, from another site or naming another Host with 4401
before accepting it; an unknown run is 4404, and a run that cannot be trained here (a native
one, or one a page trains already) 4409.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from .api import api_router
from .errors import PageRunError
from .messages import MAX_MESSAGE_BYTES, json_safe, parse_page_message
from .native_runs import NativeRun
from .runs import PageRun
from .security import WS_RATE_CLOSE, RateLimit, socket_refused
from .store import RunStore

FOLLOW_CHUNK = 500  # records per message to a follower (the backlog goes in chunks of this)
FOLLOW_IDLE_S = 15.0  # a follower's loop looks at the run at least this often

router = api_router()


def _error_text(err: ValidationError, limit: int = 3) -> str:
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:limit]]
    more = len(err.errors()) - limit
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


async def reply_to(run: PageRun, text: str | None) -> dict[str, Any]:
    """The answer to one WebSocket frame: an ack, or an error (the message is then dropped)."""
    if text is None:
        return {"type": "error", "message": "only JSON text messages are accepted"}
    if len(text.encode()) > MAX_MESSAGE_BYTES:
        return {"type": "error", "message": f"message over {MAX_MESSAGE_BYTES} bytes dropped"}
    try:
        msg = parse_page_message(json.loads(text))
    except ValidationError as e:
        return {"type": "error", "message": f"message dropped: {_error_text(e)}"}
    except ValueError as e:
        return {"type": "error", "message": f"message dropped: invalid JSON ({e})"}
    except RecursionError:
        return {"type": "error", "message": "message dropped: JSON nested too deeply"}
    try:
        return await run.handle(msg)
    except PageRunError as e:
        return {"type": "error", "message": str(e)}


@router.websocket("/runs/{run_id}/ws")
async def run_socket(ws: WebSocket, run_id: str) -> None:
    if socket_refused(ws):
        await ws.close(code=4401)  # a missing token, a page of another site, or another Host
        return
    store: RunStore = ws.app.state.store
    try:
        run: PageRun | None = store.get(run_id)
        why = f"run {run_id} already has a page connected"  # when it has
    except PageRunError as e:  # an unknown run, or a native one
        run, why = None, str(e)
    await ws.accept()
    if run is None or run.connected:
        await ws.send_json({"type": "error", "message": why})
        await ws.close(code=4404 if run_id not in store.native and run is None else 4409)
        return
    run.connected = True
    run.notify()  # followers of a created run learn that a page is preparing it
    limit = RateLimit()
    try:
        await ws.send_json(
            {"type": "welcome", "run_id": run.id, "status": run.status, "last_step": run.last_step}
        )
        while True:
            frame = await ws.receive()
            if frame["type"] == "websocket.disconnect":
                break
            text, data = frame.get("text"), frame.get("bytes")
            over = limit.take(len(text.encode()) if text is not None else len(data or b""))
            if over:
                await ws.close(code=WS_RATE_CLOSE, reason=over)
                break
            await ws.send_json(await reply_to(run, text))
            await asyncio.sleep(0)  # let other requests run between frames of a busy socket
    except WebSocketDisconnect:
        pass
    finally:
        run.disconnected()


@router.websocket("/runs/{run_id}/follow")
async def follow_run(ws: WebSocket, run_id: str) -> None:
    """A viewer of a run (any number per run, browser or native): the records so far, then each new
    batch as the training page posts it, and the run's status when it changes; closed after an ended
    run's status (finished, failed, stopped). A disconnected run stays followed: when a page resumes
    it, the viewer gets {"type": "resumed", "step": its checkpoint's} and the records again from
    the first (the resume dropped those after the checkpoint). Nothing is queued per follower: each
    sends what the run holds past the last record it sent, so a slow follower catches up in bigger
    messages and never holds back the trainer."""
    if socket_refused(ws):
        await ws.close(code=4401)
        return
    store: RunStore = ws.app.state.store
    await ws.accept()
    try:
        run = store.view(run_id)
    except PageRunError as e:
        await ws.send_json({"type": "error", "message": str(e)})
        await ws.close(code=4404)
        return
    await Follower(ws, run).follow()


class Follower:
    """One viewer's socket and what it was sent: the step of the last record, the last status."""

    def __init__(self, ws: WebSocket, run: PageRun | NativeRun):
        self.ws, self.run = ws, run
        self.sent_step = -1
        self.sent_status: tuple[Any, ...] | None = None
        self.starts = run.starts

    async def follow(self) -> None:
        """Send what is new whenever the run changes (or every FOLLOW_IDLE_S), until the run has
        ended or the viewer leaves."""
        closed = asyncio.ensure_future(self.ws.receive())  # the viewer leaving (it sends nothing else)
        changed: asyncio.Future[None] | None = None
        try:
            while True:
                changed = asyncio.ensure_future(self.run.wait_changed(FOLLOW_IDLE_S))  # a change from now on
                await self.send_records()
                if not await self.send_status():
                    await self.ws.close(code=1000)
                    break
                await asyncio.wait({changed, closed}, return_when=asyncio.FIRST_COMPLETED)
                if closed.done():
                    break
        except (WebSocketDisconnect, RuntimeError):  # the viewer left while a message was on its way
            pass
        finally:
            closed.cancel()
            if changed is not None:
                changed.cancel()

    async def send_records(self) -> None:
        """The records past the last one sent, in chunks of FOLLOW_CHUNK; after a resume, all again."""
        if self.run.starts != self.starts:  # a page (re)started the run
            self.starts, resumed = self.run.starts, self.sent_step >= 0
            if resumed:  # its records after the checkpoint were dropped: all again
                self.sent_step = -1
                step = getattr(self.run, "checkpoint_step", None) or 0
                await self.ws.send_json({"type": "resumed", "step": step})
        records = self.run.records  # only grows between starts
        new = len(records)
        while new > 0 and records[new - 1]["step"] > self.sent_step:
            new -= 1
        for i in range(new, len(records), FOLLOW_CHUNK):
            chunk = records[i : i + FOLLOW_CHUNK]
            message = {"type": "records", "records": chunk}
            await self.ws.send_text(json.dumps(json_safe(message)))
            self.sent_step = int(chunk[-1]["step"])

    async def send_status(self) -> bool:
        """The run's status when it changed since the last sent; whether the run is still live
        (created or running)."""
        run = self.run
        connected = run.kind == "native" or run.connected
        status = (run.status, run.message, run.stop_requested, connected)
        if status != self.sent_status:
            await self.ws.send_json(
                {
                    "type": "status",
                    "status": status[0],
                    "message": status[1],
                    "last_step": run.last_step,
                    "stop_requested": status[2],
                    "connected": connected,
                }
            )
            self.sent_status = status
        return status[0] in ("created", "running", "disconnected")
