"""Table 1 on the embedded model: baseline, Fast-dLLM, Elastic-Cache, d2Cache, EntropyCache, Polestar.

    python -m analysis.table1_methods compute --n 200 --gen-length 256 --suites arith,lists   # resumable
    python -m analysis.table1_methods plot --gen-length 256
"""


from analysis.tables import main  # noqa: E402
from polestar.config import resolve  # noqa: E402

METHODS = ("baseline", "fast-dllm", "elastic-cache", "d2cache", "entropy-cache", "polestar")


def configs(a):
    return {m: resolve(m, gen_length=a.gen_length) for m in METHODS}


if __name__ == "__main__":
    main("table1_methods", "Methods on held-out tasks", configs, "baseline", ["arith"])
