"""Table 11 on the embedded model: the format of Polestar's cached window hidden states.

    python -m analysis.table11_formats compute --n 200 && python -m analysis.table11_formats plot
"""


from analysis.tables import main  # noqa: E402
from polestar.config import resolve  # noqa: E402

# the paper's rows: the residual formats (x − its cluster centroid, quantized), plain NVFP4 (its collapse), and
# fp16 as the unquantized reference
FORMATS = ("fp16", "fp8-residual", "int8-residual", "mxfp4-residual", "int2-residual", "nvfp4", "nvfp4-residual")


def configs(a):
    return {f: resolve("polestar", gen_length=a.gen_length, polestar_hidden_format=f) for f in FORMATS}


if __name__ == "__main__":
    main("table11_formats", "Hidden-state formats", configs, "fp16", ["arith"])
