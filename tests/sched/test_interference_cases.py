"""``interference`` validation cases: the shipped cases meet their tolerances, and the contention model orders
routing and flow counts the way the published measurements do."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import numpy as np
import pytest

from clustertwin import inputs, validate
from clustertwin.errors import SpecError
from clustertwin.sched import interference_cases as ic

ROOT = Path(__file__).resolve().parents[2]
CASES_FILE = ROOT / "validation" / "interference.yaml"


@pytest.fixture(scope="module")
def cases() -> dict[str, dict]:
    doc = inputs.read_document(CASES_FILE, limits=False)
    return {c["id"]: c for c in doc["cases"]}


@pytest.fixture(scope="module")
def run() -> dict:
    return validate.run([CASES_FILE])


def test_file_holds_at_least_two_sourced_cases_with_a_tolerance(cases):
    assert len(cases) >= 2
    assert len({c["source"].split(",")[0] for c in cases.values()}) >= 2  # at least two publications
    for c in cases.values():
        assert c["kind"] == "interference"
        assert "http" in c["source"] or "SIGCOMM" in c["source"]
        assert 0 < c["tolerance"] <= 0.5


def test_every_case_is_within_its_tolerance(run, cases):
    assert run["summary"]["failed"] == 0
    for r in run["cases"]:
        tol = cases[r["id"]]["tolerance"]
        for key, err in r["rel_error"].items():
            assert abs(err) <= tol, f"{r['id']} {key}: {err:+.1%} outside +-{tol:.0%}"


def test_adaptive_routing_beats_ecmp_on_the_shared_fabric(cases):
    ecmp = cases["spectrumx-colossus-standard-ethernet-throughput"]
    adaptive = dict(ecmp, routing="adaptive")
    x_ecmp = ic.evaluate(ecmp)["bandwidth_fraction"]
    x_adaptive = ic.evaluate(adaptive)["bandwidth_fraction"]
    assert x_ecmp < 0.9 * x_adaptive  # collisions cost more than a tenth
    assert x_adaptive == pytest.approx(1.0)  # non-blocking and spread perfectly: line rate


def test_more_flows_per_nic_reduce_collision_loss(cases):
    base = cases["meta-roce-eecmp-qp-scaling-allreduce"]
    fractions = []
    for q in (1, 2, 4, 16):
        case = {k: v for k, v in base.items() if k not in ("compare", "measured")}
        fractions.append(ic.evaluate(dict(case, flows_per_nic=q))["bandwidth_fraction"])
    assert all(a < b for a, b in itertools.pairwise(fractions))
    assert fractions[0] < 0.6  # one hashed flow per NIC: the worst of 16 uplinks carries two or more
    assert fractions[-1] == pytest.approx(1.0)


def test_sharing_slows_a_job_under_ecmp_and_not_under_adaptive_routing(cases):
    ecmp = cases["spectrumx-colossus-standard-ethernet-throughput"]
    assert ic.evaluate(ecmp)["slowdown"] > 1.5
    assert ic.evaluate(dict(ecmp, routing="adaptive"))["slowdown"] == pytest.approx(1.0)


def test_placement_is_seeded_disjoint_and_packed_takes_the_lowest_nodes():
    jobs = [{"nodes": 4, "placement": "packed"}, {"node_list": [30, 31]},
            {"nodes": 6, "placement": "random", "seed": 7}]
    a = ic.place_jobs(jobs, 32)
    b = ic.place_jobs(copy.deepcopy(jobs), 32)
    assert [x.tolist() for x in a] == [x.tolist() for x in b]
    assert a[0].tolist() == [0, 1, 2, 3]
    assert len(np.unique(np.concatenate(a))) == 12
    assert a[1].tolist() == [30, 31]
    assert not set(a[2].tolist()) & {0, 1, 2, 3, 30, 31}


@pytest.mark.parametrize(("change", "field"), [
    ({"routing": "ecmpp"}, "routing"),
    ({"flows_per_nic": 0}, "flows_per_nic"),
    ({"jobz": []}, "jobz"),
    ({"jobs": [{"nodes": 64, "placement": "randm"}]}, "placement"),
    ({"jobs": [{"nodes": 999}]}, "nodes"),
    ({"jobs": [{"node_list": [0, 0]}]}, "node_list"),
    ({"compare": {"flows": 4}}, "flows"),
    ({"job": 3}, "job"),
    ({"tolerance": -1}, "tolerance"),
    ({"cluster": "no-such-cluster"}, "cluster"),
])
def test_malformed_case_is_a_spec_error_naming_the_field(cases, change, field):
    case = dict(cases["meta-roce-eecmp-qp-scaling-allreduce"], **change)
    with pytest.raises(SpecError) as err:
        ic.evaluate(case)
    assert field in str(err.value)
    assert "\n" not in str(err.value)


def test_malformed_case_fails_alone_in_a_validate_run(tmp_path):
    good = CASES_FILE.read_text()
    bad = good.replace("routing: ecmp\n  flows_per_nic: 2\n  jobs: [{nodes: 64",
                       "routing: ecpm\n  flows_per_nic: 2\n  jobs: [{nodes: 64", 1)
    assert bad != good
    f = tmp_path / "cases.yaml"
    f.write_text(bad)
    out = validate.run([f])
    errors = [c for c in out["cases"] if "error" in c]
    assert len(errors) == 1 and "routing" in errors[0]["error"] and "ecmp" in errors[0]["error"]
    assert out["summary"]["count"] == 3
