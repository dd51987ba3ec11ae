"""Table 4 on the embedded model: Fast-dLLM -> +Polestar-Cache -> +current-block commit -> +suffix commit.

    python -m analysis.table4_ablation compute --n 200 && python -m analysis.table4_ablation plot
"""


from analysis.tables import main  # noqa: E402
from polestar.config import resolve  # noqa: E402


def configs(a):
    g = a.gen_length
    return {
        "fast-dllm": resolve("fast-dllm", gen_length=g),
        "+polestar-cache": resolve("polestar", gen_length=g, polestar_current_commit=False,
                                   polestar_suffix_commit=False),
        "+current-commit": resolve("polestar", gen_length=g, polestar_suffix_commit=False),
        "+suffix-commit": resolve("polestar", gen_length=g),
    }


if __name__ == "__main__":
    main("table4_ablation", "Polestar component ablation", configs, "fast-dllm", ["arith"])
