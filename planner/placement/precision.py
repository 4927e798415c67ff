"""Bytes per parameter of each model state, by framework, precision and optimizer.

| framework | parameters | gradients | optimizer (AdamW) | gradient reduction | parameter gather |
|---|---|---|---|---|---|
| megatron (bf16) | 2 (bf16) | 4 (fp32 main grads) | 12 (fp32 master + m + v) | fp32 | bf16 |
| megatron (fp16) | 2 | 2 | 16 (fp32 master + fp32 main grad + m + v) | fp16 | fp16 |
| megatron, `grad_reduce_in_bf16` | 2 | 2 (bf16) | 16 (fp32 master + fp32 grad shard + m + v) | bf16 | bf16 |
| megatron (fp16), `accumulate_allreduce_grads_in_fp32` | 2 | 4 | 12 | fp32 | fp16 |
| deepspeed | 2 | 2 | 12 | compute dtype (or its communication dtype key) | fp16/bf16 |
| torchtitan | 4 (fp32 sharded) | 4 (fp32) | 8 (m + v; params already fp32) | fp32 | bf16 |

Sources:
- Megatron: `megatron/training/arguments.py` forces `accumulate_allreduce_grads_in_fp32 = True` for
  bf16 only; the flag is `store_true` (default False), and the gradient buffer (the reduction
  message) is `torch.float if grad_reduce_in_fp32 else param.dtype`, so fp16 reduces in fp16
  (NVIDIA/Megatron-LM@d98e8a6 arguments.py l. 1204-1217 and 3069-3071,
  megatron/core/distributed/param_and_grad_buffer.py l. 924); Megatron Core "Distributed Optimizer" guide: bf16 param + fp32 grads = 18 B/param
  (6 + 12/d distributed), fp16 param + fp16 grads = 20 B/param (4 + 16/d).
- DeepSpeed: ZeRO paper §3.1 mixed-precision Adam, (2 + 2 + K)Ψ with K = 12.
- torchtitan: `torchtitan/config/job_config.py` parameter dtype "bfloat16", reduce dtype
  "float32" (`frameworks.torchtitan` param_dtype / reduce_dtype; FSDP2 `MixedPrecisionPolicy`): sharded parameters and
  gradients stay fp32, gathered parameters are bf16, gradients reduce-scattered in fp32; AdamW keeps
  m and v in the parameter dtype (fp32) and needs no separate master copy.
- The gradient-reduction dtype (`Layout.grad_reduce_dtype`, `grad_reduce_dtype` below):
  Megatron-LM `grad_reduce_in_bf16` turns the fp32 accumulation off for bf16 (`validate_args`,
  arguments.py l. 1204-1216 @d98e8a6) and `accumulate_allreduce_grads_in_fp32` turns it on for
  fp16; the gradient buffer then has the reduction's dtype (param_and_grad_buffer.py l. 924), and a
  16-bit buffer makes the optimizer keep an fp32 copy of its gradient shard (`DistributedOptimizer`
  / `Float16OptimizerWithFloat16Params` copy `main_grad.float()` into the fp32 main parameters'
  `.grad`: 8 + moments B/param, as the fp16 row). Megatron-Bridge's performance recipes reduce in
  bf16 (`cfg.ddp.grad_reduce_in_fp32 = False`, NVIDIA-NeMo/Megatron-Bridge
  scripts/performance/configs). DeepSpeed: its communication dtype key (fp16 | bf16 | fp32; the
  `grad_reduce_dtype` row of `frameworks.deepspeed`), default the compute dtype (the `DeepSpeedEngine` property of that name, deepspeed/runtime/engine.py l.
  1405-1416 @edaa722); gradients stay in the compute dtype. torchtitan: its reduce dtype key
  (`frameworks.torchtitan` reduce_dtype) admits only "float32" (`torchtitan/config/configs.py` l. 102 @b5bcd76).
- Megatron-LM's precision-aware optimizer (`Layout.precision_aware_optimizer` and the dtype knobs
  `layout.OPTIMIZER_DTYPES`; NVIDIA/Megatron-LM@d98e8a6): Transformer Engine's FusedAdam keeps
  exp_avg / exp_avg_sq in their dtypes (fp8: 1 B, its per-tensor scale ignored;
  core/optimizer/__init__.py l. 564-590). Whenever the master weights are not fp32 or the fp8
  recipe is none or delayed (`use_precision_aware_optimizer_no_fp8_or_ds_fp8`,
  optimizer_config.py l. 407-414; the planner's fp8 is Megatron's default recipe, "delayed",
  transformer_config.py l. 594-596) TE also owns the master weights (`master_weight_dtype`) and
  reads the gradient buffer shard directly (`decoupled_grad`, distrib_optimizer.py l. 2784-2790):
  no fp32 gradient copy, whatever main_grads_dtype is. An fp32 master of bf16 parameters is stored
  as the int16 low halves (`store_param_remainders`, default True with TE >= 2.1, distrib_optimizer.py
  l. 1007-1013): 2 B; fp16 master 2 B; fp32 master of fp16 parameters 4 B. So optimizer states =
  master + exp_avg + exp_avg_sq B/param, and gradients = the buffer (reduction) dtype. With fp32
  master weights and another fp8 recipe (`Layout.fp8_recipe` tensorwise, blockwise, mxfp8)
  Megatron keeps the fp32 master shard itself (4 B, distrib_optimizer.py l. 422-480) and hands the
  optimizer `main_grad.float()` (l. 2791): an fp32 gradient copy when the buffer is 16-bit, as
  without the optimizer. Under bf16
  (and fp8 on bf16) main_grads_dtype bf16 leaves `accumulate_allreduce_grads_in_fp32` off, so
  gradients accumulate and reduce in bf16 (arguments.py l. 1204-1216). Megatron asserts: the
  dtype knobs other than fp32 only with the optimizer (optimizer_config.py l. 466-478), the
  optimizer only with Adam (l. 449-451) and the distributed optimizer (__init__.py l. 1057-1060),
  main grads bf16 not with an explicit fp32 accumulation (arguments.py l. 1209-1211):
  rules `precision_aware_optimizer`.
  Under Megatron-FSDP (Megatron-LM at zero_stage 2 / 3, its version 1, which runs the distributed
  optimizer: arguments.py l. 1118-1133) the optimizer is supported too: Megatron-LM switches
  Megatron-FSDP's `megatron_fsdp_use_decoupled_grad` on with it (training.py l. 2649-2650), so the
  gradient shard reaches FusedAdam as `decoupled_grad` uncast (megatron_fsdp/param_and_grad_buffer.py
  l. 3377-3410: no fp32 gradient copy). FusedAdam's parameters there are Megatron-FSDP's main weight
  shards, fp32 by `--megatron-fsdp-main-params-dtype`'s default (arguments.py l. 3687-3690, the
  MixedPrecisionPolicy of mcore_fsdp_adapter.py l. 140-144); TE still keeps master weights of them
  whenever it owns them (core/optimizer/__init__.py l. 576-585 excludes only Megatron-FSDP v2),
  and of fp32 parameters as a full copy in `master_weight_dtype` (no int16 remainders, which need
  bf16 parameters: TransformerEngine@d0067d0 pytorch/optimizers/fused_adam.py l. 626 and
  `initialize_state` l. 452-476). So optimizer states = 4 (main weights) + TE master (fp32 4, fp16
  2, or 0 when Megatron owns the master) + exp_avg + exp_avg_sq B/param
  (`megatron_fsdp_precision_aware_bytes`). `--main-grads-dtype` has no effect there (Megatron-FSDP's
  `--megatron-fsdp-main-grads-dtype` replaces it, arguments.py l. 3691-3694; rule warning);
  `--megatron-fsdp-main-params-dtype` other than fp32 is not a knob here.
- SGD with momentum: one fp32 buffer (+ fp32 master when parameters are 16-bit).
- 8-bit Adam: m and v in 1 B each (block-wise quantized; the per-block fp32 absmax, 1 per 2048
  values, is ignored) — Dettmers et al. 2022 "8-bit Optimizers via Block-wise Quantization" §2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from planner import frameworks
from planner.errors import SpecError
from planner.placement.layout import FP8_RECIPES, PRECISIONS, Layout
from planner.specs.model import ModelSpec

MAKE_VOCAB_SIZE_DIVISIBLE_BY = 128
"""Megatron-LM's default `--make-vocab-size-divisible-by` (a run sets another with the flag,
`Layout.vocab_divisible_by`). Source: Megatron-LM d98e8a6 `megatron/training/arguments.py` l. 2441
(`default=128`); `megatron/core/tokenizers/utils/build_tokenizer.py` `vocab_size_with_padding`
pads to a multiple of make_vocab_size_divisible_by × tensor_model_parallel_size (Megatron-DeepSpeed
inherits it)."""

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
    step_gradient_copy: int = 0
    """fp32 copy of the gradient shard the optimizer reads, B/param (sharded like the optimizer
    states): Megatron-LM's `shard_main_param.grad = shard_model_grad.float()` of a 16-bit gradient
    buffer (distrib_optimizer.py l. 2756-2792 @d98e8a6; the fp16 optimizer's `main_grad.float()`
    alike), made at the optimizer step and freed by the next step's `optimizer.zero_grad()`
    (set_to_none=True: distrib_optimizer.py l. 2568-2598, called at the top of `train_step`,
    training.py l. 3036-3044), so it never coexists with activations (`cost.memory`'s optimizer-step
    phase); 0 with an fp32 buffer (`.float()` returns the buffer itself) or where the
    precision-aware optimizer reads the buffer directly (`decoupled_grad`)."""
    linear_parameter_gather: int | None = None
    """Bytes per element the parameter all-gather moves for linear (Transformer Engine) weights:
    1 with Megatron-LM's fp8 parameter gather (`Layout.fp8_param_gather`; its uint8 parameter
    buffer, param_and_grad_buffer.py l. 921-923 @d98e8a6) except under mxfp8, whose parameters
    are gathered in the gradient buffer's 16-bit view (l. 1161-1177); None = `parameter_gather`.
    The vocabulary, norms and router are not TE linears and move `parameter_gather`."""

    @property
    def linear_gather(self) -> int:
        """`linear_parameter_gather`, or `parameter_gather` when None, B/element."""
        return self.parameter_gather if self.linear_parameter_gather is None else self.linear_parameter_gather


_DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


def grad_reduce_dtype(layout: Layout) -> str:
    """The dtype `layout` reduces gradients in: `layout.grad_reduce_dtype`, or the framework's
    default when None — Megatron-LM fp32 for bf16/fp8 and fp16 for fp16 compute, DeepSpeed the
    compute dtype (bf16 for fp8), torchtitan fp32. Source: module docstring."""
    if layout.grad_reduce_dtype is not None:
        return layout.grad_reduce_dtype
    if (layout.framework == "megatron" and layout.precision != "fp16" and layout.main_grads_dtype == "bf16"
            and not megatron_fsdp(layout)):   # Megatron-FSDP ignores --main-grads-dtype (module docstring)
        return "bf16"
    if layout.framework == "torchtitan" or (layout.framework == "megatron"
                                            and layout.precision != "fp16"):
        return "fp32"
    return "fp16" if layout.precision == "fp16" else "bf16"


def allowed_grad_reduce_dtypes(layout: Layout) -> tuple[str, ...]:
    """The gradient-reduction dtypes `layout.framework` can run at `layout.precision` (tables:
    `planner.frameworks.<framework>.GRAD_REDUCE_DTYPES`)."""
    allowed = frameworks.BY_NAME[layout.framework].GRAD_REDUCE_DTYPES
    return allowed[layout.precision] if isinstance(allowed, dict) else allowed


def state_key(layout: Layout) -> tuple:
    """Everything of `layout` that `state_bytes` reads, for callers' cache keys."""
    return (layout.framework, layout.precision, layout.optimizer, grad_reduce_dtype(layout),
            layout.fp8_recipe, layout.fp8_param_gather, layout.precision_aware_optimizer, layout.main_params_dtype, layout.exp_avg_dtype,
            layout.exp_avg_sq_dtype)


