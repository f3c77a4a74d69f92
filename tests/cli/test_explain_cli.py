"""``clustertwin explain``: JSON contract, storage and network named as bottlenecks, bad input exits 2."""

from __future__ import annotations

import json

from tests.conftest import run_cli


def test_explain_names_storage_when_read_is_starved():
    r = run_cli("explain", "-b", "1024", "--storage-read", "0.01", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["bottleneck"] == "storage"
    assert [s["name"] for s in d["stages"]] == ["storage", "network", "HBM", "compute", "collectives", "scheduler"]
    assert d["stages"][0]["capacity"] == 0.01


def test_explain_names_the_network_on_1gbe():
    r = run_cli("explain", "-c", "a100-512-1gbe", "-b", "512", "--json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["bottleneck"] == "network"


def test_explain_bad_input():
    for args in (["--placement", "packed"], ["--data", "imagenet"], ["--storage-read", "-1"]):
        r = run_cli("explain", "-b", "1024", *args)
        assert r.code == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr
