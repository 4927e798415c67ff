"""Caches of the cost hot path: each cached value equals the uncached computation."""

import dataclasses
import gc

from planner.cost import activations as act
from planner.cost.collectives import axis_domain_sharing, collective_time
from planner.cost.memory import in_flight_microbatches, stage_memory
from planner.cost.params_flops import count_params
from planner.placement.layout import Layout
from planner.specs import model as model_spec
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model, spec_memo

LLAMA_8B = load_model("llama-3.1-8b")
DEEPSEEK = load_model("deepseek-v3")  # layers 0-2 dense, 3-60 MoE


def test_count_params_once_per_spec_and_per_field_values():
    """Llama-3.1-8B: 2 x 128256 x 4096 (embedding + head) + 4096 (final norm) + 32 x 218,112,000
    per layer (attention 4096 x 48 x 128 + 32 x 128 x 4096 = 41,943,040; SwiGLU 3 x 4096 x 14336 =
    176,160,768; 2 norms 8,192) = 8,030,261,248. A copy with 16 layers is counted afresh:
    1,050,677,248 + 16 x 218,112,000 = 4,540,469,248."""
    counts = count_params(LLAMA_8B)
    assert counts.total == 8_030_261_248
    assert count_params(LLAMA_8B) is counts
    half = dataclasses.replace(LLAMA_8B, num_hidden_layers=16)
    assert count_params(half).total == 4_540_469_248
    assert count_params(LLAMA_8B).total == 8_030_261_248


def test_spec_memo_is_private_and_dropped_with_its_spec():
    spec = dataclasses.replace(LLAMA_8B, name="memo-probe")
    equal = dataclasses.replace(LLAMA_8B, name="memo-probe")
    spec_memo(spec)["probe"] = 1
    assert "probe" not in spec_memo(equal)  # keyed by identity, not equality
    key = id(spec)
    del spec
    gc.collect()
    assert key not in model_spec._MEMOS


def _direct_layers_bytes(model, layout, layers, modes, stage):
    kw = dict(seq_len=layout.seq_len, micro_batch_size=layout.micro_batch_size, tp=layout.tp,
              cp=layout.cp, sequence_parallel=layout.sequence_parallel, ep=layout.ep, etp=layout.etp,
              framework=layout.framework, dtype_bytes=2)
    total = sum(act.layer_activation_bytes(model, i, recompute=m, **kw).total for i, m in zip(layers, modes))
    working = max(act.layer_backward_working_set_bytes(model, i, **kw) for i in layers)
    return int(total * in_flight_microbatches(layout, stage)), working


def test_stage_memory_per_kind_cache_equals_per_layer_sums():
    """DeepSeek-V3 stage 0 of pp=4 holding dense layers 0-2 and MoE layers 3-5 with mixed recompute:
    the cached per-kind bytes equal layer_activation_bytes summed layer by layer (exact oracle)."""
    layout = Layout(dp=8, tp=4, pp=4, ep=8, sequence_parallel=True, micro_batch_size=2,
                    global_batch_size=256)
    layers = (0, 1, 2, 3, 4, 5)
    counts = {"full": 2, "selective": 1, "none": 3}
    modes = ["full", "full", "selective", "none", "none", "none"]  # order stage_memory assigns
    cluster = load_cluster("hgx-h800", gpus=1024)
    for _ in range(2):  # second pass reads the cache
        mem = stage_memory(DEEPSEEK, cluster, layout, 0, layers=layers, layers_by_recompute=counts)
        expected, working = _direct_layers_bytes(DEEPSEEK, layout, layers, modes, 0)
        assert mem.activation_terms["layers"] == expected
        assert mem.transient_terms["recompute_working_set"] == working
    other = dataclasses.replace(layout, micro_batch_size=1)
    mem = stage_memory(DEEPSEEK, cluster, other, 0, layers=layers, layers_by_recompute=counts)
    assert mem.activation_terms["layers"] == _direct_layers_bytes(DEEPSEEK, other, layers, modes, 0)[0]


def test_axis_domain_sharing_cached_result_is_a_copy():
    """tp=8 fills an 8-GPU domain (k_tp = 8), so dp (stride 8) shares none (k_dp = 1)."""
    first = axis_domain_sharing({"tp": 8, "dp": 4}, domain_gpus=8)
    assert first["tp"] == 8 and first["dp"] == 1
    first["tp"] = 0
    assert axis_domain_sharing({"tp": 8, "dp": 4}, domain_gpus=8)["tp"] == 8


def test_collective_time_trivial_groups_cost_nothing():
    cluster = load_cluster("dgx-h100", gpus=16)
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"):
        assert collective_time(kind, group_size=1, bytes_per_device=1e9, cluster=cluster) == 0.0
        assert collective_time(kind, group_size=8, bytes_per_device=0, cluster=cluster) == 0.0


def _states_and_transients(model, cluster, layout, layers):
    """stage 0's bytes besides activations (what `model_state_key` claims to determine): in the
    backward phases, and in the optimizer step (which holds no activations)."""
    m = stage_memory(model, cluster, layout, 0, layers=layers, reserve_bytes=0,
                     layers_by_recompute={"none": len(layers)})
    return m.backward_total - m.activations, m.optimizer_step_total()


def test_model_state_key_groups_layouts_with_equal_states():
    """Layouts that differ in dp / cp / pp / micro-batch but share `model_state_key` have equal
    parameters + gradients + optimizer states + non-activation transients on a stage holding the
    same layers (checked by direct `stage_memory` calls, both frameworks with a distributed
    optimizer or ZeRO-3 and without); layouts whose shards differ get different keys."""
    from planner.cost.memory import model_state_key

    cluster = load_cluster("hgx-h800", gpus=256)
    layers = (2, 3, 4)  # one dense, two MoE layers
    seen: dict = {}
    for framework in ("megatron", "deepspeed"):
        for zero in (0, 1, 3):
            if framework == "megatron" and zero == 3:
                continue
            for dp, cp, pp, b in ((8, 1, 4, 1), (4, 2, 4, 2), (16, 1, 2, 1), (2, 4, 4, 1),
                                  (8, 2, 2, 4), (32, 1, 1, 1)):
                layout = Layout(dp=dp, cp=cp, tp=8, pp=pp, ep=8, zero_stage=zero,
                                sequence_parallel=True, micro_batch_size=b,
                                global_batch_size=256, framework=framework)
                value = _states_and_transients(DEEPSEEK, cluster, layout, layers)
                key = model_state_key(layout)
                assert seen.setdefault(key, value) == value, (key, layout)
    # ZeRO-0 does not shard over dp: dp=8 and dp=16 (pp>1 both) share a key; ZeRO-1 does not.
    zero0 = [model_state_key(Layout(dp=dp, tp=8, pp=pp, ep=8, zero_stage=0, global_batch_size=256))
             for dp, pp in ((8, 4), (16, 2))]
    zero1 = [model_state_key(Layout(dp=dp, tp=8, pp=pp, ep=8, zero_stage=1, global_batch_size=256))
             for dp, pp in ((8, 4), (16, 2))]
    assert zero0[0] == zero0[1] and zero1[0] != zero1[1]
    assert len(set(seen)) > 4  # the sweep exercised several distinct keys