def state_bytes(layout: Layout) -> StateBytes:
    """Bytes per parameter for `layout.framework`, `layout.precision`, `layout.optimizer` and the
    gradient-reduction dtype (`grad_reduce_dtype`).

    fp8 (`precision="fp8"`) keeps bf16 parameters and fp32 master weights, so it costs like bf16
    here; Transformer Engine's fp8 weight copies (its cached workspace, or with the fp8 parameter
    gather the fp8 parameters themselves) are `cost.memory`'s terms (`fp8_weight_bytes`).
    Source: see module docstring.
    """
    moments = _MOMENTS_BYTES[layout.optimizer]
    reduce = _DTYPE_BYTES[grad_reduce_dtype(layout)]
    if layout.framework == "torchtitan":
        return StateBytes(parameters=4, gradients=4, optimizer_states=moments,
                          gradient_reduce=reduce, parameter_gather=2)
    if layout.framework == "megatron":  # the gradient buffer has the reduction's dtype
        aware = layout.precision_aware_optimizer and layout.optimizer == "adamw"
        fsdp = megatron_fsdp(layout)
        optimizer_states = ((megatron_fsdp_precision_aware_bytes if fsdp else precision_aware_optimizer_bytes)(layout)
                            if aware else 4 + moments)
        fp8_gather = te_fp8(layout) and layout.fp8_param_gather and layout.fp8_recipe != "mxfp8"
        uncast = aware and (fsdp or _te_owns_master(layout))   # the optimizer reads the 16-bit shard
        return StateBytes(parameters=2, gradients=reduce, optimizer_states=optimizer_states,
                          gradient_reduce=reduce, parameter_gather=2,
                          step_gradient_copy=4 if reduce != 4 and not uncast else 0,
                          linear_parameter_gather=1 if fp8_gather else None)
    return StateBytes(parameters=2, gradients=2, optimizer_states=4 + moments,
                      gradient_reduce=reduce, parameter_gather=2)


