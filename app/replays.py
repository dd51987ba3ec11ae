"""Cached example runs that replay instantly: task examples decoded once with the shipped model, stored as run
traces (`runio` parquet) under `assets/replays/` with an index that names the model they were recorded with.

    python -m app.replays            # re-record them (after the embedded model changes; ~1 minute on 2 cores)

The app lists them in the Run tab; picking one loads the trace and plays it back step by step without the model.
A replay recorded with a different model than the one being served is labelled as such, never passed off as
the current model's behaviour.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

REPLAY_DIR = Path(__file__).resolve().parent.parent / "assets" / "replays"
INDEX = "index.json"
# (index in app.examples.examples(), method): one arithmetic and one list task, Fast-dLLM next to Polestar
RECORDED = ((4, "fast-dllm"), (4, "polestar"), (0, "fast-dllm"), (0, "polestar"))


@dataclass(frozen=True)
class Replay:
    name: str
    file: Path
    prompt: str
    method: str
    model_sha256: str


def model_fingerprint(model_path: str | Path) -> str:
    from polestar.models.loader import weights_fingerprint

    return weights_fingerprint(model_path)


def available(directory: Path = REPLAY_DIR) -> list[Replay]:
    """The recorded replays (empty when none were shipped or the index is unreadable)."""
    try:
        entries = json.loads((directory / INDEX).read_text())
    except (OSError, ValueError):
        return []
    return [Replay(e["name"], directory / e["file"], e["prompt"], e["method"], e["model_sha256"]) for e in entries]


def record(model_path: str | Path, directory: Path = REPLAY_DIR) -> list[Replay]:
    """Decode RECORDED with the analysis probe on and write the traces and the index."""
    from app import runio
    from app.runner import ModelHost, stream_run
    from app.examples import examples as task_examples
    from polestar.config import resolve

    directory.mkdir(parents=True, exist_ok=True)
    host, examples, sha = ModelHost(str(model_path)), task_examples(), model_fingerprint(model_path)
    out = []
    for index, method in RECORDED:
        ex = examples[index]
        rec = list(stream_run(host, ex.prompt, resolve(method), method, threading.Event(), frame_s=1e9))[-1]
        name = f"{ex.task} #{index} · {method}"
        file = f"{ex.task}-{index}-{method}.parquet"
        runio.save_parquet(rec, directory / file)
        out.append(Replay(name, directory / file, ex.prompt, method, sha))
    (directory / INDEX).write_text(json.dumps(
        [{"name": r.name, "file": r.file.name, "prompt": r.prompt, "method": r.method, "model_sha256": r.model_sha256}
         for r in out], indent=1) + "\n")
    return out


if __name__ == "__main__":
    import polestar

    for replay in record(polestar.DEFAULT_MODEL):
        print(replay.name, replay.file, f"{replay.file.stat().st_size / 1024:.0f} KiB")
