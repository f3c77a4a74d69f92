"""clustertwin: a calibrated digital twin of AI compute clusters.

Layers (each imports only from itself or below): specs/catalog -> topology/comm/facility ->
train/infer -> reliability/sched -> ops/deploy/sweep/report -> cli.
"""

__version__ = "0.1.0"
