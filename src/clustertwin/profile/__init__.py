"""Measured training steps from profiler traces (Kineto JSON): per-rank, per-step breakdown."""
