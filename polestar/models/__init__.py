"""Our transformer, its explicit K/V cache, per-family adapters and the checkpoint loader."""
