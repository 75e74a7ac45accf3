"""Fuzzing the server: schemathesis against /api/openapi.json (every operation, schema-valid and
schema-violating requests, no 5xx and every answer as the schema documents it), with and without the
token; and hypothesis against the run WebSocket (mutated, arbitrary, non-JSON, binary, deep and
oversized frames, valid messages in odd orders). Derandomized, so the same cases run every time."""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.test_server import BASE, SMALL, hello, records_msg, summary_msg
from webmp.server import create_app

pytestmark = pytest.mark.slow

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
    cases = st.one_of([op.as_strategy(generation_mode=mode) for op in operations for mode in GenerationMode])
    seen: Counter = Counter()

    @settings(max_examples=examples, **FUZZ)
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
            assert response.status_code in expect, (case.operation.label, response.status_code, response.text)
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
