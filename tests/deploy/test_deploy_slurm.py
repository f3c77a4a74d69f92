"""sbatch generation: golden file for the reference cluster, hostile user strings executed through stub
Slurm/torchrun commands, NCCL environment per fabric, layout flags and bad input."""

from __future__ import annotations

import itertools
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from tests.conftest import FIXTURES

from clustertwin import specs
from clustertwin.deploy import DeploySpec, Prediction, nccl_env, plan_job, slurm_script
from clustertwin.deploy.layout_flags import megatron_args, torchtitan_args
from clustertwin.errors import SpecError

GOLDEN = FIXTURES / "deploy"
REGEN = bool(os.environ.get("CLUSTERTWIN_REGEN_GOLDEN"))

HOSTILE = "a b'c\"d $(touch PWNED) `touch PWNED2`; rm -rf / \n newline\ttab $HOME \\ end"


def cluster(ref: str = "ref-1k-h100") -> specs.ClusterSpec:
    return specs.load(specs.ClusterSpec, ref, kind="cluster")


def model(ref: str = "llama3-70b") -> specs.ModelSpec:
    return specs.load(specs.ModelSpec, ref, kind="model")


REF_LAYOUT = specs.ParallelismSpec(tp=8, pp=4, dp=32, micro_batch=1, global_batch=1024, sequence_parallel=True,
                                   recompute="selective", zero=1, precision="bf16")
REF_PREDICTION = Prediction(step_time_s=7.8, mfu=0.5, tokens_per_s=1.07e6, memory_gib_per_gpu=41.9,
                            memory_capacity_gib=74.5, fits=True, tokens=1.4e12, days=15.2, gpu_hours=373_888.0,
                            source="given layout")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGEN:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"golden file {path} missing (CLUSTERTWIN_REGEN_GOLDEN=1 writes it)"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden file"


def test_golden_sbatch_reference_cluster():
    opts = DeploySpec(partition="gpu", account="llm", job_name="llama3-70b-pretrain",
                      checkpoint_dir="/lustre/ckpt/llama3-70b", script="pretrain_gpt.py",
                      script_args=("--data-path", "/lustre/data/tokens"))
    text = slurm_script(cluster(), model(), REF_LAYOUT, opts, REF_PREDICTION)
    check_golden("ref-1k-h100-llama3-70b.sbatch", text)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_sbatch_is_valid_bash():
    text = slurm_script(cluster(), model(), REF_LAYOUT, DeploySpec(), REF_PREDICTION)
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_sbatch_shape_for_reference_cluster():
    text = slurm_script(cluster(), model(), REF_LAYOUT, DeploySpec(), None)
    assert "#SBATCH --nodes=128\n" in text
    assert "#SBATCH --gpus-per-node=8\n" in text
    assert "#SBATCH --cpus-per-task=112\n" in text  # 2 x Xeon 8480C, 56 cores each
    assert "#SBATCH --requeue\n" in text and "#SBATCH --exclusive\n" in text
    assert "#SBATCH --signal=B:USR1@300\n" in text
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in text
    assert "--nproc_per_node=8" in text and '--rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT"' in text
    assert "--tensor-model-parallel-size 8 \\\n" in text
    assert "--pipeline-model-parallel-size 4 \\\n" in text
    assert "predicted" not in text


