"""Performance target (issue 19): reading 1M trace rows (SenseTime Helios ``cluster_log.csv`` schema) in at
most 2 s of CPU time with the pyarrow fast path, and the csv fallback reading the same jobs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from clustertwin.sched import readers

ROWS = 1_000_000
TARGET_CPU_S = 2.0


@pytest.fixture(scope="module")
def helios_1m(tmp_path_factory):
    pytest.importorskip("pyarrow")
    rng = np.random.default_rng(0)
    g = rng.choice([0, 1, 2, 4, 8, 16], size=ROWS)
    nodes = np.where(g > 8, g // 8, 1)
    sub = np.sort(rng.integers(0, 10**7, size=ROWS))
    dur = rng.integers(1, 10**5, size=ROWS)
    p = tmp_path_factory.mktemp("helios") / "cluster_log.csv"
    with p.open("w") as f:
        f.write("job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n")
        f.writelines(f"j{i},u{i % 997},vc1,{g[i]},6,{nodes[i]},COMPLETED,{sub[i]},{sub[i]},{sub[i] + dur[i]},"
                     f"{dur[i]},0\n" for i in range(ROWS))
    return p, int((g > 0).sum())


def test_read_1m_helios_rows_under_2s_cpu(benchmark, helios_1m):
    p, gpu_jobs = helios_1m
    t0, c0 = time.perf_counter(), time.process_time()
    tr = benchmark.pedantic(readers.read_trace, args=(p, "helios"), rounds=1, iterations=1)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"\n{ROWS:,} Helios rows: wall {wall:.2f} s, CPU {cpu:.2f} s")
    assert tr.report.lines == ROWS and tr.report.jobs == gpu_jobs and tr.report.malformed == 0
    assert cpu <= TARGET_CPU_S, f"reading {ROWS:,} rows took {cpu:.2f} s of CPU"


def test_csv_fallback_reads_the_same_jobs(helios_1m):
    p, _ = helios_1m
    fast = readers.read_trace(p, "helios")
    slow = readers.read_trace(p, "helios", strict=True)  # --strict always takes the csv path
    assert fast.report.to_dict() | {"path": ""} == slow.report.to_dict() | {"path": ""}
    assert fast.jobs.ids == slow.jobs.ids and fast.jobs.users == slow.jobs.users
    for col in ("submit_s", "runtime_s", "gpus_per_unit", "units", "user"):
        assert np.array_equal(getattr(fast.jobs, col), getattr(slow.jobs, col)), col
