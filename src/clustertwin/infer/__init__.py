"""LLM inference: roofline prefill/decode with achieved efficiencies, KV cache (MHA/GQA/MQA/MLA),
quantisation, continuous-batching simulation, and sizing for a request rate under TTFT/TPOT SLOs."""

from clustertwin.infer.arch import kv_bytes_per_token, shape
from clustertwin.infer.estimator import InferEstimate, estimate, steady_state
from clustertwin.infer.fleet import FleetPolicy, simulate_fleet
from clustertwin.infer.params import InferParams
from clustertwin.infer.roofline import Deployment, StepModel
from clustertwin.infer.simulate import SimResult, Workload, simulate
from clustertwin.infer.sizing import Candidate, SizingResult, size

__all__ = [
    "Candidate",
    "Deployment",
    "FleetPolicy",
    "InferEstimate",
    "InferParams",
    "SimResult",
    "SizingResult",
    "StepModel",
    "Workload",
    "estimate",
    "kv_bytes_per_token",
    "shape",
    "simulate",
    "simulate_fleet",
    "size",
    "steady_state",
]
