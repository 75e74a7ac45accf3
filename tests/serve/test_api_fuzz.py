"""Fuzzing the server: schemathesis against /api/openapi.json (every operation, schema-valid and
schema-violating requests, no 5xx and every answer as the schema documents it), with and without the
token; and hypothesis against the run WebSocket (mutated, arbitrary, non-JSON, binary, deep and
oversized frames, valid messages in odd orders). Derandomized, so the same cases run every time."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anyio
import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.kernels.test_lens import lens_counts
from tests.serve.helpers import BASE, SMALL, hello, records_msg, summary_msg
from webmp.serve.app import create_app
from webmp.serve.messages import MAX_MESSAGE_BYTES
from webmp.serve.security import WS_RATE_CLOSE

TOKEN = "fuzz-token"
# no 5xx, and every answer one the schema documents: its status, content type, headers and body
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_headers_conformance,
    schemathesis.checks.response_schema_conformance,
]
# no shrinking: a failure's curl command (schemathesis prints one) reproduces it, and shrinking a
# hang or a slow request would take minutes
FUZZ = dict(
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def auth(token: str | None) -> dict[str, str]:
    # POST bodies must say application/json (request_refusal); the other methods ignore it
    headers = {"Content-Type": "application/json"}
    return headers | ({"Authorization": f"Bearer {token}"} if token else {})


def known_runs(app, token: str | None) -> list[str]:
    """Two runs the fuzzer's run_id may name besides made-up ones: one just created, one finished
    (hello, records, summary over its socket)."""
    with TestClient(app, base_url=BASE, headers=auth(token)) as client:
        ids = [client.post("/api/runs", json=SMALL).json()["id"] for _ in range(2)]
        with client.websocket_connect(f"ws://127.0.0.1/api/runs/{ids[1]}/ws") as ws:
            assert ws.receive_json()["type"] == "welcome"
            for msg in (hello(ids[1]), records_msg(ids[1], range(30)), summary_msg(ids[1], 30)):
                ws.send_json(msg)
                reply = ws.receive_json()
                assert reply["type"] == "ack", reply
    return ids


def fuzz_api(
    app, token: str | None, headers: dict[str, str], runs: list[str], examples: int, expect=None
) -> Counter:
    """Every operation of the app's schema (fetched with `token`), positive and negative cases sent
    with `headers`, each checked with CHECKS (and its status in `expect`, when given); the
    (operation, status) pairs seen."""
    schema = schemathesis.openapi.from_asgi(
        "/api/openapi.json", app, headers={"Host": "127.0.0.1", **auth(token)}
    )
    operations = [result.ok() for result in schema.get_all_operations()]
    seen: Counter = Counter()
    # `examples` shared out among the operations, so that each is tried whatever the draws
    per_operation = max(8, examples // len(operations))
    for op in operations:
        cases = st.one_of([op.as_strategy(generation_mode=mode) for mode in GenerationMode])

        @settings(max_examples=per_operation, **FUZZ)
        @given(case=cases, run=st.sampled_from([None, *runs]))
        def one(case, run: str | None) -> None:
            if run is not None and case.path_parameters and "run_id" in case.path_parameters:
                case.path_parameters["run_id"] = run
            if isinstance(case.query, dict) and isinstance(case.query.get("wait"), (int, float)):
                # a long poll is meant to wait up to `wait` s (<= 60) for records that never come here
                case.query["wait"] = min(case.query["wait"], 0.01)
            response = case.call(base_url=BASE, headers=headers, timeout=10)
            case.validate_response(response, checks=CHECKS, headers=headers)
            if expect is not None:
                assert response.status_code in expect, (
                    case.operation.label, response.status_code, response.text,
                )  # fmt: skip
            seen[case.operation.label, response.status_code] += 1

        one()
    assert {label for label, _ in seen} == {op.label for op in operations}, "an operation was never tried"
    return seen


def test_api_without_token_never_answers_5xx(tmp_path):
    app = create_app(tmp_path / "runs")
    seen = fuzz_api(app, None, auth(None), known_runs(app, None), examples=400)
    assert any(status == 201 for (label, status) in seen if label == "POST /api/runs"), seen
    assert any(status == 200 for (label, status) in seen if "{run_id}" in label), seen


def test_api_with_token_never_answers_5xx(tmp_path):
    app = create_app(tmp_path / "runs", token=TOKEN)
    seen = fuzz_api(app, TOKEN, auth(TOKEN), known_runs(app, TOKEN), examples=150)
    assert 401 not in {status for _, status in seen}, seen


@pytest.mark.parametrize("given_token", [None, "wrong-token"])
def test_api_refuses_every_request_without_the_token(tmp_path, given_token):
    app = create_app(tmp_path / "runs", token=TOKEN)
    runs = known_runs(app, TOKEN)
    seen = fuzz_api(app, TOKEN, auth(given_token), runs, examples=80, expect={401, 403})
    assert {status for _, status in seen} == {401}, seen


# --- the run WebSocket -----------------------------------------------------------------------------

REPLY_SECONDS = 10.0  # a frame not answered within this fails the test (a hang is a bug, not a wait)
# close codes the socket documents (webmp/serve/sockets.py): 4401 refused, 4404 no such run, 4409 a page
# already connected, 4429 over the rate limit
CLOSE_CODES = {4401, 4404, 4409, WS_RATE_CLOSE}
WEIRD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([-1, 2**32, 2**32 - 1, 2**53 + 1, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),  # json.dumps writes NaN and Infinity literals
    st.sampled_from(["NaN", "Infinity", "-Infinity", "nan", "1", "", "x" * 3000]),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def valid_messages(run_id: str) -> st.SearchStrategy[dict]:
    # often 0: a fresh run only takes a hello from step 0 and records from step 0 on
    step = st.just(0) | st.integers(min_value=0, max_value=40)
    return st.one_of(
        st.builds(hello, st.just(run_id), start_step=step, f16_path=st.sampled_from(["emulated", "native"])),
        st.builds(records_msg, st.just(run_id), st.lists(step, min_size=1, max_size=12)),
        # in order from a step, as a page sends them (steps past the run's 30 refused)
        st.builds(lambda a, n: records_msg(run_id, range(a, a + n)), step, st.integers(1, 12)),
        st.builds(summary_msg, st.just(run_id), step),
        st.builds(lambda n: {"type": "stopped", "run_id": run_id, "step": n}, step),
        st.just({"type": "failed", "run_id": run_id, "message": "device lost"}),
    )


@st.composite
def mutated(draw, run_id: str) -> dict:
    """A valid message with one field changed: a weird value, removed, or an extra key; in a
    records message, possibly a field of its first record; in a summary, of its state."""
    msg = json.loads(json.dumps(draw(valid_messages(run_id))))
    target = msg
    if msg["type"] == "records" and draw(st.booleans()):
        target = msg["records"][0]
    elif msg["type"] == "summary" and draw(st.booleans()):
        target = msg["state"]
    key = draw(st.sampled_from(sorted(target)))
    how = draw(st.sampled_from(["value", "drop", "extra"]))
    if how == "value":
        target[key] = draw(WEIRD)
    elif how == "drop":
        del target[key]
    else:
        target[draw(st.text(min_size=1, max_size=8))] = draw(WEIRD)
    return msg


@st.composite
def lens_messages(draw, run_id: str) -> dict:
    """Records from a step with the lens's counts of the last one, as a page sends a read: counts
    that fit the run's plan, or with a weird step, layer or counter."""
    first, n = draw(st.integers(min_value=0, max_value=40)), draw(st.integers(1, 12))
    lens = {"step": first + n - 1, "counts": lens_counts()}
    how = draw(st.sampled_from(["valid", "step", "layer", "counter"]))
    if how == "step":
        lens["step"] = draw(WEIRD)
    elif how == "layer":
        lens["counts"][draw(st.integers(0, len(lens["counts"]) - 1))] = draw(WEIRD)
    elif how == "counter":
        lens["counts"][0][draw(st.integers(0, len(lens["counts"][0]) - 1))] = draw(WEIRD)
    return {**records_msg(run_id, range(first, first + n)), "histograms": lens}


