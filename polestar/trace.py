"""The structured per-step trace of a decode: one `StepEvent` per forward, convertible to DataFrames.

Schema (`Trace.frames()`):
- steps:   one row per forward — block, step, nfe, pass (a `kinds.PassKind` value), rows (query rows
           pushed through layer 0), n_committed, n_refreshed (positions recomputed beyond the step's own
           queries), refreshed_layers, ms (wall time of the step, device synchronised).
- commits: one row per committed token — block, step, nfe, position (canvas index), gen_index (index in
           the generated region), token, confidence, reason (a `kinds.CommitReason` value: "quota" |
           "threshold" | "factor" | "forced" | "drift" | "suffix").
Extra per-method columns go into `StepEvent.extra` (a flat dict of scalars or lists) and appear in `steps`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Commit:
    position: int
    gen_index: int
    token: int
    confidence: float
    reason: str


@dataclass
class StepEvent:
    block: int
    step: int
    nfe: int
    kind: str
    rows: int
    commits: list[Commit]
    refreshed_positions: list[int]
    refreshed_layers: list[int]
    ms: float
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Trace:
    prompt_len: int
    gen_length: int
    block_length: int
    events: list[StepEvent] = field(default_factory=list)

    def frames(self):
        """(steps, commits) pandas DataFrames; the schema is in the module docstring."""
        import pandas as pd

        steps = pd.DataFrame(
            [
                {"block": e.block, "step": e.step, "nfe": e.nfe, "pass": e.kind, "rows": e.rows,
                 "n_committed": len(e.commits), "n_refreshed": len(e.refreshed_positions),
                 "refreshed_layers": list(e.refreshed_layers), "ms": e.ms, **e.extra}
                for e in self.events
            ]
        )
        commits = pd.DataFrame(
            [{"block": e.block, "step": e.step, "nfe": e.nfe, **asdict(c)} for e in self.events for c in e.commits],
            columns=["block", "step", "nfe", "position", "gen_index", "token", "confidence", "reason"],
        )
        return steps, commits

    def save(self, path: str | Path) -> tuple[Path, Path]:
        """Write `<path>.steps.parquet` and `<path>.commits.parquet`; returns both paths."""
        base = Path(path)
        steps, commits = self.frames()
        out = (base.with_suffix(".steps.parquet"), base.with_suffix(".commits.parquet"))
        steps.to_parquet(out[0])
        commits.to_parquet(out[1])
        return out