def _te_owns_master(layout: Layout) -> bool:
    """Whether Transformer Engine's FusedAdam owns the precision-aware optimizer's master weights
    and reads the gradient buffer directly: unless fp32 master weights under an fp8 recipe other
    than delayed (`use_precision_aware_optimizer_no_fp8_or_ds_fp8`; module docstring)."""
    return not (layout.precision == "fp8" and layout.fp8_recipe not in (None, "delayed")
                and layout.main_params_dtype in (None, "fp32"))


def megatron_fsdp(layout: Layout) -> bool:
    """Megatron-LM sharding gradients or parameters (zero_stage 2 / 3): Megatron-FSDP
    (`planner.frameworks.megatron.ZERO_FLAGS`)."""
    return layout.framework == "megatron" and layout.zero_stage >= 2


def megatron_fsdp_precision_aware_bytes(layout: Layout) -> int:
    """Optimizer-state bytes per parameter of Megatron-LM's precision-aware optimizer under
    Megatron-FSDP: its fp32 main weight shard (4) + Transformer Engine's master copy of it when TE
    owns the master weights (`_te_owns_master`: `main_params_dtype` fp32 4, fp16 2; else 0) +
    exp_avg + exp_avg_sq. Source: module docstring (Megatron-FSDP)."""
    moments = _DTYPE_BYTES[layout.exp_avg_dtype or "fp32"] + _DTYPE_BYTES[layout.exp_avg_sq_dtype or "fp32"]
    master = 0 if not _te_owns_master(layout) else _DTYPE_BYTES[layout.main_params_dtype or "fp32"]
    return 4 + master + moments


