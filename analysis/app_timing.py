"""Measure the app against its targets: time from Run to the first streamed update and to the end for the
default example, on an idle CPU and while a second process keeps one core busy (a pure-Python spin loop this
script starts and stops itself), and the cost of a traced decode against an untraced one. Prints one JSON line.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from gradio_client import Client

    import app
    import polestar
    from app.examples import default_prompt

    prompt = default_prompt()
    demo = app.create_app(polestar.DEFAULT_MODEL)
    demo.queue().launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    client = Client(demo.local_url, verbose=False)
    list(client.submit(prompt, api_name="/run"))  # warm-up (model load, imports)
    idle = _runs(client, prompt, args.repeats)
    load = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        busy = _runs(client, prompt, args.repeats)
    finally:
        load.kill()
        load.wait()
    demo.close()
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
