"""Trace reader target (issue 30): a 1 GB Kineto trace in <= 60 s of CPU, streamed. The trace is a real one
(HTA's V100 trace_diff test trace) replicated with shifted timestamps until it reaches the size asked
(``CLUSTERTWIN_PROFILE_BENCH_MB``, default 200 MB; 1024 for the full target); the CPU budget scales with the
size, 60 s per GB. CPU time is asserted, wall time printed beside it (the machines are shared)."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from clustertwin.profile.kineto import streaming_available
from clustertwin.profile.report import profile

SRC = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "profile" / "hta" / "trace_diff_test.json.gz"
CPU_S_PER_GB = 60.0


def _replicate(out: Path, target_bytes: int) -> tuple[int, int]:
    """Write the source trace's events again and again (each copy shifted past the last) into ``out``."""
    doc = json.loads(gzip.decompress(SRC.read_bytes()))
    events = doc.pop("traceEvents")
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(e.get("ts", 0) for e in events) + 1
    n = copies = 0
    with open(out, "w") as f:
        f.write(json.dumps(doc)[:-1] + ', "traceEvents": [')
        first = True
        while f.tell() < target_bytes:
            for e in events:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = e2["ts"] + copies * span
                if str(e2.get("name", "")).startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{copies * 100 + int(e2['name'].split('#')[1]) % 100}"
                f.write(("" if first else ",") + json.dumps(e2))
                first = False
                n += 1
            copies += 1
        f.write("]}")
    return n, copies


@pytest.mark.skipif(not streaming_available(), reason="ijson not installed (pip install 'clustertwin[profile]')")
def test_reader_cpu_per_gb(tmp_path: Path) -> None:
    mb = float(os.environ.get("CLUSTERTWIN_PROFILE_BENCH_MB", "200"))
    path = tmp_path / "big.json"
    n, copies = _replicate(path, int(mb * 2**20))
    size_gb = path.stat().st_size / 2**30
    c0, w0 = time.process_time(), time.perf_counter()
    rep = profile([path])
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    print(f"{size_gb * 1024:.0f} MB, {n:,} events: CPU {cpu:.1f} s, wall {wall:.1f} s "
          f"({n / cpu:,.0f} events/s; {cpu / size_gb:.1f} s per GB)")
    assert len(rep.ranks[0].steps) == 6 * copies
    assert cpu <= CPU_S_PER_GB * size_gb, f"{cpu:.1f} s of CPU for {size_gb:.2f} GB"
