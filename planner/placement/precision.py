"""Bytes per parameter of each model state, by framework, precision and optimizer.

| framework | parameters | gradients | optimizer (AdamW) | gradient reduction | parameter gather |
|---|---|---|---|---|---|
| megatron (bf16) | 2 (bf16) | 4 (fp32 main grads) | 12 (fp32 master + m + v) | fp32 | bf16 |
| megatron (fp16) | 2 | 2 | 16 (fp32 master + fp32 main grad + m + v) | fp16 | fp16 |
| deepspeed | 2 | 2 | 12 | fp16/bf16 | fp16/bf16 |
| torchtitan | 4 (fp32 sharded) | 4 (fp32) | 8 (m + v; params already fp32) | fp32 | bf16 |

Sources:
- Megatron: `megatron/training/arguments.py` forces `accumulate_allreduce_grads_in_fp32 = True` for
  bf16 only; the flag is `store_true` (default False), and the gradient buffer (the reduction
  message) is `torch.float if grad_reduce_in_fp32 else param.dtype`, so fp16 reduces in fp16
  (NVIDIA/Megatron-LM@d98e8a6 arguments.py l. 1204-1217 and 3069-3071,
  megatron/core/distributed/param_and_grad_buffer.py l. 924); Megatron Core "Distributed Optimizer" guide: bf16 param + fp32 grads = 18 B/param
  (6 + 12/d distributed), fp16 param + fp16 grads = 20 B/param (4 + 16/d).
- DeepSpeed: ZeRO paper §3.1 mixed-precision Adam, (2 + 2 + K)Ψ with K = 12.
- torchtitan: `torchtitan/config/job_config.py` `mixed_precision_param = "bfloat16"`,
  `mixed_precision_reduce = "float32"` (FSDP2 `MixedPrecisionPolicy`): sharded parameters and
  gradients stay fp32, gathered parameters are bf16, gradients reduce-scattered in fp32; AdamW keeps
  m and v in the parameter dtype (fp32) and needs no separate master copy.
- SGD with momentum: one fp32 buffer (+ fp32 master when parameters are 16-bit).
- 8-bit Adam: m and v in 1 B each (block-wise quantized; the per-block fp32 absmax, 1 per 2048
  values, is ignored) — Dettmers et al. 2022 "8-bit Optimizers via Block-wise Quantization" §2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner.placement.layout import PRECISIONS, Layout
from planner.specs.model import ModelSpec

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128
"""Source: Megatron-LM `megatron/training/arguments.py` `--make-vocab-size-divisible-by` default 128;
`megatron/training/tokenizer/tokenizer.py::_vocab_size_with_padding` pads to a multiple of
128 × tensor_model_parallel_size (Megatron-DeepSpeed inherits it)."""

_MOMENTS_BYTES = {"adamw": 8, "sgd": 4, "adam8bit": 2}
"""Optimizer moment bytes per parameter: Adam m + v fp32; SGD momentum fp32; 8-bit Adam 1 + 1."""


@dataclass(frozen=True, kw_only=True)
class StateBytes:
    """Bytes per parameter of each state and of the messages that move it."""

    parameters: int
    """Resident parameter copy, B/param."""
    gradients: int
    """Accumulated gradient, B/param."""
    optimizer_states: int
    """Optimizer state incl. any fp32 master copy, B/param."""
    gradient_reduce: int
    """Dtype of the gradient reduction message, B/element."""
    parameter_gather: int
    """Dtype of gathered / broadcast parameters (compute dtype), B/element."""
    compute: int = 2
    """Compute dtype of activations and unsharded working parameters, B/element."""


def state_bytes(layout: Layout) -> StateBytes:
    """Bytes per parameter for `layout.framework`, `layout.precision`, `layout.optimizer`.

    fp8 (`precision="fp8"`) keeps bf16 parameters and fp32 master weights (Transformer Engine keeps
    fp8 copies only transiently), so it costs like bf16 here.
    Source: see module docstring.
    """
    moments = _MOMENTS_BYTES[layout.optimizer]
    if layout.framework == "torchtitan":
        return StateBytes(parameters=4, gradients=4, optimizer_states=moments,
                          gradient_reduce=4, parameter_gather=2)
    if layout.framework == "megatron" and layout.precision != "fp16":
        return StateBytes(parameters=2, gradients=4, optimizer_states=4 + moments,
                          gradient_reduce=4, parameter_gather=2)
    if layout.framework == "megatron":
        return StateBytes(parameters=2, gradients=2, optimizer_states=8 + moments,
                          gradient_reduce=2, parameter_gather=2)
    return StateBytes(parameters=2, gradients=2, optimizer_states=4 + moments,
                      gradient_reduce=2, parameter_gather=2)


def padded_vocab(model: ModelSpec, layout: Layout) -> int:
    """Embedding rows allocated per the framework (FC-08).

    Megatron / DeepSpeed: round up to a multiple of 128 × tp (MAKE_VOCAB_SIZE_DIVISIBLE_BY);
    torchtitan: DTensor shards unevenly, the largest shard holds ceil(V / tp) rows -> ceil(V/tp)·tp.
    """
    rows = model.padded_vocab_size
    multiple = layout.tp if layout.framework == "torchtitan" else MAKE_VOCAB_SIZE_DIVISIBLE_BY * layout.tp
    return -(-rows // multiple) * multiple


def supported_precisions(peak_tflops: Mapping[str, float]) -> tuple[str, ...]:
    """The compute precisions of `Layout.precision` (PRECISIONS order: bf16, fp16, fp8) that a GPU
    runs on its tensor cores, read from its dense-peak table `GPUSpec.peak_tflops`.

    Source: `GPUSpec.peak_tflops` lists only the dtypes the tensor cores support (per-GPU datasheets
    in hardware/*.yaml): e.g. Volta V100 tensor cores take fp16 only (no bf16), Ampere A100 adds
    bf16/tf32 but has no fp8 (fp8 arrives with Hopper's Transformer Engine, NVIDIA H100 whitepaper).
    """
    return tuple(p for p in PRECISIONS if p in peak_tflops)
