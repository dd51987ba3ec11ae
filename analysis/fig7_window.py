"""Fig 7: the number of centroids K and the local window's size, each varied alone from Polestar's defaults
(K = 8 with the top half refreshed; window 2 blocks before and 1 after the current block).

    python -m analysis.fig7_window --n 100 --out reports/figures
"""

from __future__ import annotations

from analysis import ablations, figio

NAME = "fig7_window"


def panels(gen_length: int):
    from polestar.config import resolve

    def pol(**kw):
        return resolve("polestar", gen_length=gen_length, **kw)

    return {
        "(a) centroids K (top K/2 refreshed)": {
            f"K={k}": pol(polestar_centroids=k, polestar_refresh_clusters=k // 2, polestar_refresh_clusters_last=k // 2)
            for k in (4, 8, 16)},
        "(b) window (blocks before, after)": {
            f"{p}+{s}": pol(polestar_window_prefix=p, polestar_window_suffix=s) for p, s in ((1, 1), (2, 1), (2, 2),
                                                                                            (4, 2))},
    }


REFERENCE = {"(a) centroids K (top K/2 refreshed)": "K=8", "(b) window (blocks before, after)": "2+1"}


def main(argv: list[str] | None = None) -> None:
    args = figio.parser(__doc__.split("\n\n")[0], n=20).parse_args(argv)
    model = figio.setup(args)
    rows, summary, fig = ablations.run(args, model, panels(args.gen_length), REFERENCE)
    fig.update_layout(title=f"Centroids and window ({args.task}, n = {args.n}, generation {args.gen_length})")
    figio.write(args, NAME, rows, {"panels": summary}, fig)
    print(summary)


if __name__ == "__main__":
    main()
