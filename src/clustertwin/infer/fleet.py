"""Trace-driven fleet simulation: replicas of one deployment behind a router, with autoscaling, cold
starts, admission control and optional prefill/decode disaggregation (``clustertwin infer simulate``).

Event loop (heapq + per-replica iteration loops, :mod:`clustertwin.infer.replica`): events are trace
arrivals, KV hand-offs / released requests, replicas becoming ready and autoscaler ticks. Before an
event at ``t`` every live replica is advanced to ``t``; a request routed at ``t`` joins the replica's
queue and starts in its next iteration.

- **Router** over ready replicas: ``round-robin``; ``least-outstanding`` (fewest requests queued or
  in flight); ``prefix`` (most leading prefix blocks in the replica's cache, unless its outstanding
  count exceeds the least loaded by ``prefix_balance``: SGLang's cache-aware router). Every replica
  keeps an LRU prefix cache (``prefix_cache_fraction`` of its KV capacity); cached prompt blocks are
  not prefilled again.
- **Autoscaler** every ``scale_interval_s`` (Dynamo's planner: 5-10 s): ``concurrency`` target =
  outstanding requests per replica (Knative/KServe), ``busy`` target = the ready replicas'
  compute-busy fraction over the last interval (``gpu_busy_fraction`` of
  :mod:`clustertwin.infer.fleet_metrics`; the time with a kernel running is no use under continuous
  batching, it stays near 1 at any load); desired = ⌈load/target⌉ clamped to
  [min, max]. Scale-up starts replicas that serve after the **cold start**
  ``cold_start_fixed_s + weight bytes / path bandwidth`` (NVMe ``weights_nvme_gb_per_s``, object store
  ``weights_object_store_gb_per_s``, network: the replica's NIC share × ``weights_network_efficiency``).
  Scale-down waits until the desired count has stayed lower for ``scale_down_delay_s`` (Kubernetes HPA
  stabilisation window, 300 s default), then drains replicas (no new requests; freed when empty).
- **Admission control**: a request whose replica already queues ``max_queue`` requests is rejected
  (Mooncake rejects early rather than scale out); ``max_concurrency`` caps requests in flight
  fleet-wide (vLLM ``--max-concurrency``), the rest wait at the router (their latency counts from
  the trace arrival).
- **Disaggregation** (Splitwise/DistServe): ``prefill_replicas`` replicas run prompts only; the KV of
  a prompt (``input × KV bytes/token``) moves to a decode replica over the scale-out NICs
  (``kv_path="network"``, ``kv_transfer_efficiency``) or NVLink inside a node (``"nvlink"``,
  ``tp_link_efficiency``); ``decode_replicas`` decode. TTFT ends at the prefill's first token.
- **Cost**: provisioned replica time (cold start included, until drained) × GPUs × USD/GPU-hour.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from clustertwin import units
from clustertwin.errors import SpecError, did_you_mean
from clustertwin.infer import inputs
from clustertwin.infer.comm import link_gb_per_s
from clustertwin.infer.fleet_metrics import FleetResult, summarize
from clustertwin.infer.replica import Replica
from clustertwin.infer.roofline import Deployment
from clustertwin.infer.traces import RequestTrace

ROUTERS = ("round-robin", "least-outstanding", "prefix")
TARGETS = ("concurrency", "busy")
WEIGHT_PATHS = ("nvme", "network", "object-store")
KV_PATHS = ("network", "nvlink")
MAX_REPLICAS = 4096
"""Largest fleet simulated (every replica is a Python object stepped by the event loop)."""
MIN_SCALE_INTERVAL_S = 0.1
MAX_WINDOWS = 100_000


@dataclass(frozen=True)
class FleetPolicy:
    """How the fleet is run (see the module docstring)."""

    replicas: int = 1
    """Fixed fleet size; with autoscaling, the replicas warm at the start."""
    router: str = "least-outstanding"
    prefix_balance: int = 8
    autoscale: bool = False
    min_replicas: int = 1
    max_replicas: int = 256
    target_metric: str = "concurrency"
    target_value: float = 16.0
    scale_interval_s: float = 10.0
    scale_down_delay_s: float = 300.0
    weights_from: str = "nvme"
    cold_start_s: float | None = None
    """Override of the modelled cold start, seconds."""
    max_queue: int | None = None
    max_concurrency: int | None = None
    batching: str = "continuous"
    chunked_prefill: bool = True
    disaggregated: bool = False
    prefill_replicas: int = 1
    decode_replicas: int = 1
    kv_path: str = "network"

    def __post_init__(self) -> None:
        for name, val, choices in (("router", self.router, ROUTERS), ("target_metric", self.target_metric, TARGETS),
                                   ("weights_from", self.weights_from, WEIGHT_PATHS),
                                   ("batching", self.batching, ("continuous", "static")),
                                   ("kv_path", self.kv_path, KV_PATHS)):
            if val not in choices:
                raise SpecError(f"unknown {name} '{val}'{did_you_mean(str(val), choices)} (choose from "
                                f"{', '.join(choices)})", path=(name,))
        for name in ("replicas", "min_replicas", "max_replicas", "prefill_replicas", "decode_replicas"):
            inputs.count(name, getattr(self, name))
        inputs.count("max_queue", self.max_queue, minimum=0)
        inputs.count("max_concurrency", self.max_concurrency)
        inputs.count("prefix_balance", self.prefix_balance, minimum=0)
        for name in ("target_value", "scale_interval_s"):
            inputs.positive(name, getattr(self, name), allow_none=False)
        inputs.non_negative("scale_down_delay_s", self.scale_down_delay_s)
        inputs.non_negative("cold_start_s", self.cold_start_s)
        for name in ("replicas", "max_replicas", "prefill_replicas", "decode_replicas"):
            if getattr(self, name) > MAX_REPLICAS:
                raise SpecError(f"at most {MAX_REPLICAS} replicas are simulated, got {getattr(self, name)}",
                                path=(name,))
        if self.scale_interval_s < MIN_SCALE_INTERVAL_S:
            raise SpecError(f"must be >= {MIN_SCALE_INTERVAL_S} s, got {self.scale_interval_s:g}",
                            path=("scale_interval_s",))
        if self.min_replicas > self.max_replicas:
            raise SpecError("min_replicas exceeds max_replicas", path=("min_replicas",))
        if self.autoscale and self.disaggregated:
            raise SpecError("autoscaling of disaggregated pools is not modelled; give fixed pool sizes")


def cold_start_s(dep: Deployment, weights_from: str = "nvme") -> float:
    """Seconds from provisioning a replica to its first iteration: ``cold_start_fixed_s`` + the
    replica's weight bytes over the load path (module docstring)."""
    p = dep.params
    weight_bytes = dep.memory().weights_bytes * dep.gpus
    if weights_from == "nvme":
        gb_s = p.weights_nvme_gb_per_s * math.ceil(dep.gpus / dep.node.gpus)
    elif weights_from == "object-store":
        gb_s = p.weights_object_store_gb_per_s
    elif weights_from == "network":
        nic_gbit = dep.node.nics.gbit_per_s * dep.node.nics.count / dep.node.gpus * dep.gpus
        gb_s = units.gbit_to_gb_per_s(nic_gbit) * p.weights_network_efficiency
    else:
        raise SpecError(f"unknown weights path '{weights_from}' (choose from {', '.join(WEIGHT_PATHS)})")
    return p.cold_start_fixed_s + weight_bytes / (gb_s * units.GB)


