"""The data path: shared storage -> storage network -> client NICs and file-system client -> host decode.

Entry points: :func:`data_stall` (exposed data-loading stall of a training step, with the bottleneck
named), :func:`path_stages` (capacity of every stage), :func:`checkpoint_path` (checkpoint write and
restart read over the same path), :func:`mlperf_storage` (MLPerf Storage v1.0 accelerators supported;
:mod:`~clustertwin.datapath.holdout` refits its global numbers and scores them held out by submitter).
Derivations: docs/datapath.md.
"""

from clustertwin.datapath.checkpoint import CheckpointPath, checkpoint_path
from clustertwin.datapath.dataset import DATASETS, DatasetSpec, dataset
from clustertwin.datapath.mlperf import WORKLOADS, MLPerfPrediction, mlperf_storage
from clustertwin.datapath.params import DEFAULT_DATA_PARAMS, DataParams
from clustertwin.datapath.path import STAGES, DataStall, Stage, binding_read_gb_per_s, data_stall, path_stages

__all__ = [
    "DATASETS",
    "DEFAULT_DATA_PARAMS",
    "STAGES",
    "WORKLOADS",
    "CheckpointPath",
    "DataParams",
    "DataStall",
    "DatasetSpec",
    "MLPerfPrediction",
    "Stage",
    "binding_read_gb_per_s",
    "checkpoint_path",
    "data_stall",
    "dataset",
    "mlperf_storage",
    "path_stages",
]