def _stub(bindir: Path, name: str, body: str) -> None:
    p = bindir / name
    p.write_text("#!/bin/bash\n" + body, encoding="utf-8")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_hostile_strings_reach_the_script_verbatim(tmp_path):
    """Run the generated script with stub srun/scontrol/torchrun: the training script must receive every
    hostile argument byte for byte, and nothing in them may execute."""
    args = (HOSTILE, "--name", "x'; touch PWNED3; '", "$(touch PWNED4)", "", "-")
    ckpt = "ck pt/$(touch PWNED5)/'q'"
    opts = DeploySpec(job_name=HOSTILE, script="my train$(touch PWNED6).py", script_args=args, checkpoint_dir=ckpt,
                      flags="megatron")
    bad_cluster = cluster().model_copy(update={"name": "evil\nrm -rf / #"})
    text = slurm_script(bad_cluster, model("llama3-8b"), specs.ParallelismSpec(tp=8, dp=2, global_batch=16),
                        opts, REF_PREDICTION)
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert "#SBATCH --job-name=a-b-c-d-touch-PWNED-touch-PWNED2-rm--rf-newline-tab-HOME-end" in header
    assert not any(ln.startswith("rm -rf") for ln in text.splitlines())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _stub(bindir, "scontrol", 'if [ "$1 $2" = "show hostnames" ]; then echo node001; echo node002; fi\n')
    # srun: drop its own options, run the rest
    _stub(bindir, "srun", 'while [ "${1#--}" != "$1" ]; do shift; done\nexec "$@"\n')
    # torchrun: record the arguments NUL-separated
    _stub(bindir, "torchrun", 'printf "%s\\0" "$@" > "$ARGS_OUT"\nprintf "%s" "$CHECKPOINT_DIR" > "$CKPT_OUT"\n')
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURM_NNODES": "2",
           "SLURM_JOB_NODELIST": "node[001-002]", "ARGS_OUT": str(tmp_path / "args"),
           "CKPT_OUT": str(tmp_path / "ckpt"), "HOME": str(tmp_path)}
    script = tmp_path / "job.sbatch"
    script.write_text(text, encoding="utf-8")
    subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, check=True, timeout=30)
    got = (tmp_path / "args").read_bytes().split(b"\0")[:-1]
    got_s = [g.decode() for g in got]
    assert "--rdzv_endpoint=node001:29500" in got_s
    i = got_s.index(opts.script)
    assert tuple(got_s[-len(args):]) == args
    assert got_s[i + 1:i + 3] == ["--tensor-model-parallel-size", "8"]
    assert got_s[got_s.index("--save") + 1] == ckpt
    assert (tmp_path / "ckpt").read_text() == ckpt
    assert (tmp_path / ckpt).is_dir()
    assert not list(tmp_path.rglob("PWNED*"))


@pytest.mark.parametrize("bad", [
    {"partition": "gpu; rm -rf /"}, {"account": "a b"}, {"qos": "x\ny"}, {"time_limit": "1:00:00\n#SBATCH -N 9"},
    {"output": "logs/$(id).out"}, {"script": "--help"}, {"checkpoint_dir": ""},
    {"preempt_lead_s": 100, "preempt_grace_s": 200}, {"rdzv_port": 80}, {"time_limit": "5"},
])
def test_bad_options_are_spec_errors(bad):
    with pytest.raises(SpecError):
        specs.build(DeploySpec, bad)


@pytest.mark.parametrize(("text", "seconds"), [("30", 1800), ("5:30", 330), ("24:00:00", 86400),
                                               ("2-00", 172800), ("1-02:03", 93780), ("1-02:03:04", 93784)])
def test_slurm_time_limits(text, seconds):
    from clustertwin.deploy.job import slurm_time_s

    assert slurm_time_s(text) == seconds
    assert specs.build(DeploySpec, {"time_limit": text, "preempt_lead_s": 60, "preempt_grace_s": 30})


def env_of(ref: str, **kw) -> dict[str, str]:
    return {v.name: v.value for v in nccl_env(cluster(ref), **kw)}


def test_nccl_env_infiniband_with_sharp_and_nvls():
    env = env_of("ref-1k-h100")
    assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}:1" for i in range(8))
    assert env["NCCL_NVLS_ENABLE"] == "1"  # H100 + NVSwitch
    assert env["NCCL_COLLNET_ENABLE"] == "1"  # NDR switches have SHARP
    assert "NCCL_IB_GID_INDEX" not in env and "NCCL_IB_DISABLE" not in env


def test_nccl_env_roce_sets_gid_and_traffic_class_and_no_collnet():
    env = env_of("llama3-16k-h100-roce")
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["NCCL_IB_TC"] == "106"
    assert env["NCCL_COLLNET_ENABLE"] == "0"
    assert env["NCCL_NVLS_ENABLE"] == "1"
    env = env_of("llama3-16k-h100-roce", gid_index=5, traffic_class=41, ib_hca="=mlx5_2:1")
    assert (env["NCCL_IB_GID_INDEX"], env["NCCL_IB_TC"], env["NCCL_IB_HCA"]) == ("5", "41", "=mlx5_2:1")


