"""When no layout fits, ``train search|scale`` and the sweep name the real reason: memory (with the leanest
layout's need against HBM) when valid layouts exist, else the rule that rejected the candidates."""

from __future__ import annotations

import json

from clustertwin import catalog
from clustertwin.train import scale, search


def test_all_out_of_memory_names_the_leanest_need() -> None:
    m, c = catalog.get("model", "llama3-405b"), catalog.get("cluster", "ref-1k-h100")
    res = search(m, c, global_batch=64, gpus=8, top=1)
    assert res.best is None and res.valid > 0 and res.fitting == 0
    r = res.no_fit_reason
    assert r.startswith("every valid layout exceeds HBM") and "of 80.0 GiB" in r
    assert res.leanest_gib > 80.0 and f"{res.leanest_gib:.1f} GiB" in r
    assert "pp x vpp" not in r and "layers fewer" not in r
    pt = scale(m, c, global_batch=64, max_gpus=8).points[0]
    assert pt.estimate is None and "exceeds HBM" in pt.note


def test_search_cli_error_and_json_carry_the_reason(cli) -> None:
    r = cli("train", "search", "-m", "llama3-405b", "-g", "8", "-b", "64", "--json")
    # exit 2 in both modes (nothing fits); the JSON still carries the reason
    assert r.code == 2 and "exceeds HBM" in json.loads(r.stdout)["no_fit_reason"]
    r = cli("train", "search", "-m", "llama3-405b", "-g", "8", "-b", "64")
    assert r.code == 2 and "every valid layout exceeds HBM" in r.stderr and r.stderr.count("\n") == 1


def test_no_valid_layout_names_the_rule() -> None:
    m, c = catalog.get("model", "llama3-8b"), catalog.get("cluster", "ref-1k-h100")
    res = search(m, c, global_batch=3, gpus=8, top=1, fixed={"dp": 8})
    assert res.valid == 0 and res.no_fit_reason.startswith("no valid layout")
