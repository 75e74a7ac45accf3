"""The REST API without a browser: creating and listing runs, the page's form and presets, config
errors in `webmp train`'s words, GPT runs and their summary, sampling plans and their settings,
data files refused, plans per f16 path, plan size limits and the plan cache."""

from __future__ import annotations

import json
import math

import pytest

from tests.serve.helpers import (
    GPT,
    SMALL,
    checkpoint_bytes,
    connect,
    create,
    hello,
    leave,
    record,
    records_msg,
    send,
    serving,
    state_words,
    summary_msg,
)
from webmp.cli import main as cli_main
from webmp.config import MODEL_DEFAULTS, TrainConfig
from webmp.data.text import load_text, unigram_bits_per_char
from webmp.models import build_plan
from webmp.nn import Network
from webmp.presets import FORMAT_MODELS, FORMATS, LOSS_SCALING_DEMO, PRESETS
from webmp.serve.budget import (
    MAX_BUFFER_BYTES,
    MAX_CACHED_PLANS,
    MAX_PLAN_BYTES,
    check_plan_size,
    estimate_buffers,
)
from webmp.serve.errors import InvalidConfig
from webmp.serve.form import DEFAULT_NETWORK, NOT_IN_BROWSER, check_browser_config
from webmp.serve.page_data import training_data
from webmp.serve.security import MAX_UPLOAD_BYTES
from webmp.serve.store import RunStore
from webmp.train.rundir import RunDir


def test_runs_rest_api(client):
    run = create(client, lr=2e-3)
    assert run["status"] == "created" and run["last_step"] == -1 and run["config"]["lr"] == 2e-3
    assert run["page_url"] == f"/?run={run['id']}"
    assert [r["id"] for r in client.get("/api/runs").json()] == [run["id"]]
    assert client.get(f"/api/runs/{run['id']}").json()["status"] == "created"
    assert client.get(f"/api/runs/{run['id']}/metrics").json() == {"status": "created", "records": []}
    assert client.get(f"/api/runs/{run['id']}/summary").status_code == 404
    config = json.loads((client.app.state.store.get(run["id"]).dir.path / "config.json").read_text())
    assert config["lr"] == 2e-3 and config["runtime"] == "browser"

    bad = client.post("/api/runs", json={"steps": -5})
    assert bad.status_code == 422 and "invalid steps" in bad.json()["detail"]
    assert client.post("/api/runs", json={"no_such_field": 1}).status_code == 422
    assert client.post("/api/runs", json=[1, 2]).status_code == 422
    assert (
        client.post(
            "/api/runs", content=b"{not json", headers={"content-type": "application/json"}
        ).status_code
        == 422
    )
    for unknown in ("nope", "..", "a%2F..%2Fb", "x" * 100):
        assert client.get(f"/api/runs/{unknown}").status_code == 404
    assert len(client.get("/api/runs").json()) == 1


