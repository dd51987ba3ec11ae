"""The app through its API (gradio_client against a launched app): streaming, metrics, concurrency, bad input."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import polestar

FAST = {"gen_length": 32, "block_length": 32}


@pytest.fixture(scope="module")
def client(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("GRADIO_TEMP_DIR", str(tmp_path_factory.mktemp("gradio")))
    from gradio_client import Client

    import app

    demo = app.create_app(polestar.DEFAULT_MODEL)
    demo.queue(default_concurrency_limit=4).launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        yield Client(demo.local_url, verbose=False)
    finally:
        demo.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _metrics(outputs) -> dict:
    return outputs[5]


def test_run_streams_and_ends_with_metrics(client):
    job = client.submit("Copy the list: 4 8 15 16", method="polestar", **FAST, api_name="/run")
    updates = list(job)
    assert len(updates) >= 2
    final = _metrics(updates[-1])
    assert {"text", "nfe", "tpf", "tps"} <= set(final) and final["nfe"] >= 1
    assert updates[-1][6] == "done"
    waiting = [_figure(u[3]) for u in updates[:-1]]  # frames of the run still decoding: staleness comes at the end
    assert waiting and all(f["layout"]["annotations"][0]["text"] == "drawn when the run ends" for f in waiting)
    end = _figure(updates[-1][3])
    assert end["layout"]["title"]["text"] == "KV staleness against a full recompute" and end["data"]


def test_stop_ends_the_run_and_its_last_frame_says_where(client):
    from gradio_client import Client

    own = Client(client.src, verbose=False)  # a session of its own: Stop acts on its session's run
    assert own.predict(api_name="/stop") == ()  # nothing running: a notice, no error, no output
    job = own.submit("Copy the list: 4 8 15 16", method="baseline", api_name="/run")  # 256 one-token steps
    deadline = time.monotonic() + 60
    while not job.outputs() and time.monotonic() < deadline:  # its first streamed frame
        time.sleep(0.05)
    own.predict(api_name="/stop")
    updates = list(job)
    steps = int(updates[-1][6].removeprefix("stopped at step "))
    assert updates[-1][6] == f"stopped at step {steps}" and 1 <= steps < 256
    assert _metrics(updates[-1])["stopped"] is True


def test_only_the_prompt_is_required(client):
    final = _metrics(client.predict("Reverse the list: 1 2 3 4", api_name="/run"))
    assert final["nfe"] >= 1 and isinstance(final["text"], str)


def test_concurrent_runs_get_their_own_results(client):
    prompts = ["Copy the list: 1 2 3 4", "Reverse the list: 5 6 7 8", "Sort the list in ascending order: 9 3 7 1",
               "Copy the list: cat dog owl yak", "Reverse the list: ant bee cow", "Copy the list: 42 17 99",
               "Sort the list in ascending order: 50 20 80 10", "Reverse the list: red blue green tan"]
    with ThreadPoolExecutor(len(prompts)) as pool:  # 8 clients at once; the app runs 4 at a time
        results = list(pool.map(lambda p: _metrics(client.predict(p, method="fast-dllm", **FAST, api_name="/run")),
                                prompts))
    model = polestar.load_model(polestar.DEFAULT_MODEL)
    for prompt, got in zip(prompts, results):
        assert got["text"] == polestar.generate(model, prompt, "fast-dllm", **FAST).text


BAD_INPUTS = [  # (what is sent, a pattern the message must match)
    ({"prompt": ""}, "prompt is empty"),
    ({"prompt": "   \n\t "}, "prompt is empty"),
    ({"prompt": None}, "prompt is empty"),
    ({"prompt": 12345}, "prompt is empty"),
    ({"prompt": "x" * 20_000}, "20000 characters; the limit is 4000"),
    ({"method": "turbo"}, "unknown method 'turbo'"),
    ({"method": None}, "unknown method"),
    ({"polestar_hidden_format": "fp3"}, "polestar_hidden_format='fp3' is not allowed"),
    ({"polestar_refresh_clusters": 9}, "polestar_refresh_clusters=9 exceeds polestar_centroids=8"),
    ({"polestar_refresh_clusters_last": 12}, "polestar_refresh_clusters_last=12 exceeds"),
    ({"gen_length": 40}, "not a multiple of block_length"),
    ({"gen_length": 96, "block_length": 64}, "not a multiple of block_length"),
    ({"gen_length": "abc"}, "gen_length must be a number"),
    ({"gen_length": -32}, "gen_length=-32 is out of range"),
    ({"gen_length": 10**9}, "gen_length=1000000000 is out of range"),
    ({"gen_length": [32]}, "gen_length must be a number"),
    ({"gen_length": {"a": 1}}, "gen_length must be a number"),
    ({"block_length": 0}, "block_length=0 is out of range"),
    ({"tau_s": "nan"}, "tau_s"),
    ({"tau_s": "inf"}, "tau_s"),
    ({"tau_s": "-inf"}, "tau_s"),
    ({"tau_s": 1.5}, "tau_s=1.5 is out of range"),
    ({"tau_s": -0.1}, "tau_s=-0.1 is out of range"),
    ({"tau_s": "🙂"}, "tau_s must be a number"),
    ({"temperature": -1}, "temperature=-1.0 is out of range"),
    ({"seed": None}, "seed must be a number"),
    ({"seed": "1e999"}, "seed"),
    ({"polestar_centroids": 0}, "polestar_centroids=0 is out of range"),
    ({"polestar_window_prefix": -1}, "polestar_window_prefix=-1 is out of range"),
    ({"polestar_tau_upd": "often"}, "polestar_tau_upd must be a number"),
    ({"polestar_alpha": "nan"}, "polestar_alpha"),
    ({"polestar_history": 2.5}, "polestar_history"),
    ({"layer": "abc"}, "layer must be a number"),
    ({"layer": "nan"}, "layer must be a number"),
    ({"positions": 7}, "positions must be text"),
    ({"selected": "abc"}, "selected position must be a whole number"),
    ({"selected": "2.5"}, "selected position must be a whole number ≥ 0"),
    ({"selected": "-3"}, "selected position must be a whole number ≥ 0"),
    ({"selected": "9999"}, "selected position 9999 is outside this run's canvas"),
]


@pytest.mark.parametrize("sent,message", BAD_INPUTS, ids=[f"{i}-{next(iter(s))}" for i, (s, _) in enumerate(BAD_INPUTS)])
def test_bad_input_gets_a_message(client, sent, message):
    """Every bad input gets a message naming what to change (wrong types and non-finite numbers too)."""
    from gradio_client.exceptions import AppError

    inputs = {"prompt": "Copy the list: 1 2", **FAST, **sent}
    with pytest.raises(AppError, match=re.escape(message) if "=" in message or "'" in message else message):
        client.predict(**inputs, api_name="/run")


def test_the_app_keeps_serving_after_bad_input(client):
    from gradio_client.exceptions import AppError

    for sent, _ in BAD_INPUTS[:6]:
        with pytest.raises(AppError):
            client.predict(**{"prompt": "Copy the list: 1 2", **FAST, **sent}, api_name="/run")
    emoji = _metrics(client.predict("Copy the list: 🙂 🚀 🌟", **FAST, api_name="/run"))  # odd but valid text
    assert emoji["nfe"] >= 1
    final = _metrics(client.predict("Copy the list: 1 2 3 4", **FAST, api_name="/run"))
    assert final["nfe"] >= 1


def _figure(plot: dict) -> dict:
    import json

    return json.loads(plot["plot"])


def _array(value):
    """A trace's x or y: a JSON list, or plotly's typed-array form {dtype, bdata} (numpy arrays are sent so)."""
    import base64

    import numpy as np

    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).astype(float)
    return np.asarray(value, dtype=float)


def test_compare_reports_a_diff_and_overlays_both_runs_on_one_playhead(client):
    import numpy as np

    *_, overlay, _, summary, playhead = client.predict("Copy the list: 1 2 3", "fast-dllm", "polestar", 64, 0,
                                                       api_name="/compare")
    assert summary["A"] == "A: fast-dllm" and summary["nfe_A"] >= 1 and summary["nfe_B"] >= 1
    assert summary["differing_tokens"] == len(summary["differing_positions"]) or summary["differing_tokens"] > 64
    traces = _figure(overlay)["data"]  # staleness and drift of A and of B
    assert [t["name"].split(" (")[0] for t in traces] == ["A: fast-dllm"] * 2 + ["B: polestar"] * 2
    staleness = [_array(t["y"]) for t in traces[::2]]
    ulps = 8 * np.finfo(np.float32).eps  # 1 − cos in float32 is exact to a few ulps of 1 (it can read −1e-10)
    assert all(len(y) and np.isfinite(y).all() and (y >= -ulps).all() for y in staleness), staleness
    assert playhead["maximum"] == max(summary["nfe_A"], summary["nfe_B"]) == playhead["value"]
    canvas_a, canvas_b, moved = client.predict(1, api_name="/compare_playhead")
    assert _figure(canvas_a)["layout"]["title"]["text"].startswith("Token canvas — step 1/")
    assert _figure(canvas_b)["layout"]["title"]["text"].startswith("Token canvas — step 1/")
    assert _figure(moved)["layout"]["title"]["text"].endswith("step 1")
    assert all(len(_array(t["x"])) == 1 for t in _figure(moved)["data"])  # each run drawn up to the playhead


def test_sweep_table(client):
    args = ("fast-dllm", "tau_s", "0.8, 0.95", "lists", 2, 32)
    _, table = client.predict(*args, api_name="/sweep")
    assert [row[0] for row in table["data"]] == [0.8, 0.95]
    assert all(0 <= row[1] <= 100 and row[4] >= 1 for row in table["data"])
    _, again = client.predict(*args, api_name="/sweep")
    assert again["data"] == table["data"]


def test_cached_replays_match_the_shipped_model_and_play_back(client):
    """The shipped replays were recorded with the shipped weights (re-record with `python -m app.replays` after
    re-exporting the model), load as traces, and /replay streams them step by step, ending with their metrics."""
    from app import replays

    cached = replays.available()
    assert len(cached) == len(replays.RECORDED)
    assert {r.model_sha256 for r in cached} == {replays.model_fingerprint(polestar.DEFAULT_MODEL)}
    frames = list(client.submit(cached[1].name, 0, "0 1 2 3", api_name="/replay"))
    assert len(frames) >= 3
    final = frames[-1]
    assert {"text", "nfe", "tpf", "tps"} <= set(_metrics(final)) and final[8] == cached[1].prompt
    assert "replay of" in final[6]
    with pytest.raises(Exception, match="not in the list of choices"):
        client.predict("no such run", 0, "0 1 2 3", api_name="/replay")


def test_listen_address_follows_a_space_unless_flags_say_otherwise(monkeypatch):
    """A Space sets GRADIO_SERVER_NAME / GRADIO_SERVER_PORT; bound to 127.0.0.1 it would reject every request."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("app_main", Path(__file__).resolve().parent.parent / "app.py")
    entry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry)
    for name in ("HOST", "PORT", "GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT"):
        monkeypatch.delenv(name, raising=False)
    args = entry.parse_args([])
    assert (args.host, args.port) == ("127.0.0.1", 7860)
    monkeypatch.setenv("GRADIO_SERVER_NAME", "0.0.0.0")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "7861")
    args = entry.parse_args([])
    assert (args.host, args.port) == ("0.0.0.0", 7861)
    args = entry.parse_args(["--host", "127.0.0.1", "--port", "9000"])
    assert (args.host, args.port) == ("127.0.0.1", 9000)


