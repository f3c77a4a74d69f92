"""``clustertwin train estimate|search|scale``: JSON keys, tables, one-line errors with exit 2."""

from __future__ import annotations

import json

KEYS = ("step_time_s", "mfu", "hfu", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
        "memory_gib_per_gpu", "layout", "breakdown")


def test_estimate_json_and_table(cli):
    r = cli("train", "estimate", "--model", "llama3-70b", "--gpus", "256", "--global-batch", "512", "--tp", "8",
            "--pp", "4", "--recompute", "selective", "--tokens", "1e12", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    for k in KEYS:
        assert k in d
    assert d["layout"]["dp"] == 8 and d["gpus"] == 256
    assert d["time_to_train"]["gpu_hours"] > 0
    r = cli("train", "estimate", "--model", "llama3-70b", "--gpus", "256", "--global-batch", "512", "--tp", "8",
            "--pp", "4")
    assert r.code == 0 and "step time breakdown" in r.stdout and "MFU" in r.stdout


def test_search_json_has_ranked_layouts(cli):
    r = cli("train", "search", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--top", "3",
            "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    for k in KEYS:
        assert k in d
    assert len(d["layouts"]) == 3 and d["rejected"]
    r = cli("train", "search", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--tp", "2")
    assert r.code == 0 and "rejected" in r.stdout


def test_scale_json(cli):
    r = cli("train", "scale", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--json")
    assert r.code == 0, r.stderr
    pts = json.loads(r.stdout)["points"]
    assert [p["gpus"] for p in pts] == [8, 16, 32, 64]
    assert pts[0]["scaling_efficiency"] == 1.0 and "fractions" in pts[-1]


def test_bad_input_is_one_line_exit_2(cli):
    cases = [
        ("train", "estimate", "--model", "llama3-70b", "--global-batch", "64", "--tp", "3"),
        ("train", "estimate", "--model", "lama3-70b", "--global-batch", "64"),
        ("train", "estimate", "--global-batch", "64", "--recompute", "sometimes"),
        ("train", "search", "--model", "llama3-405b", "--gpus", "8", "--global-batch", "8"),
        ("train", "estimate", "--global-batch", "64", "--calibration", "missing.yaml"),
    ]
    for args in cases:
        r = cli(*args)
        assert r.code == 2, (args, r.stdout, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:"), r.stderr


def test_calibration_file_overrides_train_parameters(cli, tmp_path):
    cal = tmp_path / "cal.yaml"
    cal.write_text("train: {gemm_efficiency: 0.45}\nsource: test\n", encoding="utf-8")
    args = ("train", "estimate", "--model", "llama3-8b", "--gpus", "64", "--global-batch", "256", "--json")
    base = json.loads(cli(*args).stdout)
    slow = cli(*args, "--calibration", str(cal))
    assert slow.code == 0, slow.stderr
    assert json.loads(slow.stdout)["step_time_s"] > 1.3 * base["step_time_s"]
    cal.write_text("train: {gemm_eficiency: 0.45}\n", encoding="utf-8")
    bad = cli(*args, "--calibration", str(cal))
    assert bad.code == 2 and "did you mean 'gemm_efficiency'" in bad.stderr


def test_estimate_prints_the_stage_plan_and_the_stack(cli):
    r = cli("train", "estimate", "--cluster", "llama3-16k-h100-roce", "--model", "llama3-405b", "--global-batch",
            "2048", "--tp", "8", "--pp", "16", "--vpp", "8", "--embedding-in-split", "--loss-in-split", "--json")
    assert r.code == 0, r.stderr
    import json

    d = json.loads(r.stdout)
    assert d["stage_plan"]["layers_per_stage"] == "7|8 x 14|7" and d["software_stack"] == "megatron-core-2024"
    assert d["layout"]["zero"] == 1 and d["layout"]["sequence_parallel"]  # the resolver's defaults


def test_stack_without_the_feature_is_a_clear_error(cli):
    r = cli("train", "estimate", "--model", "llama3-8b", "--global-batch", "1024", "--tp", "2", "--sp", "--stack",
            "deepspeed-2022")
    assert r.code == 2 and "has no sequence parallelism" in r.stderr and "Traceback" not in r.stderr
    # without --sp the defaults follow the stack: no sequence parallelism
    r = cli("train", "estimate", "--model", "llama3-8b", "--global-batch", "1024", "--tp", "2", "--stack",
            "deepspeed-2022", "--json")
    assert r.code == 0, r.stderr
    assert '"sequence_parallel": false' in r.stdout
    r = cli("train", "estimate", "--model", "llama3-8b", "--global-batch", "1024", "--stack", "megatron-2023")
    assert r.code == 2 and "did you mean" in r.stderr