def frames(run_id: str) -> st.SearchStrategy:
    """One action: a text frame, a binary frame, or "reconnect" (the page leaves and comes back)."""
    deep = st.sampled_from([1_000, 100_000]).map(lambda n: "[" * n + "]" * n)
    big = st.sampled_from([MAX_MESSAGE_BYTES - 200, MAX_MESSAGE_BYTES + 1, 2 * MAX_MESSAGE_BYTES])
    return st.one_of(
        valid_messages(run_id).map(json.dumps),
        mutated(run_id).map(json.dumps),
        JSON.map(json.dumps),
        st.text(max_size=40),
        st.binary(max_size=40),
        deep,
        big.map(lambda n: json.dumps({**records_msg(run_id, [0]), "pad": "x" * n})),
        st.just("reconnect"),
        lens_messages(run_id).map(json.dumps),
    )


def receive(ws) -> dict:
    """The socket's next ASGI message, within REPLY_SECONDS (TestClient's receive has no bound)."""

    async def next_message() -> dict:
        with anyio.fail_after(REPLY_SECONDS):
            return await ws._send_rx.receive()

    return ws.portal.call(next_message)


class Page:
    """A fuzzing page's socket on one run: open() expects the welcome; exchange() sends a frame and
    checks its answer (an ack or an error, or a documented close)."""

    def __init__(self, client: TestClient, run_id: str):
        self.client, self.run_id, self.ws = client, run_id, None

    def open(self) -> None:
        self.ws = self.client.websocket_connect(f"ws://127.0.0.1/api/runs/{self.run_id}/ws")
        self.ws.__enter__()
        message = receive(self.ws)
        assert message["type"] == "websocket.send", message
        assert json.loads(message["text"])["type"] == "welcome", message

    def close(self) -> None:
        if self.ws is not None:
            ws, self.ws = self.ws, None
            ws.__exit__(None, None, None)  # re-raises what the app raised, if anything

    def exchange(self, frame: str | bytes) -> str:
        if self.ws is None:
            self.open()
        assert self.ws is not None
        if isinstance(frame, bytes):
            self.ws.send_bytes(frame)
        else:
            self.ws.send_text(frame)
        message = receive(self.ws)
        if message["type"] == "websocket.close":
            assert message["code"] in CLOSE_CODES, message
            self.close()
            return "closed"
        assert message["type"] == "websocket.send" and "text" in message, message
        reply = json.loads(message["text"])
        assert reply["type"] in ("ack", "error"), reply
        assert reply["type"] == "ack" or reply["message"], reply
        return str(reply["type"])