def test_a_shared_link_restores_the_settings():
    """The link carries the prompt, the method and only the controls that differ from the method's Run-tab
    defaults; restoring it gives the same config. A bad value names the field."""
    from urllib.parse import parse_qsl

    from app.run_tab import CONTROLS, link_query, restore_query
    from polestar.config import resolve
    from polestar.errors import PolestarError

    values = {n: getattr(resolve("fast-dllm", measure_staleness=True), n) for n in CONTROLS} | {"tau_s": 0.75}
    query = link_query("Copy the list: 1 2 3", "fast-dllm", values)
    params = dict(parse_qsl(query))
    assert params == {"prompt": "Copy the list: 1 2 3", "method": "fast-dllm", "tau_s": "0.75"}
    prompt, method, cfg = restore_query(params)
    assert (prompt, method, cfg.tau_s, cfg.cache) == ("Copy the list: 1 2 3", "fast-dllm", 0.75, "dual")
    assert cfg.measure_staleness  # the Run tab's default rides along
    with pytest.raises(PolestarError, match="tau_s"):
        restore_query({"method": "fast-dllm", "tau_s": "7"})


def test_per_session_state_is_bounded():
    from app.common import MAX_SESSIONS, Sessions

    store = Sessions()
    for i in range(MAX_SESSIONS + 5):
        store[f"s{i}"] = i
    assert len(store) == MAX_SESSIONS and "s0" not in store and f"s{MAX_SESSIONS + 4}" in store
    store["s5"] = "again"  # storing refreshes: s5 is now the newest, s6 the oldest
    store["new"] = 0
    assert "s5" in store and "s6" not in store


