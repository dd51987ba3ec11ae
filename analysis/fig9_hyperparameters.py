"""Fig 9: block size B, drift history h, drift-gate coefficient α and suffix threshold τ_suffix, each varied alone
from Polestar's defaults (paper App. D.8: LLaDA-8B, GSM8K, generation 256), plus the top-k of the final layer,
where the paper (4) and its public code (1) differ.

    python -m analysis.fig9_hyperparameters --n 100 --out reports/figures

The paper's numbers from its text: B = 64 raises TPF but drops accuracy to 75.1 %; h = 0 (raw drift) raises TPF and
TPS but drops it to 76.91 %; α = 2.5 reaches high TPF at 73.4 %; τ_suffix = 0.85 raises TPF at 76.4 %, 0.95 keeps
accuracy at lower TPF; the defaults (B 32, h 5, α 10, τ_suffix 0.9) are at 78.33 %.
"""

from __future__ import annotations

from analysis import ablations, figio

NAME = "fig9_hyperparameters"
PAPER = {"(a) block size B": {"B=64": 75.1}, "(b) drift history h": {"h=0": 76.91},
         "(c) drift gate α": {"α=2.5": 73.4}, "(d) suffix threshold τ_suffix": {"τ_suffix=0.85": 76.4},
         "defaults": 78.33}  # accuracy %, paper App. D.8


def panels(gen_length: int):
    from polestar.config import resolve

    def pol(**kw):
        return resolve("polestar", gen_length=gen_length, **kw)

    blocks = [b for b in (16, 32, 64) if gen_length % b == 0]
    return {
        "(a) block size B": {f"B={b}": pol(block_length=b) for b in blocks},
        "(b) drift history h": {f"h={h}": pol(polestar_history=h) for h in (0, 3, 5, 7)},
        "(c) drift gate α": {f"α={a:g}": pol(polestar_alpha=a) for a in (2.5, 5.0, 10.0, 20.0)},
        "(d) suffix threshold τ_suffix": {f"τ_suffix={t:g}": pol(polestar_tau_suffix=t) for t in (0.85, 0.9, 0.95)},
        "(e) top-k at the final layer": {f"k_last={k}": pol(polestar_refresh_clusters_last=k) for k in (1, 4)},
    }


REFERENCE = {"(a) block size B": "B=32", "(b) drift history h": "h=5", "(c) drift gate α": "α=10",
             "(d) suffix threshold τ_suffix": "τ_suffix=0.9", "(e) top-k at the final layer": "k_last=4"}


def main(argv: list[str] | None = None) -> None:
    args = figio.parser(__doc__.split("\n\n")[0], n=20).parse_args(argv)
    model = figio.setup(args)
    rows, summary, fig = ablations.run(args, model, panels(args.gen_length), REFERENCE)
    fig.update_layout(title=f"Polestar's hyperparameters ({args.task}, n = {args.n}, generation {args.gen_length})",
                      width=1900)
    figio.write(args, NAME, rows, {"panels": summary, "paper": PAPER}, fig)
    print(summary)


if __name__ == "__main__":
    main()
