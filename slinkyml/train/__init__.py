"""A small GPT-style trainer for cluster tests, demos and benchmarks (``python -m slinkyml.train``).
Cheap to import (no torch); names the files it writes so readers need not import the trainer."""

METRICS_FILE = "metrics.jsonl"  # one JSON object per optimizer step (rank 0): step, loss, tokens, time
FINAL_FILE = "final.json"  # written once at the end: final loss, steps, tokens/s, MFU (GPU)
CHECKPOINT_PREFIX = "ckpt-"

__all__ = ["CHECKPOINT_PREFIX", "FINAL_FILE", "METRICS_FILE"]
