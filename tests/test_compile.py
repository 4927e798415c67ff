"""torch.compile as a run knob (`Layout.torch_compile`, issue 9 item 4): what compiling changes in
the step time (the elementwise bytes eager kernels move beyond fused ones), each framework's
default, and that plan files, the torchtitan reader and emitter carry it.

Byte counts by hand from torchtitan's model code (pytorch/torchtitan@b5bcd76
models/common/feed_forward.py, rope.py ComplexRoPE, decoder.py; see
`step_time.unfused_elementwise_bytes`): SwiGLU 4 B per MLP-width element, RoPE 16 B per rotated
q/k element, the residual sum read back 2 B per hidden element.
"""

import pytest

from planner.cost import step_time as stt
from planner.errors import SpecError
from planner.placement.layout import Layout
from planner.placement.overlap import tuned
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

H100 = load_cluster("dgx-h100", gpus=8)


def test_unfused_bytes_of_llama_and_deepseek_layers():
    # Llama 3.1 8B: h 4096, MLP width 14336, 32 q heads + 8 kv heads of 128
    llama = load_model("llama-3.1-8b")
    assert stt.unfused_elementwise_bytes(llama, 0) == 4 * 14336 + 16 * (32 + 8) * 128 + 2 * 4096
    # DeepSeek-V3 MoE layer: 1 shared expert + 8 routed copies of width 2048; MLA rotates
    # 128 heads x 64 rope dims of q and one shared 64-dim rope key; h 7168
    ds = load_model("deepseek-v3")
    moe_layer = ds.moe_layers.index(True)
    assert stt.unfused_elementwise_bytes(ds, moe_layer) == (4 * (2048 + 8 * 2048) + 16 * (128 * 64 + 64)
                                                           + 2 * 7168)


def test_eager_torchtitan_pays_the_unfused_bytes_forward_and_twice_backward():
    """b 2, s 8192, tp 1: 16,384 tokens per GPU; the extra bytes stream at HBM_EFFICIENCY x the
    HBM bandwidth, once forward, twice backward; recompute of the forward re-runs them."""
    model = load_model("llama-3.1-8b")
    eager = Layout(dp=8, micro_batch_size=2, seq_len=8192, global_batch_size=16,
                   framework="torchtitan", zero_stage=3, torch_compile=False)
    compiled = eager.replace(torch_compile=True)
    extra = 2 * 8192 * stt.unfused_elementwise_bytes(model, 0) / (
        H100.gpu.hbm_gb_per_s * 1e9 * stt.HBM_EFFICIENCY)
    t_e = stt.layer_time(model, H100, eager, 0, "full")
    t_c = stt.layer_time(model, H100, compiled, 0, "full")
    assert t_e.forward_s - t_c.forward_s == pytest.approx(extra, rel=1e-9)
    assert t_e.backward_s - t_c.backward_s == pytest.approx(2 * extra, rel=1e-9)
    assert t_e.recompute_s - t_c.recompute_s == pytest.approx(extra, rel=1e-9)
    # torchtitan's default is eager (CompileConfig.enable false)
    assert stt.layer_time(model, H100, eager.replace(torch_compile=None), 0, "full") == t_e


def test_megatron_fuses_whatever_the_knob_says():
    model = load_model("llama-3.1-8b")
    base = Layout(dp=8, seq_len=4096, global_batch_size=8)
    times = {stt.layer_time(model, H100, base.replace(torch_compile=v), 0, "none").forward_s
             for v in (None, True, False)}
    assert len(times) == 1


def test_a_tuned_torchtitan_layout_compiles_and_keeps_what_the_user_set():
    base = Layout(dp=8, framework="torchtitan", zero_stage=3)
    assert tuned(base).torch_compile is True
    assert tuned(base.replace(torch_compile=False)).torch_compile is False
    assert tuned(Layout(dp=8)).torch_compile is None          # Megatron: no such switch


def test_the_knob_is_a_boolean_or_absent():
    with pytest.raises(SpecError, match="true, false or absent"):
        Layout(torch_compile="yes")


def test_plan_files_carry_compile_and_refuse_a_bad_value(tmp_path):
    from planner.check.plan_file import read_plan_file
    from planner.plan import plan, plan_file, plan_layout
    data = plan(load_model("llama-3.1-8b"), H100, seq_len=4096, global_batch_size=16,
                framework="torchtitan", top_k=1)
    doc = plan_file(data, model_ref="llama-3.1-8b", cluster_ref="dgx-h100")
    assert doc["plan"]["parallelism"]["compile"] is True
    assert plan_layout(doc["plan"], doc["request"]).torch_compile is True
    import yaml
    doc["plan"]["parallelism"]["compile"] = "on"
    path = tmp_path / "bad.plan.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError) as err:
        read_plan_file(path)
    assert err.value.key == "plan.parallelism.compile"
