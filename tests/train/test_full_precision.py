"""FP32/TF32 training: the GEMM peak per precision, 4-byte values in memory and communication, and a
one-line error for a precision the GPU does not have."""

from __future__ import annotations

import json

import numpy as np
import pytest

from clustertwin import catalog
from clustertwin.train.hardware import hardware
from clustertwin.train.layout import Layouts
from clustertwin.train.memory import memory_arrays
from clustertwin.train.params import DEFAULT_PARAMS
from tests.conftest import EXAMPLES

K80 = str(EXAMPLES / "clusters" / "k80-8gpu-node.yaml")


def _lay(**kw) -> Layouts:
    base = dict(tp=1, pp=1, dp=8, cp=1, ep=1, vpp=1, mbs=1, recompute=2, zero=0, sp=0)
    base.update(kw)
    return Layouts(*(np.array([base[k]]) for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "mbs", "recompute",
                                                     "zero", "sp")))


@pytest.mark.parametrize("prec", ["fp32", "tf32"])
def test_fp32_states_are_16_bytes_per_param_and_activations_4_bytes(prec):
    m = catalog.get("model", "llama3-8b")
    lo = {k: float(np.ravel(v)[0]) for k, v in memory_arrays(m, _lay(), 64, "bf16", True, DEFAULT_PARAMS).items()}
    hi = {k: float(np.ravel(v)[0]) for k, v in memory_arrays(m, _lay(), 64, prec, True, DEFAULT_PARAMS).items()}
    assert hi["weights"] == pytest.approx(2 * lo["weights"])  # 4 B fp32 weights vs 2 B
    assert hi["gradients"] == pytest.approx(lo["gradients"])  # fp32 main grads either way
    assert hi["optimizer"] / hi["weights"] == pytest.approx(2.0)  # Adam m + v, 8 B, no master copy
    assert hi["activations"] == pytest.approx(2 * lo["activations"], rel=1e-3)  # values x2, LSE stays 4 B
    assert hi["logits"] == pytest.approx(2 * lo["logits"])


def test_hardware_reads_the_gemm_peak_of_the_precision():
    h100 = catalog.get("cluster", "ref-1k-h100")
    gpu = h100.node.gpu
    for prec in ("fp32", "tf32", "bf16"):
        hw = hardware(h100, prec, DEFAULT_PARAMS)
        assert hw.peak_flops == pytest.approx(gpu.gemm_peak_tflops(prec) * 1e12)
    tf = hardware(h100, "tf32", DEFAULT_PARAMS)
    assert tf.value_bytes == 4 and not tf.flash and tf.peak16_flops == tf.peak_flops
    assert hardware(h100, "bf16", DEFAULT_PARAMS).value_bytes == 2


def test_k80_server_trains_gpt2_in_fp32(cli):
    r = cli("train", "search", "-c", K80, "-m", "gpt2-1.5b", "-b", "32", "--precision", "fp32", "-k", "1",
            "--tokens", "1e9", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["precision"] == "fp32" and d["fitting"] > 0
    assert 0.05 < d["mfu"] < 0.9 and d["memory_gib_per_gpu"] <= 24.0
    # 8.74 TFLOP/s per board: 1e9 tokens x 6 x 1.6e9 FLOP / (4 boards x 8.74e12 x MFU)
    assert d["time_to_train"]["days"] > 1.0


def test_precision_without_a_peak_is_one_line_naming_the_gpu(cli):
    r = cli("train", "estimate", "-c", K80, "-m", "gpt2-1.5b", "-b", "32", "--precision", "bf16")
    assert r.code == 2
    line = r.stderr.strip()
    assert "\n" not in line and "'k80'" in line and "bf16" in line and "fp32" in line
    v100 = str(EXAMPLES / "clusters" / "dgx1-v100-1k.yaml")
    r = cli("train", "estimate", "-c", v100, "-m", "gpt2-1.5b", "-b", "1024", "--precision", "tf32")
    assert r.code == 2 and "'v100-sxm2-32gb'" in r.stderr and "tf32" in r.stderr
    assert "Traceback" not in r.stderr
