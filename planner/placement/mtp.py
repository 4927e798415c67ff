"""Multi-token prediction (MTP) as trained: how many MTP layers, on which pipeline stage, and what
one MTP layer holds.

Megatron-LM builds each of `mtp_num_layers` MTP layers (DeepSeek-V3 report arXiv:2412.19437
§2.2) as: enorm and hnorm (two norms of h), eh_proj (a column-parallel Linear 2h -> h without
bias), one transformer layer of the kind of the model's last decoder layer, and final_layernorm
(a third norm); it then applies the model's output layer again to each MTP layer's output and
adds that loss (scaled) to the main one. The stage that builds the MTP layers also builds an
input embedding (the shifted tokens' embeddings), a copy of the word embedding when that stage is
not the first. Without a pipeline layout string the MTP layers are on the last pipeline stage (in
its last virtual stage); with one, on the rank whose last virtual stage holds the `m`s. The extra
output-layer passes and losses run where the loss `L` is (the post-process stage).

Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/multi_token_prediction.py
(`MultiTokenPredictionLayer.__init__` l. 1157-1251: enorm, hnorm, eh_proj 2h -> h bias=False,
mtp_model_layer, final_layernorm; `process_mtp_loss` l. 932-1068: output_layer per MTP layer;
`mtp_on_this_rank` l. 788-831, `get_mtp_num_layers_to_build` l. 864-883: the last stage
without a layout); megatron/core/models/gpt/gpt_model.py l. 166-181 (`pre_process or
mtp_process` builds the embedding); megatron/training/training.py l. 1042-1046 (the MTP layer
counted as MoE when the last decoder layer is, Megatron's own FLOP count).
"""

from __future__ import annotations

from planner.placement.layout import Layout
from planner.specs.model import ModelSpec

TRAINED_BY_DEFAULT = {"megatron": True, "deepspeed": False, "torchtitan": False}
"""Whether a recipe of the framework trains the model's MTP layers (num_nextn_predict_layers)
when `Layout.mtp_layers` is not given. Megatron: Megatron-Bridge's AutoBridge sets
mtp_num_layers from the Hugging Face config's num_nextn_predict_layers
(NVIDIA-NeMo/Megatron-Bridge@067f987 src/megatron/bridge/models/deepseek/deepseek_v3_bridge.py
l. 97, models/glm/glm45_bridge.py l. 86) and NVIDIA's DeepSeek-V3 performance recipes train it
(recipes/deepseek/h100/deepseek_v3.py l. 136-138: mtp_num_layers = 1, mtp_loss_scaling_factor
0.1; perf_recipes/deepseek/h100/deepseek_v3.py l. 48: layout "Et|(tt|)*30mL", whose `m` is the
MTP layer); Megatron-LM alone defaults to none (transformer_config.py mtp_num_layers None), which
is what `planner check` reads from a script without the flag. torchtitan builds MTP only in
its DeepSeek-V3 debug config and refuses it with PP or CP (pytorch/torchtitan@b5bcd76
torchtitan/models/deepseek_v3/MTP.md §1); DeepSpeed has none."""


def mtp_layers(model: ModelSpec, layout: Layout) -> int:
    """MTP layers the layout trains: `Layout.mtp_layers`, or when None the model's
    num_nextn_predict_layers under a framework whose recipes train them (`TRAINED_BY_DEFAULT`).
    A pipeline layout string without `m` places them before its `L` (as Megatron-Bridge's
    DeepSeek-V3 layouts append them to the loss stage, recipes/deepseek/h100/deepseek_v3.py
    l. 50-53; `--emit megatron` writes them there); one with `m`s must hold this many
    (`rules._pipeline_layout`)."""
    if layout.mtp_layers is not None:
        return layout.mtp_layers
    return model.num_nextn_predict_layers if TRAINED_BY_DEFAULT[layout.framework] else 0


def mtp_stage(layout: Layout) -> int:
    """Pipeline rank that builds the MTP layers: the one whose virtual stage holds the `m`s of a
    layout string, else the last (module docstring)."""
    stages = layout.pipeline_layout
    if stages is not None:
        for c, symbols in enumerate(stages):
            if "m" in symbols:
                return c % layout.pp
    return layout.pp - 1


def mtp_block_index(model: ModelSpec) -> int:
    """The decoder layer whose kind (dense or MoE) each MTP layer's transformer layer has: the
    last (Megatron's MTP block spec is the last layer's; training.py l. 1042-1046)."""
    return model.num_hidden_layers - 1


def mtp_in_flight(layout: Layout, stage: int) -> int:
    """Micro-batches whose MTP activations are alive at once on `stage`: the MTP layers sit in the
    stage's last virtual stage, min(pp - stage, m) micro-batches deep as in 1F1B (Narayanan et al.
    2021 §2.2.1); on the last rank 1 (its last chunk runs each micro-batch's backward right after
    its forward, interleaved or not)."""
    return max(1, min(layout.pp - stage, layout.num_microbatches))