def strict_json(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def check_run(client: TestClient, run_id: str) -> int:
    """metrics.jsonl is strict JSON with strictly increasing steps, and what the API serves; the
    number of records stored."""
    path = client.app.state.store.get(run_id).dir.path / "metrics.jsonl"
    lines = [strict_json(line) for line in path.read_text().splitlines()] if path.exists() else []
    steps = [r["step"] for r in lines]
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False)), steps
    r = client.get(f"/api/runs/{run_id}/metrics")
    assert r.status_code == 200
    assert strict_json(r.text)["records"] == lines
    assert client.get(f"/api/runs/{run_id}").status_code == 200
    return len(lines)


def play(client, run_id: str, frames: list, kinds: Counter) -> None:
    """A page sending `frames` to the run's socket ("reconnect": close it and open a new one),
    counting the kinds of answer; then the run's stored records are checked (check_run)."""
    page = Page(client, run_id)
    try:
        for frame in frames:
            if frame == "reconnect":
                page.close()
                page.open()
            else:
                kinds[page.exchange(frame)] += 1
    finally:
        page.close()
    kinds["runs with records"] += check_run(client, run_id) > 0


def test_run_socket_survives_fuzzed_frames(tmp_path):
    """Per example a new run and a page sending 1 to 8 fuzzed frames (reconnecting in between at
    times): every frame answered (or the socket closed with a documented code), the app never
    raises, and the run's records on disk stay consistent with the API."""
    with TestClient(create_app(tmp_path / "runs"), base_url=BASE) as client:
        kinds: Counter = Counter()

        @settings(max_examples=150, **FUZZ)
        @given(data=st.data())
        def one(data) -> None:
            run_id = client.post("/api/runs", json=SMALL).json()["id"]
            # half the runs start as a page does (a hello, records 0..2), so the fuzzed frames also
            # meet a run that has stored records
            start = [json.dumps(hello(run_id)), json.dumps(records_msg(run_id, range(3)))]
            prefix = data.draw(st.sampled_from([[], start]))
            play(client, run_id, prefix + data.draw(st.lists(frames(run_id), min_size=1, max_size=8)), kinds)

        one()
        assert client.get("/api/info").status_code == 200
        assert kinds["ack"] and kinds["error"] and kinds["runs with records"], kinds


def test_run_socket_valid_messages_in_any_order(tmp_path):
    """Only well-formed messages, in any order and with reconnects (records before hello, summary
    twice, records after the summary, a hello resuming past the stored steps...): each is acked or
    refused with a reason, and what is stored stays consistent."""
    with TestClient(create_app(tmp_path / "runs"), base_url=BASE) as client:
        kinds: Counter = Counter()

        @settings(max_examples=80, **FUZZ)
        @given(data=st.data())
        def one(data) -> None:
            run_id = client.post("/api/runs", json=SMALL).json()["id"]
            actions = valid_messages(run_id).map(json.dumps) | st.just("reconnect")
            play(client, run_id, data.draw(st.lists(actions, min_size=1, max_size=10)), kinds)

        one()
        assert client.get("/api/info").status_code == 200
        assert kinds["ack"] and kinds["error"] and kinds["runs with records"], kinds