def test_form_is_made_from_the_config_and_its_model_defaults(client):
    """The page's form: every TrainConfig field, once, with its kind, choices, help text, the models
    that read it and its group, and each model's defaults (MODEL_DEFAULTS applied) for the page to
    show; a field a page cannot set says why; a run created with only the model (what the page sends
    when no field was changed) gets those defaults."""
    form = client.get("/api/form").json()
    fields = {f["name"]: f for f in form["fields"]}
    assert sorted(fields) == sorted(TrainConfig.model_fields) and len(form["fields"]) == len(fields)
    assert fields["model"]["kind"] == "choice"
    assert fields["model"]["choices"] == ["mlp", "mlp-ln", "gpt", "net"]
    assert fields["model"]["models"] is None and fields["steps"]["models"] is None
    assert fields["hidden"]["kind"] == "int_list" and fields["hidden"]["models"] == ["mlp", "mlp-ln"]
    assert fields["tie_head"]["kind"] == "bool" and fields["lr"]["kind"] == "float"
    assert fields["dataset"]["kind"] == "choice" and fields["dataset"]["choices"] == ["digits"]
    assert fields["eps"]["kind"] == "float" and fields["growth_interval"]["kind"] == "int"
    assert fields["f16"]["choices"] == ["native", "emulated", "auto"]
    for name in ("n_layer", "n_head", "d_model", "context", "tie_head"):
        assert fields[name]["models"] == ["gpt"] and fields[name]["help"].startswith("gpt: ")
    assert fields["batch_size"]["help"] == (
        "examples per step (gpt: context windows per step); with grad_accum N, per micro-batch"
    )
    # groups in order, each field in one; the common ones first
    assert [g["name"] for g in form["groups"]] == ["model", "precision", "optimizer", "run"]
    assert {f["group"] for f in form["fields"]} == {g["name"] for g in form["groups"]}
    assert fields["backoff_factor"]["group"] == "precision" and not fields["backoff_factor"]["common"]
    assert fields["steps"]["common"] and fields["seed"]["group"] == "run"
    # only what a page cannot use is disabled, with check_browser_config's reason
    assert {n for n, f in fields.items() if f["disabled"]} == set(NOT_IN_BROWSER) == {"init_weights", "zero"}
    assert fields["init_weights"]["kind"] == "text"
    assert "native `webmp train`" in fields["init_weights"]["disabled"]
    with pytest.raises(InvalidConfig, match="native `webmp train`"):
        check_browser_config(TrainConfig(init_weights="x.safetensors"))
    # the network's editor and the data's upload: inputs of their own (web/network.js, upload.js)
    assert (fields["model_spec"]["kind"], fields["data"]["kind"]) == ("network", "data")
    assert form["max_upload"] == MAX_UPLOAD_BYTES
    assert set(form["defaults"]) == {"mlp", "mlp-ln", "gpt", "net"}
    for model, defaults in form["defaults"].items():
        if model == "net":  # the CNN as written, not as the model dumps it with every default
            assert defaults["model_spec"] == DEFAULT_NETWORK
            defaults = {**defaults, "model_spec": Network.from_dict(DEFAULT_NETWORK).model_dump()}
            assert defaults == TrainConfig(model=model, model_spec=DEFAULT_NETWORK).model_dump()
        else:
            assert defaults == TrainConfig(model=model).model_dump()
    assert {k: form["defaults"]["gpt"][k] for k in ("steps", "batch_size", "lr")} == {
        k: MODEL_DEFAULTS["gpt"][k] for k in ("steps", "batch_size", "lr")
    }
    assert form["defaults"]["mlp"]["steps"] != form["defaults"]["gpt"]["steps"]
    run = client.post("/api/runs", json={"model": "gpt", "steps": 7})
    assert run.status_code == 201
    config = run.json()["config"]
    assert config["steps"] == 7
    assert all(config[k] == v for k, v in MODEL_DEFAULTS["gpt"].items() if k != "steps")


def test_presets_are_browser_configs_of_their_own(client):
    """Each preset the form offers is a TrainConfig a page may train, named once; the fp16-noscale
    one is the measured loss-scaling demo (tests/train/test_train.py::test_loss_scaling_matters asserts
    its first layers' gradients flush and its accuracy falls well below fp32's)."""
    form = client.get("/api/form").json()
    assert [p["name"] for p in form["presets"]] == [p.name for p in PRESETS]
    assert len({p.name for p in PRESETS}) == len(PRESETS) and len({p.title for p in PRESETS}) == len(PRESETS)
    for preset in form["presets"]:
        assert preset["title"] and preset["description"]
        cfg = TrainConfig(**preset["config"])
        check_browser_config(cfg)
        assert set(preset["config"]) <= set(TrainConfig.model_fields)
    by_name = {p.name: TrainConfig(**p.config) for p in PRESETS}
    assert by_name["fp16-noscale"] == TrainConfig(**LOSS_SCALING_DEMO, precision="fp16-noscale")
    assert by_name["fp32"].precision == "fp32" and by_name["gpt"].model == "gpt"
    # the format presets: per model, one run per format, the same settings but the precision
    for model in FORMAT_MODELS:
        named = {fmt: "fp32" if (model, fmt) == ("digits", "fp32") else f"{model}-{fmt}" for fmt in FORMATS}
        cfgs = {fmt: by_name[name] for fmt, name in named.items()}
        assert [c.precision for c in cfgs.values()] == list(FORMATS) == ["fp32", "mixed", "bf16", "fp8"]
        assert all(c.model_copy(update={"precision": "fp32"}) == cfgs["fp32"] for c in cfgs.values()), model
    assert by_name["gpt-small-bf16"].model == "gpt" and by_name["digits-bf16"].model == "mlp"
    scaling = by_name["loss-scaling"]  # overflows at first: f16's largest finite value is 65504
    assert (
        scaling.loss_scaling and scaling.init_scale > 65504 * 1e4 and scaling.growth_interval < scaling.steps
    )


