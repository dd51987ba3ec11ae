"""Triton kernels for Polestar's hot paths, each beside a torch reference (the kernels issue fills this)."""