def test_nccl_env_plain_ethernet_uses_sockets():
    env = env_of("a100-512-1gbe", socket_ifname="=eth0")
    assert env["NCCL_IB_DISABLE"] == "1" and env["NCCL_SOCKET_IFNAME"] == "=eth0"
    assert "NCCL_IB_HCA" not in env and "NCCL_SOCKET_NTHREADS" not in env  # 1 GbE: one thread is plenty
    assert env["NCCL_NVLS_ENABLE"] == "0"  # A100 has no NVLink SHARP
    fast = cluster("ref-1k-h100").model_copy(update={"network": specs.NetworkSpec(fabric="eth-100g")})
    env = {v.name: v.value for v in nccl_env(fast)}
    assert env["NCCL_SOCKET_NTHREADS"] == "4" and env["NCCL_NSOCKS_PERTHREAD"] == "4"


def test_nccl_env_amd_has_no_nvidia_switches_and_ascend_is_refused():
    env = env_of("dragonfly-16k-mi300x")
    assert "NCCL_NVLS_ENABLE" not in env and "NCCL_COLLNET_ENABLE" not in env
    assert env["NCCL_IB_GID_INDEX"] == "3"
    with pytest.raises(SpecError, match="HCCL"):
        nccl_env(cluster("ascend-910b-64"))


def test_nccl_env_rejects_fabric_options_that_do_not_apply():
    with pytest.raises(SpecError, match="RoCE"):
        nccl_env(cluster("ref-1k-h100"), gid_index=3)
    with pytest.raises(SpecError, match="RDMA"):
        nccl_env(cluster("a100-512-1gbe"), ib_hca="=mlx5_0:1")


def test_nvl72_needs_gpus_per_host_and_enables_multinode_nvlink():
    c = cluster("gb200-nvl72-576")
    par = specs.ParallelismSpec(tp=4, dp=36, global_batch=144)
    with pytest.raises(SpecError, match="gpus_per_host"):
        plan_job(c, model("llama3-8b"), par, DeploySpec())
    text = slurm_script(c, model("llama3-8b"), par, DeploySpec(gpus_per_host=4))
    assert "#SBATCH --nodes=36\n" in text and "#SBATCH --gpus-per-node=4\n" in text
    assert "export NCCL_MNNVL_ENABLE=1" in text


def test_plan_rejects_layouts_the_cluster_cannot_host():
    with pytest.raises(SpecError, match="hosts"):
        plan_job(cluster("ascend-910b-64"), model(), specs.ParallelismSpec(tp=8, dp=16, global_batch=16),
                 DeploySpec())
    with pytest.raises(SpecError, match="multiple of 8"):
        plan_job(cluster(), model(), specs.ParallelismSpec(tp=4, dp=3, global_batch=12), DeploySpec())
    with pytest.raises(SpecError, match="nodes=3"):
        plan_job(cluster(), model(), REF_LAYOUT.model_copy(update={"dp": 2, "global_batch": 2}),
                 DeploySpec(nodes=3))


def test_small_layout_uses_part_of_one_node_and_cpu_variant_has_no_nccl():
    plan = plan_job(cluster(), model("llama3-8b"), specs.ParallelismSpec(tp=2, dp=2, global_batch=4), DeploySpec())
    assert (plan.hosts, plan.procs_per_host, plan.gpus_per_host) == (1, 4, 4)
    text = slurm_script(cluster(), model("llama3-8b"), specs.ParallelismSpec(dp=2, global_batch=2),
                        DeploySpec(device="cpu", flags="none"))
    assert "NCCL_" not in text and "--gpus-per-node" not in text
    assert "#SBATCH --cpus-per-task=2\n" in text and "--nproc_per_node=2" in text