# Values the CLI parses but TrainConfig refuses: the page must show the same words.
BAD_VALUES = [
    ("growth_factor", 0.5),
    ("backoff_factor", 2.0),
    ("batch_size", 0),
    ("eps", 0.0),
    ("beta2", 1.0),
]


@pytest.mark.parametrize("field,value", BAD_VALUES)
def test_config_errors_read_as_webmp_trains(client, capsys, field, value):
    """POST /api/runs refuses a bad value (422, no run) with the line `webmp train` prints for it."""
    assert cli_main(["train", "--" + field.replace("_", "-"), str(value)]) == 2
    cli = capsys.readouterr().err.strip()
    r = client.post("/api/runs", json={field: value})
    assert r.status_code == 422 and f"webmp train: {r.json()['detail']}" == cli
    assert cli.startswith(f"webmp train: invalid {field}: {field} ")
    assert client.get("/api/runs").json() == []


@pytest.mark.slow  # the summary builds the plan and draws curves.png (~2 s)
def test_the_result_agrees_with_the_curves_last_point(client):
    """summary.json's last step (steps, last_loss, final_scale) is the last record's, also when the
    last step changed the scale: the state then holds the next step's scale (here backed off)."""
    run_id = create(client, steps=3, log_every=1, checkpoint_every=0)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    last = {**record(2, loss=0.125), "scale": 32768.0, "skipped": 1}
    send(ws, {"type": "records", "run_id": run_id, "records": [record(0), record(1), last]})
    state = {**state_words(3), "scale": 16384.0, "skipped_total": 1}
    assert send(ws, {**summary_msg(run_id, 3), "state": state})["type"] == "ack"
    leave(ws)
    summary = client.get(f"/api/runs/{run_id}/summary").json()
    assert (summary["steps"], summary["last_loss"], summary["final_scale"]) == (3, 0.125, 32768.0)
    assert summary["skipped_steps"] == 1
    info = client.get(f"/api/runs/{run_id}").json()
    assert info["status"] == "finished" and info["f16_path"] == "emulated"  # what a reopened page shows


def test_gpt_trains_on_the_default_corpus_with_the_native_plan(client):
    """A browser GPT run trains on the default corpus (load_text(None), as `webmp train --model
    gpt` without --data): its plan and blob are build_plan's for that config and f16 path."""
    from webmp.models import build_plan

    run = create(client, **GPT)
    cfg = TrainConfig(**run["config"])
    assert cfg.model == "gpt" and cfg.warmup == MODEL_DEFAULTS["gpt"]["warmup"]  # left out: the gpt default
    corpus = load_text(None)
    for offer in ("native", "emulated"):
        got = client.get(f"/api/runs/{run['id']}/plan", params={"f16": offer}).json()
        plan, blob = build_plan(cfg, corpus, offer)
        assert got["plan"] == json.loads(json.dumps(plan))
        assert client.get(f"/api/runs/{run['id']}/blob", params={"f16": offer}).content == blob
    assert got["plan"]["eval"]["loss_buffer"] == "val_loss_sum"
    tokens = next(b for b in got["plan"]["buffers"] if b["name"] == "tokens")
    assert tokens["shape"] == [len(corpus.train)] and tokens["init"]["bytes"] == 4 * len(corpus.train)

    r = client.post("/api/runs", json={**GPT, "data": "/etc/passwd"})  # still no data files
    assert r.status_code == 422 and "a path is for native `webmp train --data`" in r.json()["detail"]