def precision_aware_optimizer_bytes(layout: Layout) -> int:
    """Optimizer-state bytes per parameter of Megatron-LM's precision-aware optimizer: master
    weights (fp16 2; fp32 of bf16 parameters 2, the int16 remainders; fp32 of fp16 parameters 4)
    + exp_avg + exp_avg_sq (fp32 4, fp16 / bf16 2, fp8 1); no gradient copy; except fp32 master
    weights under an fp8 recipe other than delayed: fp32 master 4 + the moments (and, at the step,
    an fp32 gradient copy of a 16-bit buffer: `StateBytes.step_gradient_copy`). Source: module
    docstring (precision-aware optimizer)."""
    moments = _DTYPE_BYTES[layout.exp_avg_dtype or "fp32"] + _DTYPE_BYTES[layout.exp_avg_sq_dtype or "fp32"]
    if not _te_owns_master(layout):  # Megatron owns the fp32 master
        return 4 + moments
    master = 2 if layout.main_params_dtype == "fp16" or layout.precision != "fp16" else 4
    return master + moments


LOSS_CHUNKS = {"megatron": 1, "deepspeed": 1, "torchtitan": 1}
"""Token chunks the loss runs on when `Layout.loss_chunks` is None, by framework: 1, the plain
cross-entropy. Megatron-LM (d98e8a6) and DeepSpeed have no chunked loss. torchtitan's current
releases train every model preset with `ChunkedLossWrapper` (`num_chunks` default 8;
pytorch/torchtitan b5bcd76 torchtitan/components/loss.py, models/*/config_registry.py; since
9530a87, 2026-06-26), but its TOML releases (to 238fa99), which `planner check` reads and `--emit
torchtitan-toml` writes, and every measured torchtitan run the planner is validated on ran the
plain loss: so 1 here, and `planner check` of a current command line reads the preset's 8 (or its
`--loss.num_chunks`), `--emit torchtitan` writes the plan's count whenever it is not 8."""


