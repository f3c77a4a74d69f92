"""The self-recorded TP2 x DP2 gloo traces (tests/fixtures/profile/gloo_tp2dp2, recorded by gloo_gpt.py): the
collectives the model makes are known, so their counts, bytes and groups are asserted exactly; every
ProfilerStep of every file is reported; the terms of a step add up to its wall time."""

from __future__ import annotations

import gzip
import json
import re
from functools import cache
from pathlib import Path

import pytest

from clustertwin.profile.report import ProfileReport, profile, trace_files
from tests.conftest import FIXTURES
from tests.profile import gloo_gpt as gpt

GLOO = FIXTURES / "profile" / "gloo_tp2dp2"
ALL = sorted((FIXTURES / "profile").rglob("*.json.gz"))


@cache
def _profiled(path: Path) -> ProfileReport:
    return profile([path])


def _step_names(path: Path) -> list[str]:
    """ProfilerStep names in the file, read with the standard library alone."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    return sorted({e["name"] for e in events if re.match(r"ProfilerStep#\d+$", str(e.get("name", "")))},
                  key=lambda n: int(n.split("#")[1]))


@pytest.mark.parametrize("variant,dp_calls", [("plain", 1), ("slow_loader", 1), ("extra_dp", 2)])
def test_collective_counts_and_bytes_are_exact(variant: str, dp_calls: int):
    rep = _profiled(GLOO / variant)
    assert [r.rank for r in rep.ranks] == [0, 1, 2, 3]
    for r in rep.ranks:
        assert r.world_size == gpt.WORLD and r.backend == "gloo" and r.cpu_mode
        kinds = {g["desc"]: g["kind"] for g in r.groups.values()}
        assert kinds[f"tp{r.rank // gpt.TP}"] == "tp" and kinds[f"dp{r.rank % gpt.TP}"] == "dp"
        assert len(r.steps) == gpt.ACTIVE
        for s in r.steps:
            assert s["collectives"] == {
                "tp": {"count": 4 * gpt.LAYERS, "bytes": 4 * gpt.LAYERS * gpt.tp_allreduce_bytes()},
                "dp": {"count": dp_calls, "bytes": gpt.dp_allreduce_bytes() + (dp_calls - 1) * gpt.EXTRA_BYTES},
            }
            assert s["comm_by_kind_s"]["tp"] > 0 and s["comm_by_kind_s"]["dp"] > 0
    assert rep.damage == {}


def test_bytes_follow_from_the_model():
    assert gpt.tp_allreduce_bytes() == 4 * 32 * 64 * 4
    assert gpt.dp_allreduce_bytes() == 68_928 * 4


@pytest.mark.parametrize("path", ALL, ids=[str(p.relative_to(FIXTURES / "profile")) for p in ALL])
def test_every_profiler_step_is_reported(path: Path):
    (r,) = _profiled(path).ranks
    names = _step_names(path)
    if names:
        assert [s["name"] for s in r.steps] == names
    else:
        assert [s["name"] for s in r.steps] == ["trace"]


@pytest.mark.parametrize("path", ALL, ids=[str(p.relative_to(FIXTURES / "profile")) for p in ALL])
def test_terms_add_up_to_the_wall_time(path: Path):
    for s in _profiled(path).ranks[0].steps:
        parts = s["compute_s"] + s["exposed_comm_s"] + s["exposed_memcpy_s"] + s["idle_s"]
        assert parts == pytest.approx(s["wall_s"], rel=1e-9, abs=1e-12)
        assert s["idle_s"] == pytest.approx(s["host_bound_s"] + s["data_wait_s"] + s["rank_wait_s"], abs=1e-12)
        assert sum(s["compute_by_class_s"].values()) == pytest.approx(s["compute_s"], abs=1e-12)
        assert sum(s["breakdown"].values()) + s["unattributed_comm_s"] == pytest.approx(s["wall_s"], abs=1e-9)
        assert 0 <= s["gpu_busy_s"] <= s["wall_s"] * (1 + 1e-12)


def test_a_slow_loader_shows_as_data_wait():
    plain = [s["data_wait_s"] for r in _profiled(GLOO / "plain").ranks for s in r.steps]
    slow = [s["data_wait_s"] for r in _profiled(GLOO / "slow_loader").ranks for s in r.steps]
    assert min(slow) >= 0.9 * 0.020  # 5 ms per sample, 4 samples per batch
    assert max(plain) < 0.005


def test_skew_between_the_four_ranks():
    rep = _profiled(GLOO / "plain")
    assert [s["step"] for s in rep.skew] == [2, 3, 4]
    for s in rep.skew:
        assert s["ranks"] == 4 and s["wall_spread_s"] >= 0 and not s["clock_offset"]
        assert s["end_spread_s"] is not None and s["end_spread_s"] < s["wall_max_s"]


def test_a_folder_is_searched_recursively():
    assert len(trace_files([GLOO])) == 12


@pytest.mark.slow
def test_recording_gives_the_same_collectives(tmp_path: Path):
    pytest.importorskip("torch", reason="torch not installed: the recorder needs it")
    paths = gpt.record(tmp_path, extra=True)
    rep = profile(paths)
    for r in rep.ranks:
        assert [s["name"] for s in r.steps] == [f"ProfilerStep#{n}" for n in range(2, 2 + gpt.ACTIVE)]
        assert all(s["collectives"]["dp"]["count"] == 2 and s["collectives"]["tp"]["count"] == 8 for s in r.steps)