def test_gpt_summary_carries_the_validation_loss(client):
    """The page sends plan["eval"]["loss_buffer"]'s sum as val_loss_sum (a number >= 0, or "NaN" /
    "Infinity"; required exactly when the plan has that buffer); summary.json then has the native
    run's val_* figures."""
    run_id = create(client, **GPT)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(GPT["steps"])))
    base = {**summary_msg(run_id, GPT["steps"]), "test_correct": 100, "test_count": 1023}
    for bad in (None, -1.0, "-Infinity", "1.5", "nan", "inf", True):
        msg = {**base, "val_loss_sum": bad} if bad is not None else base
        reply = send(ws, msg)
        assert reply["type"] == "error" and "val_loss_sum" in reply["message"], (bad, reply)
    assert client.get(f"/api/runs/{run_id}").json()["status"] == "running"
    assert send(ws, {**base, "val_loss_sum": 1023 * 4.5})["type"] == "ack"
    leave(ws)
    assert all(k[0] != run_id for k in client.app.state.store.plans.keys())  # an ended run holds no plan
    summary = client.get(f"/api/runs/{run_id}/summary").json()
    assert summary["val_loss"] == pytest.approx(4.5) and summary["test_accuracy"] == pytest.approx(100 / 1023)
    assert summary["val_bits_per_char"] == pytest.approx(4.5 / math.log(2))
    # the baseline on the characters eval scores (the first val_tokens), as the native Trainer's
    assert summary["unigram_bits_per_char"] == unigram_bits_per_char(load_text(None), GPT["val_tokens"])

    mlp = create(client)["id"]  # an MLP's plan sums no loss: a val_loss_sum is refused
    ws = connect(client, mlp)
    send(ws, hello(mlp))
    send(ws, records_msg(mlp, range(30)))
    reply = send(ws, {**summary_msg(mlp, 30), "val_loss_sum": 1.0})
    assert reply["type"] == "error" and "val_loss_sum" in reply["message"]
    assert send(ws, summary_msg(mlp, 30))["type"] == "ack"
    leave(ws)
    assert client.get(f"/api/runs/{mlp}/summary").json()["val_loss"] is None


@pytest.mark.parametrize("sent,value", [("NaN", math.nan), ("Infinity", math.inf)])
def test_a_diverged_gpt_ends_failed_with_its_non_finite_validation_loss(client, sent, value):
    """A GPT whose loss turned NaN and whose summed validation loss is NaN or Infinity (fp16-noscale
    can diverge) ends `failed` ("diverged: ..."), its summary kept: summary.json holds val_loss and
    val_bits_per_char as the native Trainer writes them
    (strict JSON: the strings "NaN" / "Infinity", webmp.train.rundir.json_safe), the API sends them so
    too, read_summary gives the floats back, and the curves are drawn."""
    run_id = create(client, **GPT, precision="fp16-noscale")["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(GPT["steps"]), loss=float("nan")))
    msg = {**summary_msg(run_id, GPT["steps"]), "test_correct": 0, "test_count": 1023, "val_loss_sum": sent}
    assert send(ws, msg)["type"] == "ack"
    leave(ws)
    info = client.get(f"/api/runs/{run_id}").json()
    assert info["status"] == "failed" and info["message"].startswith(
        "diverged: the training loss is NaN at step 0"
    )
    run_dir = client.app.state.store.get(run_id).dir.path
    written = (run_dir / "summary.json").read_text()
    assert f'"val_loss": "{sent}",' in written and f'"val_bits_per_char": "{sent}",' in written
    json.loads(written, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    back = RunDir(run_dir).read_summary()
    for key in ("val_loss", "val_bits_per_char"):
        assert math.isnan(back[key]) if math.isnan(value) else back[key] == value
    shown = client.get(f"/api/runs/{run_id}/summary").json()
    assert shown["val_loss"] == shown["val_bits_per_char"] == sent
    assert (run_dir / "curves.png").stat().st_size > 0


def test_config_records_the_data_and_resume_refuses_changed_data(client):
    """config.json and checkpoint.json record the training data's sha256 as a native run's do (the
    default corpus for the GPT; None for the built-in digits), checkpoints the GPT's vocabulary;
    a run whose checkpoint names other data than the server's now is not resumed (one line)."""
    corpus = load_text(None)
    run_id = create(client, **GPT)["id"]
    run_dir = client.app.state.store.get(run_id).dir.path
    assert json.loads((run_dir / "config.json").read_text())["data_sha256"] == corpus.sha256
    mlp = create(client)["id"]
    assert RunDir(client.app.state.store.get(mlp).dir.path).read_json("config.json")["data_sha256"] is None
    assert RunStore(client.app.state.store.root).runs[run_id].data_sha256 == corpus.sha256  # reloaded

    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(12)))
    url = f"/api/runs/{run_id}/checkpoint"
    upload = checkpoint_bytes(client, run_id, 10)
    assert client.put(url, params={"f16": "emulated", "step": 10}, content=upload).status_code == 200
    leave(ws)
    meta_file = run_dir / "checkpoint.json"
    meta = json.loads(meta_file.read_text())
    assert meta["data_sha256"] == corpus.sha256 and meta["vocab"] == corpus.vocab
    assert json.loads((run_dir / "config.json").read_text())["data_sha256"] == corpus.sha256  # kept

    meta_file.write_text(json.dumps({**meta, "data_sha256": "0" * 64}))
    r = client.get(f"/api/runs/{run_id}/plan", params={"f16": "emulated"})
    detail = r.json()["detail"]
    assert r.status_code == 409 and "\n" not in detail, detail
    assert f"cannot resume run {run_id}" in detail and "changed since the checkpoint at step 10" in detail
    assert f"sha256 {'0' * 64} then, {corpus.sha256} now" in detail
    meta_file.write_text(json.dumps(meta))
    assert client.get(f"/api/runs/{run_id}/plan", params={"f16": "emulated"}).json()["start_step"] == 10


def finished_gpt_run(client) -> str:
    """A GPT run the fake page finished; its final checkpoint holds the plan's initial weights."""
    run_id = create(client, **GPT)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(GPT["steps"])))
    upload = checkpoint_bytes(client, run_id, GPT["steps"])
    url = f"/api/runs/{run_id}/checkpoint"
    assert (
        client.put(url, params={"f16": "emulated", "step": GPT["steps"]}, content=upload).status_code == 200
    )
    msg = {**summary_msg(run_id, GPT["steps"]), "test_count": 1023, "val_loss_sum": 4000.0}
    assert send(ws, msg)["type"] == "ack"
    leave(ws)
    return run_id


def test_sample_plan_is_webmp_samples(client):
    """GET /api/runs/{id}/sample: the plan `webmp sample` builds of the run's final checkpoint
    (webmp.sample.job.prepare, default tiles) for the page's f16 path, the vocabulary in it, the
    blob from /sample/blob; the settings left out are `webmp sample`'s defaults, which /api/form
    also serves to the page."""
    from webmp.sample import job as sp

    run_id = finished_gpt_run(client)
    run_dir = client.app.state.store.get(run_id).dir.path
    url = f"/api/runs/{run_id}/sample"
    defaults = ("", sp.DEFAULT_TOKENS, sp.DEFAULT_TEMPERATURE, sp.DEFAULT_SEED)
    assert client.get("/api/form").json()["sample"] == {
        "prompt": "", "tokens": sp.DEFAULT_TOKENS, "temperature": sp.DEFAULT_TEMPERATURE,
        "seed": sp.DEFAULT_SEED, "max_tokens": 2000, "max_prompt": 2000,
    }  # fmt: skip
    for offer in ("native", "emulated"):
        got = client.get(url, params={"f16": offer}).json()
        assert (got["prompt"], got["tokens"], got["temperature"], got["seed"]) == defaults
        job = sp.prepare(run_dir, "")
        plan, blob = job.plan(job.path(offer == "native"))
        assert got["f16_path"] == offer and got["plan"] == json.loads(json.dumps(plan))
        assert client.get(url + "/blob", params={"f16": offer}).content == blob
    assert got["plan"]["sample"]["vocab"] == load_text(None).vocab
    assert got["plan"]["sample"]["prompt_tokens"] == 1  # an empty prompt starts after a newline
    query = {
        "f16": "emulated",
        "prompt": "def f(x):\n    return",
        "tokens": "50",
        "temperature": "0",
        "seed": "7",
    }
    got = client.get(url, params=query).json()
    assert (got["prompt"], got["tokens"], got["temperature"], got["seed"]) == (query["prompt"], 50, 0.0, 7)
    plan, blob = sp.prepare(run_dir, query["prompt"], tokens=50, temperature=0.0, seed=7).plan("emulated")
    assert got["plan"] == json.loads(json.dumps(plan))
    run = client.app.state.store.get(run_id)
    assert run.sampler.kept is not None  # kept for the blob request
    assert client.get(url + "/blob", params=query).content == blob
    assert run.sampler.kept is None  # and dropped once the page has the blob