def test_megatron_flags_cover_layout_and_model():
    m = model("mixtral-8x7b")
    p = specs.ParallelismSpec(tp=2, pp=4, dp=8, ep=8, vpp=2, micro_batch=2, global_batch=256, recompute="full",
                              zero=1, precision="fp8")
    args, env = megatron_args(m, p, "/ck")
    joined = " ".join(args)
    for part in ("--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 4",
                 f"--num-layers-per-virtual-pipeline-stage {m.layers // 8}", "--micro-batch-size 2",
                 "--global-batch-size 256", "--recompute-granularity full", "--recompute-method uniform",
                 "--use-distributed-optimizer", "--bf16", "--fp8-format hybrid", "--num-experts 8",
                 "--moe-router-topk 2", "--expert-model-parallel-size 8", "--save /ck", "--load /ck"):
        assert part in joined
    assert env[0][:2] == ("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    # 80 layers on 4 x 3 chunks do not divide: the balanced plan goes out as a layout string
    uneven, _ = megatron_args(model("llama3-70b"), p.model_copy(update={"vpp": 3}), "/ck")
    assert "--num-layers-per-virtual-pipeline-stage" not in uneven
    assert uneven[uneven.index("--pipeline-model-parallel-layout") + 1] == "Et*7|(t*7|)*7(t*6|)*3t*6L"


def test_torchtitan_flags_map_zero3_to_fsdp_shards():
    p = specs.ParallelismSpec(tp=8, pp=2, dp=8, vpp=2, global_batch=64, zero=3, recompute="selective")
    args, _ = torchtitan_args(model(), p, "ck")
    pairs = dict(itertools.pairwise(args))
    assert pairs["--parallelism.data_parallel_shard_degree"] == "8"
    assert pairs["--parallelism.data_parallel_replicate_degree"] == "1"
    assert pairs["--parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert pairs["--training.local_batch_size"] == "8"
    assert pairs["--activation_checkpoint.mode"] == "selective"


def test_cli_slurm_writes_script_with_prediction(cli, tmp_path):
    out = tmp_path / "job.sbatch"
    r = cli("deploy", "slurm", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--zero", "1",
            "--global-batch", "128", "-o", str(out), "--", "--data-path", "/d")
    assert r.code == 0, r.stderr
    text = out.read_text()
    assert os.access(out, os.X_OK)
    assert "# predicted by the twin (given layout):" in text
    assert "#   step time " in text and "GiB per GPU" in text and "time to train" in text
    assert "--data-path /d" in text and "#SBATCH --nodes=2" in text


def test_cli_slurm_from_search_uses_the_best_layout(cli):
    from clustertwin.train.search import search

    r = cli("deploy", "slurm", "--model", "llama3-8b", "--gpus", "16", "--global-batch", "128", "--from-search",
            "--json")
    assert r.code == 0, r.stderr
    import json

    d = json.loads(r.stdout)
    # Megatron-LM has ZeRO 0, 1 and 3 (no ZeRO-2): the fastest fitting layout among those stages
    bests = [search(model("llama3-8b"), cluster(), global_batch=128, gpus=16, top=1, fixed={"zero": z}).best
             for z in (0, 1, 3)]
    best = min((b for b in bests if b is not None), key=lambda b: b.step_time_s)
    assert best.layout["zero"] != 2
    assert {k: d["layout"][k] for k in ("tp", "pp", "dp", "cp", "zero")} == \
        {k: best.layout[k] for k in ("tp", "pp", "dp", "cp", "zero")}
    assert d["prediction"]["step_time_s"] == pytest.approx(best.step_time_s)
    assert "train search: best of" in d["text"]


@pytest.mark.parametrize("argv", [
    ["--model", "llama3-8b", "--global-batch", "128", "--time", "soon"],
    ["--model", "nosuchmodel", "--global-batch", "128"],
    ["--model", "llama3-8b", "--global-batch", "128", "--gpus", "12", "--tp", "8"],
    ["--model", "llama3-8b", "--global-batch", "128", "--flags", "deepspeed"],
])
def test_cli_bad_input_exits_2_with_one_line(cli, argv):
    r = cli("deploy", "slurm", *argv)
    assert r.code == 2
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:")
