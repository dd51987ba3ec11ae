"""Fig 6b–d: Polestar's commit rule, top-k refreshed clusters and update schedule τ_upd, each varied alone from the
defaults (paper §5.3: LLaDA-8B, GSM8K, generation 256, block 32).

    python -m analysis.fig6_ablations --n 100 --out reports/figures

(b) commit rule on Polestar-Cache: the threshold τ_s 0.9 and 0.7, the drift rule in the current block, and the
drift rule plus suffix commits (Polestar). The paper's raw-drift-magnitude rule has no switch here (our drift rule
is the drift delta's). (c) k of K = 8 clusters refreshed per layer (the last layer alike). (d) τ_upd (0: no refresh
steps inside a block).
"""

from __future__ import annotations

from analysis import ablations, figio

NAME = "fig6_ablations"
PAPER = {"(b) commit rule": {"τ_s 0.9": (None, 2.87), "τ_s 0.7": (None, 3.71), "drift rule": (78.6, 3.48),
                             "drift + suffix (Polestar)": (78.33, 3.67)}}  # (accuracy %, TPF), paper §5.3


def panels(gen_length: int):
    from polestar.config import resolve

    def pol(**kw):
        return resolve("polestar", gen_length=gen_length, **kw)

    return {
        "(b) commit rule": {
            "τ_s 0.9": resolve("polestar-cache", gen_length=gen_length),
            "τ_s 0.7": resolve("polestar-cache", gen_length=gen_length, tau_s=0.7),
            "drift rule": pol(polestar_suffix_commit=False),
            "drift + suffix (Polestar)": pol(),
        },
        "(c) top-k of 8 clusters": {f"k={k}": pol(polestar_refresh_clusters=k, polestar_refresh_clusters_last=k)
                                    for k in (2, 4, 6, 8)},
        "(d) update schedule τ_upd": {f"τ_upd={t}": pol(polestar_tau_upd=t) for t in (0, 1, 2, 3, 5)},
    }


REFERENCE = {"(b) commit rule": "τ_s 0.9", "(c) top-k of 8 clusters": "k=4", "(d) update schedule τ_upd": "τ_upd=3"}


def main(argv: list[str] | None = None) -> None:
    args = figio.parser(__doc__.split("\n\n")[0], n=20).parse_args(argv)
    model = figio.setup(args)
    rows, summary, fig = ablations.run(args, model, panels(args.gen_length), REFERENCE)
    fig.update_layout(title=f"Polestar ablations ({args.task}, n = {args.n}, generation {args.gen_length})")
    figio.write(args, NAME, rows, {"panels": summary, "paper": PAPER}, fig)
    print(summary)


if __name__ == "__main__":
    main()