def test_sample_settings_are_checked_in_one_line(client):
    """Bad settings or a prompt outside the vocabulary: 422 with `webmp sample`'s one-line message
    (the page shows it), for the plan and the blob; sampling needs a finished GPT run (409)."""
    run_id = finished_gpt_run(client)
    vocab = set(load_text(None).vocab)
    assert "\u2603" not in vocab and "\u00e6" not in vocab
    url = f"/api/runs/{run_id}/sample"
    bad = [
        ({"prompt": "x = '\u2603\u00e6'"}, "the prompt has 2 character(s) outside the run's vocabulary of"),
        ({"tokens": "0"}, "tokens must be a positive integer, got 0"),
        ({"tokens": "2001"}, "tokens must be at most 2000 on the page, got 2001"),
        ({"tokens": "ten"}, "tokens must be an integer, got 'ten'"),
        ({"tokens": ""}, "tokens must be an integer, got ''"),
        ({"temperature": "-1"}, "temperature must be a finite number >= 0, got -1.0"),
        ({"temperature": "nan"}, "temperature must be a finite number >= 0, got nan"),
        ({"temperature": "inf"}, "temperature must be a finite number >= 0, got inf"),
        ({"temperature": "warm"}, "temperature must be a number, got 'warm'"),
        ({"seed": "-1"}, "seed must be in 0 .. 2**32 - 1, got -1"),
        ({"seed": str(2**32)}, f"seed must be in 0 .. 2**32 - 1, got {2**32}"),
        ({"prompt": "x" * 2001}, "the prompt must be at most 2000 characters, got 2001"),
    ]
    for query, message in bad:
        for route in (url, url + "/blob"):
            r = client.get(route, params={"f16": "emulated", **query})
            detail = r.json()["detail"]
            assert r.status_code == 422 and isinstance(detail, str) and "\n" not in detail, (query, detail)
            assert message in detail, (query, detail)
    assert client.get(url, params={"f16": "emulated", "tokens": "2000"}).status_code == 200

    mlp = create(client)["id"]
    r = client.get(f"/api/runs/{mlp}/sample", params={"f16": "emulated"})
    assert (
        r.status_code == 409
        and "only a gpt run or a network with a token input generates text" in r.json()["detail"]
    )
    unfinished = create(client, **GPT)["id"]
    r = client.get(f"/api/runs/{unfinished}/sample", params={"f16": "emulated"})
    assert r.status_code == 409 and "is created; text is generated from a finished run" in r.json()["detail"]
    assert client.get("/api/runs/nope/sample", params={"f16": "emulated"}).status_code == 404


def test_data_files_are_refused_for_browser_runs(client, tmp_path):
    """A data path in POST /api/runs would let any client read a server file through the plan's blob."""
    secret = tmp_path / "secret.csv"
    secret.write_text("1,2,0\n3,4,1\n")
    before = sorted(p.name for p in client.app.state.store.root.glob("*"))
    r = client.post("/api/runs", json={**SMALL, "data": str(secret)})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("invalid data: a browser run trains on the built-in data or on a file uploaded")
    assert "a path is for native `webmp train --data`" in detail
    assert str(secret) not in detail
    assert sorted(p.name for p in client.app.state.store.root.glob("*")) == before  # no run directory
    assert client.get("/api/runs").json() == []

    # nor is a run directory edited on disk to name a file served after a restart
    run = create(client)
    config_file = client.app.state.store.get(run["id"]).dir.path / "config.json"
    config_file.write_text(json.dumps({**json.loads(config_file.read_text()), "data": str(secret)}))
    assert run["id"] not in RunStore(client.app.state.store.root).runs


