"""`RunRecord`: everything the panels draw for one run, filled step by step while the decoder runs.

Arrays are small numpy types (int32 canvases, float32 drift, float16 value states) so frames stay cheap to
send, and the record lives in a session-keyed store rather than in a watched `gr.State`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polestar.config import DecodeConfig
from polestar.trace import StepEvent

REASONS = ("masked", "quota", "threshold", "forced", "factor", "drift", "suffix")


@dataclass
class RunRecord:
    label: str
    config: DecodeConfig
    prompt_len: int
    tokens: list[str] = field(default_factory=list)  # the vocabulary strings of the final canvas (filled at the end)
    events: list[StepEvent] = field(default_factory=list)
    canvases: list[np.ndarray] = field(default_factory=list)  # per step: generated region [G] int32
    drift: list[np.ndarray] = field(default_factory=list)  # per step: [layers, G] float32 (probe)
    values: list[np.ndarray] = field(default_factory=list)  # per step: [G, kv_dim] float16 (probe)
    metrics: dict[str, Any] = field(default_factory=dict)
    vocab: list[str] = field(default_factory=list)  # token id -> display string, for hover text
    mask_id: int = 0
    eos_id: int = 0
    done: bool = False

    @property
    def gen_length(self) -> int:
        return self.config.gen_length

    @property
    def n_steps(self) -> int:
        return len(self.events)

    def reason_grid(self, t: int | None = None) -> np.ndarray:
        """[G] reason index (REASONS) of each generated position after step t (default: the latest)."""
        t = self.n_steps if t is None else t
        grid = np.zeros(self.gen_length, dtype=np.int8)
        for event in self.events[:t]:
            for c in event.commits:
                grid[c.gen_index] = REASONS.index(c.reason)
        return grid

    def commit_info(self) -> tuple[np.ndarray, np.ndarray]:
        """(commit step, confidence) per generated position; step −1 / NaN while masked."""
        step = np.full(self.gen_length, -1, dtype=np.int32)
        conf = np.full(self.gen_length, np.nan, dtype=np.float32)
        for i, event in enumerate(self.events):
            for c in event.commits:
                step[c.gen_index], conf[c.gen_index] = i + 1, c.confidence
        return step, conf
