"""Issue 8 item 5 ("activation offload ... searched by plan when it helps"), what `plan` searches:
Megatron-LM's fine-grained activation offloading enters the search only as the module lists of
`search.module_sets.MODULE_SETS` that NVIDIA's recipes pair with a recompute list (core_attn +
attn_proj with MLA models' recompute list; expert_fc1 for models with routed experts), each where
it applies to the model; the `Layout.offload` targets (optimizer, parameters, whole-layer
activations) only when pinned (`search.mesh.SearchSpace.offload_options` is off alone).

This test shows the search choosing offload where memory forces a change and offloading is the
cheaper one: a Mixtral-like model of two layers (four experts, top 2) on 4 GPUs of 1 GiB
(`tests/data/clusters/custom-pcie.yaml`, its memory cut) at 8,192 tokens, micro-batch 2. With
room (2 GiB) the best plan keeps every activation and recomputes nothing; at 1 GiB the best plan
offloads expert_fc1 (the Nemotron-H H100 recipe's list) without recompute, and it is faster than
the best plan with offloading switched off, which must recompute instead."""

from __future__ import annotations

import json

import pytest
import yaml

from planner.plan import plan
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

TINY_MOE = {"model_type": "mixtral", "hidden_size": 1024, "intermediate_size": 2048,
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 4,
            "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 1000,
            "max_position_embeddings": 8192}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("offload")
    (root / "tiny-moe").mkdir()
    (root / "tiny-moe" / "config.json").write_text(json.dumps(TINY_MOE))
    out = {"model": str(root / "tiny-moe" / "config.json")}
    for gib in (1, 2):
        cluster = yaml.safe_load(open("tests/data/clusters/custom-pcie.yaml"))
        cluster["gpu"]["memory_gib"] = gib
        (root / f"c{gib}.yaml").write_text(yaml.safe_dump(cluster))
        out[gib] = str(root / f"c{gib}.yaml")
    return out


def _best(files, gib, **kw):
    data = plan(load_model(files["model"]), load_cluster(files[gib], gpus=4), seq_len=8192, global_batch_size=8,
                fixed={"micro_batch_size": 2}, top_k=1, reserve_bytes=0, headroom=0.0, **kw)
    return data["plans"][0]


def test_plan_offloads_when_memory_forces_it_and_it_is_faster(files):
    roomy = _best(files, 2)
    assert roomy["parallelism"].get("offload_modules") is None and roomy["parallelism"]["recompute"] == "none"
    tight = _best(files, 1)
    assert tight["parallelism"]["offload_modules"] == ["expert_fc1"]
    assert tight["parallelism"]["recompute"] == "none"
    without = _best(files, 1, offload_modules=())  # `--offload-modules none`
    assert without["parallelism"].get("offload_modules") is None
    assert without["parallelism"]["recompute"] != "none"  # memory forced recompute instead
    assert tight["time_s"]["step"] < without["time_s"]["step"]