def kv_transfer_s(dep: Deployment, tokens: np.ndarray, kv_path: str) -> np.ndarray:
    """Seconds to move ``tokens`` of KV cache from a prefill to a decode replica of ``dep``."""
    p = dep.params
    nbytes = np.asarray(tokens, dtype=float) * dep.memory().kv_bytes_per_token * dep.gpus
    if kv_path == "nvlink":
        bw = link_gb_per_s(dep.node) * dep.gpus * p.tp_link_efficiency
    else:
        nic_gbit = dep.node.nics.gbit_per_s * dep.node.nics.count / dep.node.gpus * dep.gpus
        bw = units.gbit_to_gb_per_s(nic_gbit) * p.kv_transfer_efficiency
    return p.tp_allreduce_latency_us * units.US + nbytes / (bw * units.GB)


class _Fleet:
    """Mutable state of one run (replicas, router, autoscaler, per-request outcomes)."""

    def __init__(self, dep: Deployment, trace: RequestTrace, pol: FleetPolicy, slo_ttft_s: float,
                 slo_tpot_s: float | None, window_s: float, max_misses: int | None) -> None:
        self.dep, self.tr, self.pol = dep, trace, pol
        n = len(trace)
        self.arr = trace.arrival_s.astype(float)
        self.isl, self.osl = trace.input_len.tolist(), trace.output_len.tolist()
        self.work = list(self.isl)
        self.first = np.full(n, np.nan)
        self.done = np.full(n, np.nan)
        self.rejected = np.zeros(n, dtype=bool)
        self.slo_ttft_s, self.slo_tpot_s = slo_ttft_s, slo_tpot_s
        self.max_misses = max_misses
        self.misses = 0
        self.window_s = window_s
        mem = dep.memory()
        self.kv_tokens = mem.kv_capacity_tokens
        self.step = dep.step_model().scalar_fn()
        s = dep.shape
        self.flops_token = 2.0 * s.params_linear_active
        self.flops_attn = s.attn_flops_per_ctx_token
        peak16 = float(dep.gpu.peak_tflops("bf16") or dep.gpu.peak_tflops("fp16") or 0.0) * units.TFLOP
        self.busy_flops_s = dep.gpus * peak16 * dep.params.gemm_efficiency  # one replica fully compute-busy
        blocks = trace.prefix_blocks
        self.blocks = blocks
        self.cache_blocks = int(dep.params.prefix_cache_fraction * self.kv_tokens / trace.block_tokens) \
            if blocks is not None else 0
        self.cold_s = pol.cold_start_s if pol.cold_start_s is not None else cold_start_s(dep, pol.weights_from)
        self.events: list[tuple[float, int, int, int]] = []  # (t, seq, kind, request)
        self.seq = 0
        self.all: list[Replica] = []
        self.life: dict[int, list[float]] = {}  # replica id -> [provisioned at, stopped at]
        self.ready: list[Replica] = []
        self.decode_pool: list[Replica] = []
        self.starting: list[tuple[float, int, Replica]] = []
        self.draining: list[Replica] = []
        self.rr = 0
        self.active: dict[int, Replica] = {}
        self.in_flight = 0
        self.held: list[int] = []
        self.transfer = kv_transfer_s(dep, trace.input_len, pol.kv_path) if pol.disaggregated else None
        self.below_since: float | None = None
        self.last_busy = 0.0
        self.scale_log: list[tuple[float, int]] = []

    # ---------------------------------------------------------------- replicas
    def new_replica(self, t_ready: float, t_prov: float, mode: str = "both") -> Replica:
        p = self.dep.params
        rep = Replica(len(self.all), self.step, kv_tokens=self.kv_tokens, max_seqs=p.max_batch_seqs,
                      max_tokens=p.max_batch_tokens, chunked=self.pol.chunked_prefill,
                      static=self.pol.batching == "static", mode=mode, isl=self.isl, osl=self.osl, work=self.work,
                      first=self.first, done=self.done, on_first=self.on_first, on_done=self.on_done,
                      flops_token=self.flops_token, flops_attn=self.flops_attn, window_s=self.window_s,
                      cache_blocks=self.cache_blocks, start_s=t_ready)
        self.all.append(rep)
        self.life[rep.rid] = [t_prov, math.nan]
        return rep

    def on_first(self, r: int, t: float) -> None:
        if t - self.arr[r] > self.slo_ttft_s:
            self.misses += 1

    def on_done(self, rep: Replica, r: int, t: float) -> None:
        if rep.mode == "prefill":
            self.push(t + float(self.transfer[r]), 1, r)  # type: ignore[index]
            return
        self.in_flight -= 1
        if self.slo_tpot_s is not None and self.osl[r] > 1:
            ttft = self.first[r] - self.arr[r]
            if ttft <= self.slo_ttft_s and (t - self.first[r]) > self.slo_tpot_s * (self.osl[r] - 1):
                self.misses += 1
        if self.held:
            self.push(t, 2, self.held.pop(0))

    def push(self, t: float, kind: int, r: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, r))

    # ---------------------------------------------------------------- routing
    def pick(self, pool: list[Replica], r: int) -> Replica:
        mode = self.pol.router
        if mode == "round-robin":
            self.rr += 1
            return pool[self.rr % len(pool)]
        least = min(pool, key=lambda x: x.outstanding)
        if mode == "prefix" and self.blocks is not None:
            b = self.blocks[r]
            best, hit = least, least.cached_blocks(b)
            for rep in pool:
                h = rep.cached_blocks(b)
                if h > hit and rep.outstanding <= least.outstanding + self.pol.prefix_balance:
                    best, hit = rep, h
            return best
        return least

    def route(self, r: int, t: float) -> None:
        pol = self.pol
        if pol.max_concurrency is not None and self.in_flight >= pol.max_concurrency:
            self.held.append(r)
            return
        if not self.ready:
            raise SpecError("no replica is ready to serve: raise min_replicas or the initial replicas")
        rep = self.pick(self.ready, r)
        if pol.max_queue is not None and len(rep.waiting) >= pol.max_queue:
            self.rejected[r] = True
            self.misses += 1
            return
        if self.blocks is not None:
            b = self.blocks[r]
            hit = rep.cached_blocks(b)
            rep.cache_lookups += len(b)
            rep.cache_hits += hit
            self.work[r] = max(1, self.isl[r] - hit * self.tr.block_tokens)
            rep.remember(b)
        self.in_flight += 1
        self._join(rep, r, t)

    def _join(self, rep: Replica, r: int, t: float) -> None:
        """Request ``r`` joins ``rep`` at ``t``: a continuous-batching replica's decode stretch is split
        at ``t`` so the request starts in the next iteration (a static batch admits nothing mid-batch)."""
        if rep.rid in self.active and not rep.static:
            rep.advance_to(t, cut=True)
        rep.submit(r, t)
        self.active[rep.rid] = rep

    # ---------------------------------------------------------------- autoscaling
    def promote(self, t: float) -> None:
        while self.starting and self.starting[0][0] <= t:
            _, _, rep = heapq.heappop(self.starting)
            self.ready.append(rep)
            self.scale_log.append((rep.now, len(self.ready)))

    def autoscale(self, t: float) -> None:
        pol = self.pol
        for rep in list(self.draining):
            if rep.idle:
                self.draining.remove(rep)
                self.life[rep.rid][1] = t
        ready = len(self.ready)
        if pol.target_metric == "concurrency":
            load = sum(x.outstanding for x in self.ready) + len(self.held)
            desired = math.ceil(load / pol.target_value)
        else:
            done = sum(x.flops_total for x in self.all)
            frac = (done - self.last_busy) / (max(ready, 1) * pol.scale_interval_s * self.busy_flops_s)
            self.last_busy = done
            desired = math.ceil(ready * frac / pol.target_value)
        desired = min(max(desired, pol.min_replicas), pol.max_replicas)
        current = ready + len(self.starting)
        if desired > current:
            self.below_since = None
            for _ in range(desired - current):
                rep = self.new_replica(t + self.cold_s, t)
                heapq.heappush(self.starting, (t + self.cold_s, rep.rid, rep))
        elif desired < current:
            if self.below_since is None:
                self.below_since = t
            elif t - self.below_since >= pol.scale_down_delay_s:
                self.below_since = None
                for _ in range(current - desired):
                    if self.starting:
                        _, _, rep = self.starting.pop()
                        heapq.heapify(self.starting)
                        self.life[rep.rid][1] = t
                    elif len(self.ready) > 1:
                        rep = min(self.ready, key=lambda x: x.outstanding)
                        self.ready.remove(rep)
                        self.draining.append(rep)
                self.scale_log.append((t, len(self.ready)))
        else:
            self.below_since = None

    # ---------------------------------------------------------------- run
    def run(self) -> bool:
        pol, arr, n = self.pol, self.arr, len(self.arr)
        if pol.disaggregated:
            self.ready = [self.new_replica(0.0, 0.0, "prefill") for _ in range(pol.prefill_replicas)]
            self.decode_pool = [self.new_replica(0.0, 0.0, "decode") for _ in range(pol.decode_replicas)]
        else:
            self.ready = [self.new_replica(0.0, 0.0) for _ in range(pol.replicas)]
        tick = pol.scale_interval_s if pol.autoscale else math.inf
        i = 0
        while True:
            ta = arr[i] if i < n else math.inf
            th = self.events[0][0] if self.events else math.inf
            tsr = self.starting[0][0] if self.starting else math.inf
            t = min(ta, th, tick if i < n else math.inf, tsr)
            for rep in list(self.active.values()):  # only replicas whose state changes by t
                if rep.next_change <= t:
                    rep.advance_to(t, cut=False)
                    if rep.idle:
                        del self.active[rep.rid]
            if t == math.inf:
                if not self.events:
                    break
                continue
            self.promote(t)
            if self.max_misses is not None and self.misses > self.max_misses:
                return False
            if t == tick and tick <= min(ta, th):
                self.autoscale(t)
                tick += pol.scale_interval_s
            elif th <= ta and self.events:
                _, _, kind, r = heapq.heappop(self.events)
                if kind == 1:  # KV hand-off to the decode pool
                    self._join(self.pick(self.decode_pool, r), r, t)
                else:
                    self.route(r, t)
            elif ta == t:
                self.route(i, t)
                i += 1
        return not (self.max_misses is not None and self.misses > self.max_misses)


