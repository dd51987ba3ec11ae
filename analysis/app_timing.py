"""Measure the app against its targets: time from Run to the first streamed update and to the end for the
default example, and the cost of a traced decode against an untraced one. Prints one JSON line.

    python -m analysis.app_timing
"""

import json
import statistics
import time


def main() -> None:
    from gradio_client import Client

    import app
    import polestar
    from app.examples import default_prompt

    prompt = default_prompt()
    demo = app.create_app(polestar.DEFAULT_MODEL)
    demo.queue().launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    client = Client(demo.local_url, verbose=False)
    list(client.submit(prompt, api_name="/run"))  # warm-up (model load, imports)
    firsts, ends = [], []
    for _ in range(3):
        start = time.perf_counter()
        first = None
        for _ in client.submit(prompt, api_name="/run"):
            first = first or time.perf_counter() - start
        firsts.append(first)
        ends.append(time.perf_counter() - start)
    demo.close()
    model = polestar.load_model(polestar.DEFAULT_MODEL)
    cost = {}
    for traced in (False, True, False, True, False, True):
        cost.setdefault(traced, []).append(polestar.generate(model, prompt, "polestar", trace=traced).wall_s)
    print(json.dumps({
        "prompt": prompt, "first_update_s": round(statistics.median(firsts), 3),
        "end_s": round(statistics.median(ends), 3),
        "traced_over_untraced": round(statistics.median(cost[True]) / statistics.median(cost[False]), 3),
    }))


if __name__ == "__main__":
    main()