def test_plan_for_each_f16_path(client):
    auto = create(client)["id"]
    for offer, path in (("native", "native"), ("emulated", "emulated")):
        got = client.get(f"/api/runs/{auto}/plan", params={"f16": offer}).json()
        assert got["f16_path"] == path and got["plan"]["f16_path"] == path and got["start_step"] == 0
        assert got["plan"]["prelude"] == f"prelude_{path}.wgsl"
        blob = client.get(f"/api/runs/{auto}/blob", params={"f16": offer}).content
        assert len(blob) == got["plan"]["blob_bytes"]
    fp32 = create(client, precision="fp32")["id"]
    assert client.get(f"/api/runs/{fp32}/plan", params={"f16": "native"}).json()["f16_path"] == "fp32"
    forced = create(client, f16="emulated")["id"]
    assert client.get(f"/api/runs/{forced}/plan", params={"f16": "native"}).json()["f16_path"] == "emulated"
    needs_native = create(client, f16="native")["id"]
    r = client.get(f"/api/runs/{needs_native}/plan", params={"f16": "emulated"})
    assert r.status_code == 409 and "shader-f16" in r.json()["detail"]
    assert client.get(f"/api/runs/{auto}/plan", params={"f16": "fast"}).status_code == 422


@pytest.mark.parametrize("precision", ["mixed", "fp32", "fp16-noscale"])
@pytest.mark.parametrize(
    "cfg",
    [
        dict(model="mlp"),
        dict(model="mlp-ln", hidden=[300, 100, 50], batch_size=33),
        GPT,
        dict(GPT, tie_head=False, n_layer=3, d_model=96, n_head=3),
    ],
)
def test_the_size_estimate_is_the_built_plans_buffers(cfg, precision):
    """estimate_buffers reads the models' own declarations (a dry run): every buffer, exactly."""
    cfg = TrainConfig(**cfg, precision=precision)
    data = training_data(cfg)
    for path in ("fp32",) if precision == "fp32" else ("native", "emulated"):
        plan, _ = build_plan(cfg, data, path)
        assert estimate_buffers(cfg, data, path) == {b["name"]: b["bytes"] for b in plan["buffers"]}


def test_a_config_the_models_cannot_build_is_refused_before_its_run():
    cfg = TrainConfig(**{**GPT, "context": 4096, "batch_size": 4096})  # 2^24 rows: 2^18 matmul row tiles
    with pytest.raises(InvalidConfig, match=r"makes no plan: matmul_fwd .* 262144.* 1 \.\. 65535"):
        check_plan_size(cfg, training_data(cfg))


def test_configs_too_big_for_a_page_or_the_server_are_refused(client):
    r = client.post("/api/runs", json={**SMALL, "hidden": [60000, 60000]})
    detail = r.json()["detail"]
    assert r.status_code == 422 and "W1" in detail and str(60000 * 60000 * 4) in detail, detail
    assert str(MAX_BUFFER_BYTES) in detail
    # every buffer under the binding limit, their total over the budget
    wide = {**SMALL, "hidden": [4096] * 16, "batch_size": 16}
    r = client.post("/api/runs", json=wide)
    detail = r.json()["detail"]
    assert r.status_code == 422 and str(MAX_PLAN_BYTES) in detail and "total" in detail, detail
    r = client.post("/api/runs", json={**GPT, "d_model": 8192, "n_head": 8})
    assert r.status_code == 422 and "MiB" in r.json()["detail"]
    assert client.get("/api/runs").json() == []  # nothing was created
    create(client)  # a normal config still is


def test_built_plans_are_held_for_a_few_runs_at_most(client):
    store = client.app.state.store
    ids = [create(client)["id"] for _ in range(MAX_CACHED_PLANS + 2)]
    for run_id in ids:
        for offer in ("native", "emulated"):
            assert client.get(f"/api/runs/{run_id}/blob", params={"f16": offer}).status_code == 200
    held = store.plans.keys()
    assert len(held) == MAX_CACHED_PLANS and held[-1] == (ids[-1], "emulated", None)
    assert all(k[0] in ids[-2:] for k in held)  # the least recently used went first
    # a dropped plan is built again when asked for
    first = client.get(f"/api/runs/{ids[0]}/plan", params={"f16": "native"})
    assert first.status_code == 200 and store.plans.keys()[-1] == (ids[0], "native", None)
    assert len(store.plans.keys()) == MAX_CACHED_PLANS


