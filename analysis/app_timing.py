"""Measure the app against its targets: time from Run to the first streamed update and to the end for the
default example, on an idle CPU and while a second process keeps one core busy (a pure-Python spin loop this
script starts and stops itself), and the cost of a traced decode against an untraced one. The app runs as
`python app.py` in its own process and this script's client stands in for the browser. Prints one JSON line.

    python -m analysis.app_timing
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

BUSY = "while True: pass"  # one core busy, as another user's job on a shared machine


def _runs(client, prompt: str, repeats: int) -> tuple[float, float]:
    """Median (first update, end) seconds of `repeats` runs of `prompt` through the /run endpoint."""
    firsts, ends = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        first = None
        for _ in client.submit(prompt, api_name="/run"):
            first = first or time.perf_counter() - start
        firsts.append(first)
        ends.append(time.perf_counter() - start)
    return statistics.median(firsts), statistics.median(ends)


def _serve(port: int) -> subprocess.Popen:
    """`python app.py` in its own process, as a user starts it (its thread settings, its own interpreter), once
    it answers on `port`; the client here then stands in for the browser."""
    import urllib.request

    server = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
            return server
        except OSError:
            if server.poll() is not None:
                raise SystemExit(f"app.py exited with {server.returncode} before serving")
            time.sleep(0.5)
    server.kill()
    raise SystemExit("app.py did not serve within 120 s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--port", type=int, default=7869)
    args = parser.parse_args()
    from gradio_client import Client

    import polestar
    from app.examples import default_prompt

    prompt = default_prompt()
    server = _serve(args.port)
    try:
        client = Client(f"http://127.0.0.1:{args.port}/", verbose=False)
        list(client.submit(prompt, api_name="/run"))  # warm-up (model load, imports)
        idle = _runs(client, prompt, args.repeats)
        load = subprocess.Popen([sys.executable, "-c", BUSY])
        try:
            busy = _runs(client, prompt, args.repeats)
        finally:
            load.kill()
            load.wait()
    finally:
        server.terminate()
        server.wait()
    model = polestar.load_model(polestar.DEFAULT_MODEL)
    cost = {}
    for traced in (False, True, False, True, False, True):
        cost.setdefault(traced, []).append(polestar.generate(model, prompt, "polestar", trace=traced).wall_s)
    print(json.dumps({
        "prompt": prompt, "first_update_s": round(idle[0], 3), "end_s": round(idle[1], 3),
        "busy_core_first_update_s": round(busy[0], 3), "busy_core_end_s": round(busy[1], 3),
        "traced_over_untraced": round(statistics.median(cost[True]) / statistics.median(cost[False]), 3),
    }))


if __name__ == "__main__":
    main()
