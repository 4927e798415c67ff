"""The stage program's memory is `stage_memory`'s, for every split and every per-stage mix of
recompute modes (the property `plan`'s OPTIMAL rests on, checked directly rather than through
the plan's step time).

For each candidate of a small model on 8 GPUs (every mesh, micro-batch and ZeRO stage the search
offers) under Megatron-LM, DeepSpeed and torchtitan conventions, the program's bytes of stage s
holding layers a..b-1 with c[r] layers in mode r (`search.ilp.stage_memory`: fixed bytes,
per-layer state and activation bytes, the full-recompute working set charged only with a fully
recomputed layer) equal `cost.memory.stage_memory` of the same stage, up to the program's
rounding of each coefficient up to whole bytes. torchtitan with PP is the stated exception: its
activation peak is taken over the schedule with the accumulated gradients, not additive per
layer, so `plan` re-costs its plans (`plan._fits_as_costed`).
"""

from __future__ import annotations

import dataclasses

import pytest

from planner import plan as P
from planner.cost.memory import stage_memory
from planner.search import ilp
from planner.specs.cluster import load_cluster
from planner.specs.model import from_config

ROUNDING_BYTES = 64
"""Each of the program's coefficients (fixed, per-layer state, per-layer per-mode activation) is
rounded up to whole bytes and `stage_memory` truncates each term: a few bytes apart at most."""


def _splits(layers: int, stages: int):
    if stages == 1:
        yield (layers,)
        return
    for first in range(1, layers - stages + 2):
        for rest in _splits(layers - first, stages - 1):
            yield (first, *rest)


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "torchtitan"])
def test_program_memory_equals_stage_memory_for_every_split_and_mode_mix(framework):
    model = from_config({"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
                         "num_hidden_layers": 5, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "vocab_size": 3000,
                         "max_position_embeddings": 4096}, name="tiny-5")
    cluster = load_cluster("tests/data/clusters/custom-pcie.yaml", gpus=8)
    cluster = dataclasses.replace(cluster, gpu=dataclasses.replace(cluster.gpu, memory_gib=80))
    base = dict(seq_len=1024, global_batch_size=16, precision="bf16", optimizer="adamw",
                framework=framework)
    layouts, _, costs = P._candidates(model, cluster, {}, base, 0, 0.0)
    checked = 0
    for layout in layouts:
        if framework == "torchtitan" and layout.pp > 1:
            continue  # the stated exception (module docstring)
        layout = P._with_split(model, layout)
        ip = costs.int_problem(layout, P.RECOMPUTE_MODES)
        for split in _splits(model.num_hidden_layers, layout.pp):
            candidate = layout.replace(pipeline_layers=split)
            start = 0
            for s, n in enumerate(split):
                layers = tuple(range(start, start + n))
                start += n
                for comp in ilp._compositions(n, 3):
                    counts = [int(x) for x in comp]
                    want = stage_memory(model, cluster, candidate, s, layers=layers,
                                        reserve_bytes=0,
                                        layers_by_recompute=dict(zip(P.RECOMPUTE_MODES, counts)))
                    got = ilp.stage_memory(ip, s, [counts])
                    assert abs(got - want.total) <= ROUNDING_BYTES, (layout, split, s, counts)
                    checked += 1
    assert checked > 500  # every framework's candidates exercised
