"""Command-line interface (typer + rich). Renders model results; holds no model logic."""

import os

# The models run numpy on small arrays, where OpenBLAS's thread pool costs more CPU than it saves (infer size:
# 0.50 -> 0.40 s CPU); a user's own setting wins. Set here, before any command module imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
