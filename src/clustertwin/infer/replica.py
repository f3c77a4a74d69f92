"""One serving replica inside a fleet, advanced iteration by iteration on request (event-driven).

Same scheduler as :mod:`clustertwin.infer.simulate` (FCFS, whole-sequence KV reservation, a token
budget per iteration, chunked prefill), plus:

- ``batching="static"``: a new batch is admitted only when the previous one has fully finished
  (request-level batching, no continuous batching);
- ``mode``: ``both`` (co-located prefill + decode), ``prefill`` (a request leaves at its first token,
  its KV handed to a decode replica), ``decode`` (requests arrive prefilled);
- a prefix cache of block ids (LRU, ``cache_blocks`` blocks): a request's leading blocks found in it
  are not prefilled again (vLLM automatic prefix caching / SGLang RadixAttention);
- decode-only stretches (no prompt in flight) advance many iterations in one step, up to the next
  completion or the requested time: each iteration adds ``B`` context tokens, so the stretch takes
  ``k·t(B, ctx + B·(k − 1)/2)`` (the iteration time is linear in context between roofline corners).

Per iteration it records the time (``busy``), the model FLOPs (``2·N_active·tokens +
attention``) and the inter-token gaps (``dt`` weighted by the tokens it emits, for ITL percentiles).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable

import numpy as np

from clustertwin.infer.simulate import prefill_batch


class Replica:
    """State of one replica; ``advance_to(t)`` runs it until its clock reaches ``t`` or it is idle."""

    def __init__(self, rid: int, step: Callable, *, kv_tokens: float, max_seqs: int, max_tokens: int,
                 chunked: bool, static: bool, mode: str, isl: list[int], osl: list[int], work: list[int],
                 first: np.ndarray, done: np.ndarray, on_first: Callable[[int, float], None],
                 on_done: Callable[[Replica, int, float], None], flops_token: float, flops_attn: float,
                 window_s: float, cache_blocks: int = 0, start_s: float = 0.0) -> None:
        self.rid, self.step = rid, step
        self.kv_tokens, self.max_seqs, self.max_tokens = kv_tokens, max_seqs, max_tokens
        self.chunked, self.static, self.mode = chunked, static, mode
        self.isl, self.osl, self.work = isl, osl, work
        self.first, self.done = first, done
        self.on_first, self.on_done = on_first, on_done
        self.flops_token, self.flops_attn = flops_token, flops_attn
        self.window_s = window_s
        self.now = start_s
        self.next_change = math.inf
        self.it = 0
        self.B = 0
        self.ctx = 0.0
        self.kv_used = 0.0
        self.waiting: deque[int] = deque()
        self.prefilling: deque[list[int]] = deque()
        self.finish: list[tuple[int, int]] = []
        self.outstanding = 0
        self.max_batch = 0
        self.busy_s = 0.0
        self.flops_total = 0.0
        self.batch_time = 0.0
        self.busy_w: list[float] = []
        self.flops_w: list[float] = []
        self.itl_t: list[float] = []
        self.itl_dt: list[float] = []
        self.itl_n: list[float] = []
        self.cache: OrderedDict[int, None] = OrderedDict()
        self.cache_blocks = cache_blocks
        self.cache_hits = 0
        self.cache_lookups = 0

    # ------------------------------------------------------------------ prefix cache
    def cached_blocks(self, blocks: tuple[int, ...]) -> int:
        """Leading blocks of ``blocks`` held in this replica's prefix cache."""
        n = 0
        c = self.cache
        for b in blocks:
            if b not in c:
                break
            n += 1
        return n

    def remember(self, blocks: tuple[int, ...]) -> None:
        if self.cache_blocks <= 0:
            return
        c = self.cache
        for b in blocks:
            if b in c:
                c.move_to_end(b)
            else:
                c[b] = None
        while len(c) > self.cache_blocks:
            c.popitem(last=False)

    # ------------------------------------------------------------------ requests
    def submit(self, r: int, t: float) -> None:
        """Queue request ``r`` at time ``t`` (an idle replica's clock moves to ``t`` first)."""
        if self.now < t and self.idle:
            self.now = t
        self.waiting.append(r)
        self.next_change = self.now
        self.outstanding += 1

    @property
    def idle(self) -> bool:
        return not (self.B or self.prefilling or self.waiting)

    def _account(self, t0: float, dt: float, flops: float) -> None:
        self.flops_total += flops
        w = self.window_s
        i0, i1 = int(t0 // w), int((t0 + dt) // w)
        bw, fw = self.busy_w, self.flops_w
        while len(bw) <= i1:
            bw.append(0.0)
            fw.append(0.0)
        if i0 == i1 or dt <= 0:
            bw[i0] += dt
            fw[i0] += flops
            return
        for i in range(i0, i1 + 1):  # a long stretch over window edges: split in proportion
            a, b = max(t0, i * w), min(t0 + dt, (i + 1) * w)
            bw[i] += b - a
            fw[i] += flops * (b - a) / dt

    def _admit(self) -> None:
        if self.static and (self.B or self.prefilling):
            return
        waiting, isl, osl = self.waiting, self.isl, self.osl
        while waiting and self.B + len(self.prefilling) < self.max_seqs:
            r = waiting[0]
            need = isl[r] + osl[r]
            if self.kv_used + need > self.kv_tokens and (self.B + len(self.prefilling)) > 0:
                break
            waiting.popleft()
            self.kv_used += need
            if self.mode == "decode":
                if osl[r] <= 1:
                    self._complete(r, need)
                    continue
                self.B += 1
                self.ctx += isl[r] + 1
                heapq.heappush(self.finish, (self.it + osl[r] - 2, r))
            else:
                self.prefilling.append([r, self.work[r]])

    def _complete(self, r: int, need: int) -> None:
        self.kv_used -= need
        self.outstanding -= 1
        self.done[r] = self.now
        self.on_done(self, r, self.now)

    def advance_to(self, t: float, cut: bool = True) -> None:
        """Run iterations until the clock is at or past ``t`` (the iteration in flight finishes) or
        there is no work. A decode-only stretch that would end after ``t`` is split at ``t`` when
        ``cut`` (a request is about to join) and otherwise left whole: nothing changes inside it, and
        ``next_change`` (its end) tells the fleet when the replica must be advanced again."""
        step, isl, osl = self.step, self.isl, self.osl
        while True:
            self._admit()
            B = self.B
            if B == 0 and not self.prefilling:
                self.next_change = math.inf
                return
            if not self.prefilling and self.finish:
                # decode-only stretch up to the next completion (or split at t)
                k = k_done = self.finish[0][0] - self.it + 1
                dt = step(B, self.ctx + B * (k_done - 1) / 2.0, 0, 0.0, B)
                end = self.now + k_done * dt
                split = False
                if end > t:
                    if not cut or self.now >= t:
                        self.next_change = end
                        return
                    k = max(1, math.ceil((t - self.now) / dt))
                    if k < k_done:
                        dt = step(B, self.ctx + B * (k - 1) / 2.0, 0, 0.0, B)
                        split = True
                span = k * dt
                self._account(self.now, span,
                              k * (B * self.flops_token + self.flops_attn * (self.ctx + B * (k - 1) / 2.0)))
                self.itl_t.append(self.now)
                self.itl_dt.append(dt)
                self.itl_n.append(float(B * k))
                self.now += span
                self.busy_s += span
                self.batch_time += B * span
                self.ctx += B * k
                self.it += k
                self._pop_finished(self.it - 1)
                if split:
                    self.next_change = self.now
                    return
                continue
            if self.now >= t:
                self.next_change = self.now
                return
            budget = max(0, self.max_tokens - B)
            P, pfa, finished = prefill_batch(self.prefilling, budget, B, self.chunked, self.max_tokens, isl)
            for _ in finished:  # prompts finish in FCFS order: they are the head of the queue
                self.prefilling.popleft()
            lg = B + len(finished)
            dt = step(B, self.ctx, P, pfa, lg)
            self._account(self.now, dt, (B + P) * self.flops_token + self.flops_attn * (self.ctx + pfa))
            if B:
                self.itl_t.append(self.now)
                self.itl_dt.append(dt)
                self.itl_n.append(float(B))
            self.now += dt
            self.busy_s += dt
            self.batch_time += B * dt
            if self.max_batch < B:
                self.max_batch = B
            self.ctx += B
            for r in finished:
                self.first[r] = self.now
                self.on_first(r, self.now)
                if self.mode == "prefill" or osl[r] <= 1:
                    self._complete(r, isl[r] + osl[r])
                    continue
                self.B += 1
                self.ctx += isl[r] + 1
                heapq.heappush(self.finish, (self.it + osl[r] - 1, r))
            self._pop_finished(self.it)
            self.it += 1

    def _pop_finished(self, last: int) -> None:
        """Complete the sequences whose last token came out of iteration ``last`` or earlier."""
        fin, isl, osl = self.finish, self.isl, self.osl
        while fin and fin[0][0] <= last:
            _, r = heapq.heappop(fin)
            self.B -= 1
            self.ctx -= isl[r] + osl[r]
            self._complete(r, isl[r] + osl[r])
        if self.max_batch < self.B:
            self.max_batch = self.B