def test_zero_gpu_runs_the_model_work_inside_the_decorated_call(monkeypatch):
    """On ZeroGPU the GPU exists only inside a `spaces.GPU` call: with a fake `spaces` module, every handler that
    decodes is decorated, and all the model host's work (loading, encoding, decoding) runs while the call is
    active, on threads the call starts."""
    import functools
    import importlib.machinery
    import sys
    import threading
    import types

    import polestar
    from app.common import on_gpu, zero_gpu
    from app.runner import ModelHost, stream_run
    from polestar.config import resolve

    active, durations = threading.Event(), []

    def gpu(duration):
        durations.append(duration)

        def decorate(fn):
            @functools.wraps(fn)
            def call(*args, **kwargs):
                active.set()
                try:
                    yield from fn(*args, **kwargs)
                finally:
                    active.clear()
            return call
        return decorate

    fake = types.ModuleType("spaces")
    fake.GPU = gpu
    fake.__spec__ = importlib.machinery.ModuleSpec("spaces", None)  # what importlib's find_spec reads
    monkeypatch.setitem(sys.modules, "spaces", fake)
    assert zero_gpu()
    seen = []

    class Recording(ModelHost):
        def submit(self, fn):
            return super().submit(lambda: (seen.append((active.is_set(), threading.current_thread().name)), fn())[1])

    host = Recording(polestar.DEFAULT_MODEL, inline=True)
    cfg = resolve("fast-dllm", gen_length=32)

    def handler(prompt):
        yield from stream_run(host, prompt, cfg, "fast-dllm", threading.Event(), probe=False)

    frames = list(on_gpu(handler)("Copy the list: 4 8 15 16"))
    assert durations == [120] and frames[-1].done and frames[-1].metrics["nfe"] > 0
    # nothing ran outside the call, nor on the long-lived worker thread (it lives outside every call)
    assert seen and all(a and name == "model-call" for a, name in seen), seen
    assert not active.is_set()
