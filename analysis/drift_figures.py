"""Run the four drift figures in one process, so each example is decoded and probed once for all of them:
Fig 3 (`fig3_drift_staleness`), Fig 4 (`fig4_drift_heatmap`), Fig 6a (`fig6a_selection`), Fig 8
(`fig8_multitoken_drift`). Takes the same arguments as each.

    python -m analysis.drift_figures --n 10 --out reports/figures
"""

from __future__ import annotations

import importlib
import sys

FIGURES = ("fig3_drift_staleness", "fig4_drift_heatmap", "fig6a_selection", "fig8_multitoken_drift")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    for name in FIGURES:
        print(f"== {name}", flush=True)
        importlib.import_module(f"analysis.{name}").main(argv)


if __name__ == "__main__":
    main()