def simulate_fleet(dep: Deployment, trace: RequestTrace, policy: FleetPolicy | None = None, *,
                   slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None, window_s: float = 60.0,
                   usd_per_gpu_hour: float | None = None, abort_below_attainment: float | None = None,
                   request_rate: float | None = None) -> FleetResult:
    """Serve ``trace`` with ``policy`` on replicas of ``dep``; per-window and whole-run metrics.

    ``abort_below_attainment``: stop as soon as the SLO attainment can no longer reach it (sizing
    searches); the result is then marked ``aborted``."""
    from clustertwin.infer.sizing import usd_per_gpu_hour as price_of

    pol = policy or FleetPolicy()
    dep.check_fits()
    inputs.positive("slo_ttft_ms", slo_ttft_ms)
    inputs.positive("slo_tpot_ms", slo_tpot_ms)
    inputs.positive("window_s", window_s, allow_none=False)
    inputs.positive("usd_per_gpu_hour", usd_per_gpu_hour)
    if len(trace) == 0:
        raise SpecError("the trace has no requests")
    if trace.duration_s / window_s > MAX_WINDOWS:
        raise SpecError(f"{trace.duration_s:,.0f} s in windows of {window_s:g} s is more than {MAX_WINDOWS:,} "
                        "windows; give a longer --window-s", path=("window_s",))
    need = int(np.max(trace.input_len + trace.output_len))
    if need > dep.memory().kv_capacity_tokens:
        raise SpecError(f"a request of {need:,} tokens exceeds the KV capacity of "
                        f"{dep.memory().kv_capacity_tokens:,.0f} tokens per replica; use more GPUs per replica")
    max_misses = None
    if abort_below_attainment is not None and slo_ttft_ms is not None:
        max_misses = math.floor((1.0 - abort_below_attainment) * len(trace))
    fl = _Fleet(dep, trace, pol, (slo_ttft_ms or math.inf) / 1e3,
                slo_tpot_ms / 1e3 if slo_tpot_ms is not None else None, window_s, max_misses)
    complete = fl.run()
    price = usd_per_gpu_hour if usd_per_gpu_hour is not None else price_of(dep.node)
    return summarize(fl, complete, price, slo_ttft_ms, slo_tpot_ms, request_rate)