def test_a_runs_files_download_as_themselves_as_csv_and_zipped(client):
    """GET /api/runs/{id}/files lists the run directory's files (with sizes), metrics.csv and the
    zip; each downloads as an attachment with the file's bytes; the CSV has a row a record; the zip
    holds every file; a name that is not listed (a path, a missing file) is 404."""
    import csv
    import io
    import zipfile

    run_id = create(client, steps=12)["id"]
    ws = connect(client, run_id)
    send(ws, hello(run_id))
    send(ws, records_msg(run_id, range(12)))
    assert send(ws, summary_msg(run_id, 12))["type"] == "ack"
    leave(ws)
    run_dir = client.app.state.store.get(run_id).dir.path
    listed = client.get(f"/api/runs/{run_id}/files").json()
    names = [f["name"] for f in listed]
    on_disk = sorted(p.name for p in run_dir.iterdir() if p.is_file())
    assert names == [*on_disk, "metrics.csv", f"{run_id}.zip"] and "summary.json" in names
    for f in listed[: len(on_disk)]:
        r = client.get(f"/api/runs/{run_id}/files/{f['name']}")
        assert r.status_code == 200 and r.content == (run_dir / f["name"]).read_bytes() == r.content
        assert f["bytes"] == len(r.content) and "attachment" in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(client.get(f"/api/runs/{run_id}/files/metrics.csv").text)))
    assert [int(r["step"]) for r in rows] == list(range(12)) and float(rows[3]["loss"]) == 2.0 / 4
    z = zipfile.ZipFile(io.BytesIO(client.get(f"/api/runs/{run_id}/files/{run_id}.zip").content))
    assert sorted(z.namelist()) == [f"{run_dir.name}/{n}" for n in on_disk]
    assert z.read(f"{run_dir.name}/summary.json") == (run_dir / "summary.json").read_bytes()
    for bad in ("nope.txt", "..%2Fconfig.json", "%2Fetc%2Fpasswd"):
        r = client.get(f"/api/runs/{run_id}/files/{bad}")
        assert r.status_code == 404, (bad, r.status_code)
    assert client.get("/api/runs/nope/files").status_code == 404


def test_runs_are_named_noted_and_deleted_without_losing_their_files(client, tmp_path):
    """POST /api/runs/{id}/label names a run (one line, at most 80 characters) and notes it; the list
    shows both. DELETE /api/runs/{id} takes an ended run off the list, its directory moved to
    .deleted/ (not erased; a restarted server does not list it); a training run is refused (409)."""
    from webmp.serve.app import create_app
    from webmp.serve.store import DELETED

    run_id = create(client, steps=12)["id"]
    r = client.post(
        f"/api/runs/{run_id}/label", json={"name": "lr sweep 3e-3", "note": "baseline\nfor the paper"}
    )
    assert r.status_code == 200 and (r.json()["name"], r.json()["note"]) == (
        "lr sweep 3e-3",
        "baseline\nfor the paper",
    )
    listed = {i["id"]: i for i in client.get("/api/runs").json()}
    assert listed[run_id]["name"] == "lr sweep 3e-3"
    for bad in ({"name": "x" * 81}, {"name": "two\nlines"}, {"name": 3}, {"colour": "red"}):
        assert client.post(f"/api/runs/{run_id}/label", json=bad).status_code == 422, bad
    assert client.post("/api/runs/nope/label", json={"name": "x"}).status_code == 404

    ws = connect(client, run_id)
    send(ws, hello(run_id))
    r = client.delete(f"/api/runs/{run_id}")
    assert r.status_code == 409 and "stop it before deleting it" in r.json()["detail"]
    send(ws, records_msg(run_id, range(12)))
    assert send(ws, summary_msg(run_id, 12))["type"] == "ack"
    leave(ws)
    run_dir = client.app.state.store.get(run_id).dir.path
    r = client.delete(f"/api/runs/{run_id}")
    assert r.status_code == 200, r.text
    moved = run_dir.parent / DELETED / run_id
    assert r.json() == {"id": run_id, "moved_to": str(moved)}
    assert not run_dir.exists() and (moved / "summary.json").is_file() and (moved / "label.json").is_file()
    assert run_id not in {i["id"] for i in client.get("/api/runs").json()}
    assert client.get(f"/api/runs/{run_id}").status_code == 404
    assert client.delete(f"/api/runs/{run_id}").status_code == 404
    with serving(create_app(run_dir.parent)) as again:
        assert run_id not in {i["id"] for i in again.get("/api/runs").json()}
