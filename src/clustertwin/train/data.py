"""The data-loading term of a training step: the exposed stall of the data path after prefetch overlap.

One step needs ``S = global_batch`` samples (sequences for LLMs). The path from shared storage to the
hosts delivers ``rate`` samples/s for the job's ``ceil(gpus / gpus_per_node)`` client nodes: the slowest of
its stages (storage read, IOPS, metadata, storage network, client NICs, client software, local NVMe, host
decode; :func:`clustertwin.datapath.path_stages`). Loading one step takes ``t_load = S / rate``; with
prefetch the loaders fill step ``k + 1`` while the GPUs compute step ``k``:

    data_stall = max(0, t_load - t_step)      (prefetch; otherwise t_load)

with ``t_step`` the step without data stall (:func:`clustertwin.datapath.data_stall`, docs/datapath.md).
The default dataset is tokenized text (int32 tokens in 1 GB shards), whose demand is a few GB/s for LLM
training, so the term is zero on the catalog's clusters unless storage is starved.
"""

from __future__ import annotations

import math

import numpy as np

from clustertwin.datapath import DEFAULT_DATA_PARAMS, DatasetSpec, DataStall, data_stall, dataset, path_stages
from clustertwin.specs.cluster import ClusterSpec
from clustertwin.train.spec_keys import spec_key

DEFAULT_DATASET = "tokenized-text"
_RATES: dict[tuple, float] = {}
_STALLS: dict[tuple, DataStall] = {}
_CACHE_LIMIT = 1024


def delivered_samples_per_s(cluster: ClusterSpec, ds: DatasetSpec, nodes: int, seq_len: int) -> float:
    """Samples/s of the slowest stage of the path for ``nodes`` client nodes (cached by value)."""
    key = (spec_key(cluster), ds, nodes, seq_len)
    hit = _RATES.get(key)
    if hit is not None:
        return hit
    rate = min(s.samples_per_s for s in path_stages(cluster, ds, nodes, seq_len=seq_len, params=DEFAULT_DATA_PARAMS))
    if len(_RATES) >= _CACHE_LIMIT:
        _RATES.clear()
    _RATES[key] = rate
    return rate


def data_stall_time(cluster: ClusterSpec, dataset_ref, step_s, gpus, samples_per_step: float, seq_len: int):
    """Exposed data stall (seconds per step) of every layout (module docstring); ``step_s`` and ``gpus``
    are floats or arrays; ``dataset_ref`` None: no data term."""
    if dataset_ref is None:
        return 0.0 if not isinstance(step_s, np.ndarray) else np.zeros(np.shape(step_s))
    ds = dataset(dataset_ref)
    gpn = cluster.node.gpus
    if not isinstance(gpus, np.ndarray):
        rate = delivered_samples_per_s(cluster, ds, max(1, math.ceil(int(gpus) / gpn)), seq_len)
        load = samples_per_step / rate
        return max(0.0, load - float(step_s)) if ds.prefetch else load
    nodes = np.maximum(-(-np.asarray(gpus, dtype=np.int64) // gpn), 1)
    uniq, inv = np.unique(nodes, return_inverse=True)
    rates = np.array([delivered_samples_per_s(cluster, ds, int(n), seq_len) for n in uniq])
    load = samples_per_step / rates[inv.reshape(-1)].reshape(nodes.shape)
    return np.maximum(0.0, load - step_s) if ds.prefetch else load


def data_path(cluster: ClusterSpec, dataset_ref, step_without_data_s: float, gpus: int, samples_per_step: float,
              seq_len: int) -> DataStall:
    """The full :class:`~clustertwin.datapath.DataStall` of one layout (stages, bottleneck) for reports
    (cached by value: a pure function of its arguments)."""
    try:
        key = (spec_key(cluster), dataset_ref, float(step_without_data_s), int(gpus), float(samples_per_step),
               int(seq_len))
        hit = _STALLS.get(key)
    except TypeError:  # an inline mapping: not hashable, not cached
        return data_stall(cluster, dataset_ref, step_without_data_s, samples_per_step, gpus, seq_len=seq_len)
    if hit is None:
        if len(_STALLS) >= _CACHE_LIMIT:
            _STALLS.clear()
        hit = _STALLS[key] = data_stall(cluster, dataset_ref, step_without_data_s, samples_per_step, gpus,
                                        seq_len=seq_len)
    return hit