def fused_qkv(layout: Layout) -> bool:
    """Whether `layout`'s attention runs q, k, v as one matmul: `layout.fused_qkv`, or True, what
    every framework runs today (torchtitan since 3396a4b, `Layout.fused_qkv`); measured torchtitan
    runs older than that state False."""
    return True if layout.fused_qkv is None else layout.fused_qkv


def loss_chunks(layout: Layout) -> int:
    """Token chunks of the loss: `layout.loss_chunks`, or the framework's default (`LOSS_CHUNKS`)."""
    return LOSS_CHUNKS[layout.framework] if layout.loss_chunks is None else layout.loss_chunks


def padded_vocab(model: ModelSpec, layout: Layout) -> int:
    """Embedding rows allocated per the framework (FC-08).

    Megatron / DeepSpeed: round up to a multiple of d × tp, d the run's
    `--make-vocab-size-divisible-by` (`Layout.vocab_divisible_by`), 128 by default
    (MAKE_VOCAB_SIZE_DIVISIBLE_BY); torchtitan: DTensor shards unevenly, the largest shard holds
    ceil(V / tp) rows -> ceil(V/tp)·tp. A checkpoint's rows where a loaded checkpoint fixes them
    (`Layout.vocab_rows`, Megatron's use_checkpoint_args switch).
    """
    if layout.vocab_rows is not None:
        return layout.vocab_rows
    rows = model.padded_vocab_size
    divisible_by = layout.vocab_divisible_by or MAKE_VOCAB_SIZE_DIVISIBLE_BY
    multiple = layout.tp if layout.framework == "torchtitan" else divisible_by * layout.tp
    return -(-rows // multiple) * multiple


def supported_precisions(peak_tflops: Mapping[str, float]) -> tuple[str, ...]:
    """The compute precisions of `Layout.precision` (PRECISIONS order: bf16, fp16, fp8) that a GPU
    runs on its tensor cores, read from its dense-peak table `GPUSpec.peak_tflops`.

    Source: `GPUSpec.peak_tflops` lists only the dtypes the tensor cores support (per-GPU datasheets
    in hardware/*.yaml): e.g. Volta V100 tensor cores take fp16 only (no bf16), Ampere A100 adds
    bf16/tf32 but has no fp8 (fp8 arrives with Hopper's Transformer Engine, NVIDIA H100 whitepaper).
    """
    return tuple(p for p in PRECISIONS if p in peak_tflops)


FP8_TRANSPOSE_FREE_GPUS = ("B200", "B300", "GB200", "GB300")
"""GPU name prefixes (`GPUSpec.name`) of compute capability 10.x (Blackwell data-centre parts),
which run fp8 GEMMs in every layout, so Transformer Engine keeps one fp8 buffer for both usages
of a tensor-scaled fp8 tensor; every other fp8 GPU (Hopper 9.0, Ada 8.9) runs only TN layouts and
TE materialises the transpose as a second buffer. Source: NVIDIA/TransformerEngine@d0067d0
transformer_engine/pytorch/utils.py l. 658-664 `is_non_tn_fp8_gemm_supported` ((10, 0) <=
capability < (12, 0) or >= (13, 0)); pytorch/csrc/quantizer.cpp l. 361-381 (`_data` only with
rowwise usage or non-TN support, `_transpose` only with columnwise usage without it)."""


def blackwell_or_later(gpu_name: str) -> bool:
    """Whether `gpu_name` (`GPUSpec.name`) has compute capability >= 10.0: the catalog's Blackwell
    data-centre parts (`FP8_TRANSPOSE_FREE_GPUS`; no 12.x part is in the catalog). What frameworks
    test as "Blackwell": Megatron-LM's `get_device_arch_version() < 10` (CUDA_DEVICE_MAX_CONNECTIONS)
    and Transformer Engine's MXFP8 support (`check_mxfp8_support`)."""
    return gpu_name.upper().startswith(FP8_TRANSPOSE_FREE_GPUS)


PRE_AMPERE_GPUS = ("V100", "T4", "P100")
"""GPU name prefixes (`GPUSpec.name`) of compute capability below 8.0 (Volta 7.0, Turing 7.5, Pascal
6.0; the catalog holds V100 only), on which Megatron-LM refuses grouped GEMM: `validate_args` asserts
`torch.cuda.get_device_capability()[0] >= 8` under moe_grouped_gemm ("Unsupported compute capability
for GroupedGEMM kernels."). Source: NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py
l. 1378-1380; NVIDIA CUDA GPU compute capability table (V100 7.0, T4 7.5, P100 6.0)."""


def grouped_gemm_supported(gpu_name: str) -> bool:
    """Whether Megatron-LM runs MoE experts as grouped GEMM on `gpu_name` (`PRE_AMPERE_GPUS`)."""
    return not gpu_name.upper().startswith(PRE_AMPERE_GPUS)


def fp8_keeps_transpose(gpu_name: str) -> bool:
    """Whether Transformer Engine keeps a separate transposed copy of a tensor-scaled fp8 tensor
    used both ways on `gpu_name` (`FP8_TRANSPOSE_FREE_GPUS`)."""
    return not blackwell_or_later(gpu_name)


def fp8_weight_bytes(layout: Layout, *, transpose: bool) -> float:
    """Bytes per linear weight element of Transformer Engine's fp8 copy of a weight used by the
    forward GEMM (rowwise) and the backward dgrad GEMM (columnwise), per `layout.fp8_recipe`:

    - delayed / tensorwise (`Float8Tensor`, one scale per tensor): 1 B data + 1 B transpose where
      the GPU needs it (`fp8_keeps_transpose`), else 1 B;
    - blockwise (`Float8BlockwiseQTensor`, 128 x 128 weight blocks, `w_block_scaling_dim` 2:
      common/recipe/__init__.py l. 435-437): 1 B rowwise + 1 B columnwise data (two fp32 scales
      per 16,384 elements, < 0.05 %, ignored): 2 B;
    - mxfp8 (`MXFP8Tensor`): rowwise and columnwise data, each with one E8M0 scale byte per 32
      elements: 2 + 2/32 B.

    Source: NVIDIA/TransformerEngine@d0067d0 module/linear.py l. 462-488 (the weight quantizer's
    usage: rowwise, and columnwise when the input needs a gradient), tensor/float8_tensor.py
    l. 413-425, tensor/mxfp8_tensor.py and tensor/float8_blockwise_tensor.py (the buffers each
    usage allocates), tensor/utils.py l. 1404-1431 `post_all_gather_processing` (an fp8
    parameter's transpose / columnwise data made after its all-gather).
    """
    recipe = layout.fp8_recipe or "delayed"
    if recipe == "mxfp8":
        return 2 + 2 / 32
    if recipe == "blockwise":
        return 2.0
    return 2.0 if transpose else 1.0


def fp8_saved_input_bytes(recipe: str | None) -> float:
    """Bytes per element of the input a Transformer Engine linear saves for its weight-gradient
    GEMM under fp8, per `layout.fp8_recipe`: the quantized input with only the usage the wgrad GEMM
    reads kept (columnwise, or rowwise where sequence parallelism re-gathers it in backward):
    1 B; blockwise adds an fp32 scale per 128 elements (1x128 input tiles, `x_block_scaling_dim`
    1: common/recipe/__init__.py l. 435-437) and mxfp8 an E8M0 byte per 32: 1 + 1/32 B either way.
    `recipe`: `Layout.fp8_recipe` (None: delayed).
    Source: NVIDIA/TransformerEngine@d0067d0 module/linear.py l. 596-621 and
    module/layernorm_linear.py l. 468-487 (`update_usage(rowwise_usage=False)` before
    `save_for_backward`), module/grouped_linear.py l. 901-914."""
    return 1 + 1 / 32 if (recipe or "delayed") in ("blockwise", "mxfp8") else 1.0


def te_fp8(layout: Layout) -> bool:
    """Whether `layout` runs Transformer Engine's fp8 linears: Megatron-LM at precision fp8
    (its fp8 format flag; its TE layer specs). DeepSpeed / torchtitan fp8 are not costed as TE."""
    return layout.framework == "megatron" and layout.precision == "fp8"


def torchao_fp8_recipe(layout: Layout) -> str | None:
    """The torchao float8 recipe torchtitan's linear layers run under `layout`: None unless
    torchtitan at precision fp8; else `layout.fp8_recipe`, or when None the current releases'
    default (`frameworks.torchtitan.FP8_RECIPE_DEFAULT`, rowwise). A `check`ed TOML config without
    a recipe sets tensorwise, what those releases ran (`TOML_FP8_RECIPE_DEFAULT`)."""
    if layout.framework != "torchtitan" or layout.precision != "fp8":
        return None
    return layout.fp8_recipe or frameworks.BY_NAME["torchtitan"].FP8_RECIPE_DEFAULT


def published_fp8_recipe(model: ModelSpec) -> tuple[str, str] | None:
    """(Transformer Engine fp8 recipe, where it is published) the model was pre-trained with: its
    model file's `fp8_training` (e.g. DeepSeek-V3: blockwise, its technical report §3.3.2); None
    when the file states none.

    Raises:
        SpecError: a recipe outside `layout.FP8_RECIPES`, naming the model file and key."""
    given = model.extra.get("fp8_training")
    if given is None:
        return None
    if given["recipe"] not in FP8_RECIPES:
        raise SpecError(f"value {given['recipe']!r} not allowed; allowed: {', '.join(FP8_RECIPES)}",
                        file=given.get("file"), key="fp8_training.recipe")
    return given["recipe"], given["source"]


def default_fp8_recipe(model: ModelSpec, *, precision: str, framework: str) -> str | None:
    """The fp8 recipe a plan or an `explain` of `model` costs when none is asked: the model's
    published pre-training recipe (`published_fp8_recipe`) for Megatron-LM at fp8 -- what one would
    launch, the recipe its own training validated -- else None (Megatron-LM's default, delayed:
    `layout.FP8_RECIPES`). Only Megatron-LM takes the recipe (rule `fp8_recipe`); a config file
    `check` reads keeps what it says (absent: delayed)."""
    found = published_fp8_recipe(model)
    if found is None or precision != "fp8" or framework != "megatron":
        return None
    return found[0]
