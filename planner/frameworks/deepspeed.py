"""DeepSpeed's JSON config keys (`deepspeed.initialize(config=...)`): path, default and the planner
knob each sets.

Source: deepspeedai/DeepSpeed commit edaa722 (edaa7221267243c7be7fb49c5d5f5c4fb97b4641, 2026-08-22)
and https://www.deepspeed.ai/docs/config-json/:
- batch: `deepspeed/runtime/constants.py` (TRAIN_BATCH_SIZE, TRAIN_MICRO_BATCH_SIZE_PER_GPU,
  GRADIENT_ACCUMULATION_STEPS); `deepspeed/runtime/config.py` `_set_batch_related_parameters`
  derives a missing one from the other two;
- ZeRO: `deepspeed/runtime/zero/config.py` (`stage`, default 0; `offload_optimizer`,
  `offload_param`; the deprecated `cpu_offload` / `cpu_offload_param` booleans and the boolean form
  of `zero_optimization` itself, `read_zero_config_deprecated`); offload devices:
  `deepspeed/runtime/zero/offload_config.py` `OffloadDeviceEnum`;
- precision: `deepspeed/runtime/precision_config.py` (`bf16`, legacy `bfloat16`, `fp16`: each
  `enabled`, default false);
- optimizer: `config.py` `get_optimizer_name` (`optimizer.type`; `DEEPSPEED_OPTIMIZERS` matched
  lower-cased) and `runtime/engine.py` `_configure_basic_optimizer` (other names looked up in
  `torch.optim`, case-sensitive);
- tensor parallelism: `deepspeed/runtime/tensor_parallel/config.py` `TPTrainingConfig`
  (`autotp_size`, default 0 = off; `tp.tp_size`, default 1);
- overlaps: `zero_optimization.overlap_comm` (gradient reduction during backward; default
  None = true at stage 3 only, `zero/config.py` l. 138 and `overlap_comm_valid` l. 383-386) and
  `stage3_prefetch_bucket_size` (ZeRO-3 parameters fetched ahead of use, default 5e7 elements,
  0 = no prefetch, l. 215); ZeRO-1/2 gather the updated parameters inside the optimizer step
  (no overlap, no key);
- buckets (`zero/config.py` l. 113-244): `reduce_bucket_size` and `allgather_bucket_size` 5e8 elements,
  `stage3_max_live_parameters` 1e9, `stage3_param_persistence_threshold` 1e5 (`BUCKETS`); `gradient_clipping` (`constants.py` GRADIENT_CLIPPING_DEFAULT 1.0:
  DeepSpeed clips the gradient norm at 1.0 unless told otherwise); `optimizer.params` (passed to the
  optimizer's constructor, `engine.py` _configure_basic_optimizer);
- `sequence_parallel_size` (Ulysses, `config.py`), `expert_parallel` (AutoEP, `config.py`
  EXPERT_PARALLEL), `data_parallel_size`, `activation_checkpointing`
  (`deepspeed/runtime/activation_checkpointing/config.py`: it tunes checkpointing, which the model
  code switches on with `deepspeed.checkpointing.checkpoint`).

`KEYS` is the table; `KEY[knob]` a key's dotted path, `DEFAULT[knob]` DeepSpeed's value when absent.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    """One DeepSpeed config key."""

    knob: str
    """What it sets, in the planner's terms (a `Layout` field or a named setting)."""
    path: str
    """Its dotted path in the JSON (`zero_optimization.stage`)."""
    default: int | str | bool | None = None
    """DeepSpeed's value when the key is absent (None: required, or derived)."""


KEYS = (
    Key("global_batch_size", "train_batch_size"),
    Key("micro_batch_size", "train_micro_batch_size_per_gpu"),
    Key("num_microbatches", "gradient_accumulation_steps"),
    Key("zero_stage", "zero_optimization.stage", 0),
    Key("optimizer_offload", "zero_optimization.offload_optimizer.device", "none"),
    Key("parameter_offload", "zero_optimization.offload_param.device", "none"),
    Key("optimizer_offload_deprecated", "zero_optimization.cpu_offload", False),
    Key("parameter_offload_deprecated", "zero_optimization.cpu_offload_param", False),
    Key("bf16", "bf16.enabled", False),
    Key("bf16_legacy", "bfloat16.enabled", False),
    Key("fp16", "fp16.enabled", False),
    Key("grad_reduce_dtype", "communication_data_type"),
    Key("optimizer", "optimizer.type"),
    Key("tp", "tensor_parallel.autotp_size", 0),
    Key("tp_size", "tensor_parallel.tp.tp_size", 1),
    Key("recompute_tuning", "activation_checkpointing"),
    Key("cp", "sequence_parallel_size", 1),
    Key("ep", "expert_parallel.enabled", False),
    Key("dp", "data_parallel_size"),
    Key("overlap_grad_reduce", "zero_optimization.overlap_comm"),
    Key("zero3_prefetch", "zero_optimization.stage3_prefetch_bucket_size", 50_000_000),
    Key("reduce_bucket", "zero_optimization.reduce_bucket_size", 500_000_000),
    Key("allgather_bucket", "zero_optimization.allgather_bucket_size", 500_000_000),
    Key("zero3_live_parameters", "zero_optimization.stage3_max_live_parameters", 1_000_000_000),
    Key("zero3_persistence", "zero_optimization.stage3_param_persistence_threshold", 100_000),
    Key("grad_clip", "gradient_clipping", 1.0),
    Key("optimizer_params", "optimizer.params"),
)
"""Every DeepSpeed key the planner reads or writes (module docstring for sources)."""

KEY = {k.knob: k.path for k in KEYS}
"""knob -> dotted key path."""
DEFAULT = {k.knob: k.default for k in KEYS}
"""knob -> DeepSpeed's value when absent."""
TOP_LEVEL = tuple(dict.fromkeys(k.path.split(".")[0] for k in KEYS))
"""The top-level keys of `KEYS`, in table order."""
MARKERS = tuple(dict.fromkeys(KEY[k].split(".")[0] for k in (
    "global_batch_size", "micro_batch_size", "num_microbatches", "zero_stage")))
"""Top-level keys that mark a JSON file as a DeepSpeed config (batch and ZeRO settings)."""
OTHER_TOP_LEVEL = frozenset((
    "scheduler", "prescale_gradients", "gradient_predivide_factor",
    "sparse_gradients", "amp", "zero_allow_untested_optimizer",
    "zero_force_ds_cpu_optimizer", "flops_profiler", "autotuning", "steps_per_print",
    "wall_clock_breakdown", "dump_state", "memory_breakdown", "tensorboard", "wandb", "csv_monitor",
    "comet", "elasticity", "data_efficiency", "curriculum_learning", "compression_training",
    "checkpoint", "aio", "data_types", "sparse_attention", "pipeline", "disable_allgather",
    "seq_parallel_communication_data_type", "torch_autocast", "compile", "nebula",
    "hybrid_engine", "weight_quantization", "use_data_before_expert_parallelism", "timers",
    "graph_harvesting", "eigenvalue", "progressive_layer_drop", "quantize_training"))
"""Other DeepSpeed top-level keys, not read by the planner.
Source: https://www.deepspeed.ai/docs/config-json/ and `deepspeed/runtime/config.py`."""


BUCKETS = {"reduce_bucket": "reduce_bucket_size", "allgather_bucket": "allgather_bucket_size",
           "zero3_prefetch": "prefetch_bucket_size", "zero3_live_parameters": "max_live_parameters",
           "zero3_persistence": "param_persistence_threshold"}
"""`Layout.buckets` knob (`placement.layout.BUCKET_KNOBS`) -> its DeepSpeedZeroConfig field name. The
three ZeRO-3 fields are declared with the `stage3_` alias that `KEY` writes (`zero/config.py` @edaa722
l. 215, 221, 238: `Field(..., alias="stage3_prefetch_bucket_size")` etc.); the model populates by name
or alias (`config_utils.py` DeepSpeedConfigModel populate_by_name=True), so both spellings set the
knob. What each size does on the GPU (`cost.memory`):
- reduce_bucket_size: ZeRO-1/2 and ZeRO-3 allocate the gradient bucket `torch.empty(reduce_bucket_size)`
  (`stage_1_and_2.py` l. 2502, `stage3.py` l. 733), the `gradient_buckets` term;
- allgather_bucket_size: only splits ZeRO-1/2's parameter all-gather when torch lacks
  all_gather_into_tensor (`runtime/utils.py` l. 1016-1020 `all_gather_dp_groups`): no memory; its
  start-up assertion `allgather_bucket_size % 2 == 0` (`stage_1_and_2.py` l. 349-351) is a finding;
- stage3_prefetch_bucket_size: elements fetched ahead of use (`partitioned_param_coordinator.py`
  l. 452-476); 0 switches prefetch off (`Layout.overlap_param_gather`); the gathered memory keeps the
  unit-pair convention (`cost.memory._deepspeed_zero3_terms`), its size is not costed apart;
- stage3_max_live_parameters: the cap on gathered parameters (`cost.memory._deepspeed_zero3_terms`);
- stage3_param_persistence_threshold: a parameter of at most this many elements stays whole on every
  GPU (`parameter_offload.py` l. 311-323 `mark_persistent_parameters`: `param.ds_numel <= param_threshold`),
  the `persistent_parameters` term."""


TRAINER_FILLS = {key: arg for key, arg in (
    ("train_micro_batch_size_per_gpu", "per_device_train_batch_size"),
    ("gradient_accumulation_steps", "gradient_accumulation_steps"),
    ("train_batch_size", "world_size x per_device_train_batch_size x gradient_accumulation_steps"),
    ("bf16.enabled", "bf16"), ("fp16.enabled", "fp16"), ("gradient_clipping", "max_grad_norm"),
    ("optimizer.params.lr", "learning_rate"), ("optimizer.params.betas", "adam_beta1, adam_beta2"),
    ("optimizer.params.eps", "adam_epsilon"), ("optimizer.params.weight_decay", "weight_decay"),
    ("zero_optimization.reduce_bucket_size", "hidden_size x hidden_size"),
    ("zero_optimization.stage3_prefetch_bucket_size", "int(0.9 x hidden_size x hidden_size), ZeRO-3"),
    ("zero_optimization.stage3_param_persistence_threshold", "10 x hidden_size, ZeRO-3"))}
"""The DeepSpeed keys whose "auto" the Hugging Face Trainer replaces, -> what it fills them from (its
TrainingArguments, or the model's hidden_size). Source: huggingface/transformers@3a80c16
`src/transformers/integrations/deepspeed.py` HfTrainerDeepSpeedConfig.trainer_config_process (batch keys,
clipping, optimizer params, fp16 / bf16 `enabled`; scheduler and amp keys, not read here) and
trainer_config_finalize (the three hidden-size keys; the ZeRO-3 two only under ZeRO-3). `planner check` fills
the batch and precision keys from `--set KEY=VALUE` (the values the Trainer would resolve them to), derives
train_batch_size as DeepSpeed does, fills the hidden-size keys from the model as the Trainer does, and ignores
the rest (not costed)."""
TRAINER_SETTABLE = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
                    "bf16.enabled", "fp16.enabled")
"""`TRAINER_FILLS` keys `planner check --set` resolves (the ones the check reads)."""
TRAINER_HIDDEN_SIZE = {"reduce_bucket": lambda h: h * h, "zero3_prefetch": lambda h: int(0.9 * h * h),
                       "zero3_persistence": lambda h: 10 * h}
"""`BUCKETS` knob -> the value the Trainer gives its "auto" from the model's hidden_size (`TRAINER_FILLS`)."""


def bucket(layout, knob: str) -> int:
    """The size, elements, of `knob` (BUCKETS) under `layout`: `Layout.buckets`' value, else
    DeepSpeed's default (`DEFAULT`)."""
    return dict(layout.buckets or ()).get(knob, DEFAULT[knob])


def section(path: str) -> tuple[str, ...]:
    """The keys of a dotted path (`zero_optimization.offload_param.device` -> 3 keys)."""
    return tuple(path.split("."))


def overlap_switches(zero_stage: int) -> tuple[str, ...]:
    """The overlap knobs (`Layout` fields) a DeepSpeed config switches: gradient reduction
    (`overlap_comm`) at every stage, parameter prefetch (`stage3_prefetch_bucket_size`) at stage 3."""
    return ("overlap_grad_reduce",) + (("overlap_param_gather",) if zero_stage == 3 else ())


def fused_elementwise(torch_compile: bool | None) -> bool:
    """DeepSpeed's rows here run Megatron-DeepSpeed's layers, which fuse their elementwise kernels
    as Megatron-LM does (`frameworks.megatron.fused_elementwise`)."""
    return True


def attention_kernel() -> str:
    """The attention core of the Megatron-DeepSpeed layers DeepSpeed's rows run: taken as
    Megatron-LM's ("fused", `frameworks.megatron.attention_kernel`); every DeepSpeed row here
    runs on A100, where the fused curve is what was fitted (not verified on Hopper)."""
    return "fused"


def cp_ring_bytes(cp: int) -> tuple[float, float, float, float]:
    """Ring context parallelism's HBM bytes outside the attention kernels under DeepSpeed rows:
    taken as Megatron-LM's (`frameworks.megatron.cp_ring_bytes`: Megatron-DeepSpeed's layers);
    DeepSpeed's own sequence parallelism is Ulysses (`Layout.cp_comm_type` a2a, no ring). No
    DeepSpeed CP row here."""
    from planner.frameworks import megatron
    return megatron.cp_ring_bytes(cp)


def cp_ring_exchange() -> tuple[str, bool, int]:
    """Ring context parallelism's K/V exchange under DeepSpeed rows: taken as Megatron-LM's
    (`frameworks.megatron.cp_ring_exchange`), as `cp_ring_bytes`. No DeepSpeed CP row here."""
    from planner.frameworks import megatron
    return megatron.cp_ring_exchange()


def p2p_overlap(vpp: int) -> bool:
    """DeepSpeed's pipeline engine sends and receives synchronously, one instruction after another
    (deepspeedai/DeepSpeed@edaa722 deepspeed/runtime/pipe/schedule.py `TrainSchedule.steps`:
    SendGrad / RecvActivation / ForwardPass in order), and has no interleaved schedule: no overlap."""
    return False


def grad_accumulation_bytes_per_param(precision: str, zero_stage: int, pp: int) -> float:
    """HBM bytes per parameter (of the rank's stage, before ZeRO sharding) that DeepSpeed moves
    outside the GEMMs in each micro-batch's backward to accumulate gradients, with 16-bit weights:
    - autograd's AccumulateGrad adds each fresh weight gradient into the parameter's existing 16-bit
      `.grad` in place (read both, write one: 3 x 2 B). DeepSpeed keeps `.grad` between the
      micro-batches of a step: the backward hook-free paths (ZeRO 0-1; the reduction runs at the
      step's boundary, `deepspeed/runtime/pipe/engine.py` `_exec_reduce_grads` l. 296-304 in the
      schedule's last step, `schedule.py` `TrainSchedule.steps` l. 237-241); Megatron-LM instead fuses
      the add into the weight-gradient GEMM (gradient_accumulation_fusion into main_grad), which
      this planner prices as free.
    - with the pipeline engine and bf16 at ZeRO 0 the engine wraps the optimizer in BF16_Optimizer
      (`deepspeed/runtime/engine.py` `_do_optimizer_sanity_check` l. 2011-2018: bf16 weights, bf16
      accumulation dtype by default, pipeline parallelism -> BFLOAT16), and every micro-batch's
      backward on a stage first zeroes the 16-bit gradients (`pipe/engine.py` l. 861-863,
      `bf16_optimizer.py` `clear_lp_grads` l. 473-489, `_foreach_zero_`: 2 B) and then adds them into
      the fp32 gradient copy (`pipe/engine.py` l. 882-885 `update_hp_grads`, `bf16_optimizer.py`
      l. 371 `hp_grad.add_(lp.grad.to(fp32))`: read 2 + write a 4 B fp32 temporary, read it and the
      fp32 gradient, write it: 18 B), `bfloat16.immediate_grad_update` false by default
      (`deepspeed/runtime/precision_config.py` l. 51).
    - at ZeRO 2-3 the gradient hooks instead copy each 16-bit gradient into the contiguous reduce
      bucket (read 2 + write 2 = 4 B; `zero/config.py` l. 102 contiguous_gradients true by default,
      `zero/stage_1_and_2.py` l. 1230-1232, `zero/stage3.py` l. 1554-1559) before its reduce-scatter.
    So 6 B, 26 B under BF16_Optimizer, 4 B at ZeRO 2-3; 0 for fp32 weights (not costed). At ZeRO 0-1
    charged every micro-batch although the first of a step finds no `.grad` (zero_grad sets None)
    and skips the add: a 1/m overcount. The BF16_Optimizer path at ZeRO 1 (fp32
    `data_types.grad_accum_dtype`, engine.py l. 1994-1996) is not read from a Layout. Source:
    deepspeedai/DeepSpeed@edaa722 (files and lines above)."""
    if precision not in ("bf16", "fp16", "fp8"):
        return 0.0
    if zero_stage >= 2:
        return 4.0
    bf16_optimizer = precision == "bf16" and zero_stage == 0 and pp > 1
    return 6.0 + (20.0 if bf16_optimizer else 0.0)


def overlap_defaults(zero_stage: int) -> dict[str, bool]:
    """DeepSpeed's overlaps when its keys are absent: gradient reduction and parameter prefetch on
    at ZeRO-3 only (module docstring); no TP comm or expert all-to-all overlap."""
    return {"tp_comm_overlap": False, "overlap_grad_reduce": zero_stage == 3,
            "overlap_param_gather": zero_stage == 3 and DEFAULT["zero3_prefetch"] > 0,
            "ep_comm_overlap": False}


OFFLOAD_DEVICES = ("none", "cpu", "nvme")
"""`OffloadDeviceEnum` values."""
OFFLOAD = {"optimizer": "optimizer_offload", "parameters": "parameter_offload"}
"""Offloaded state (`Layout.offload`) -> the knob of its offload device key."""
OFFLOAD_SECTIONS = {state: section(KEY[knob])[1] for state, knob in OFFLOAD.items()}
"""Offloaded state -> its ZeRO sub-section."""
SEARCHED_OFFLOAD = (frozenset(), frozenset({"optimizer"}), frozenset({"optimizer", "parameters"}))
"""`Layout.offload` sets `planner plan` tries under DeepSpeed: none (the default device "none"),
ZeRO-Offload (the optimizer states on the host, updated there by CPU-Adam; Ren et al. 2021 §4)
and ZeRO-Infinity's CPU offload (the parameters too, ZeRO-3 only; Rajbhandari et al. 2021 §5).
The parameters alone (the optimizer, the larger state, left on the GPU) are not tried
[Convention]. Which ZeRO stage each needs: `placement.rules._offload_needs_zero`."""
GRAD_REDUCE_DTYPES = ("fp16", "bf16", "fp32")
"""`communication_data_type` values (`get_communication_data_type`, deepspeed/runtime/config.py);
absent = the compute dtype (`DeepSpeedEngine.communication_data_type`, engine.py l. 1405-1416)."""

MOE_DISPATCHERS: tuple[str, ...] = ()
"""`Layout.moe_dispatcher` values DeepSpeed can be set to: none (DeepSpeed-MoE has one all-to-all
dispatch, deepspeed/moe/sharded_moe.py `_AllToAll`, and no setting choosing another)."""
BATCH_HELD = "global"
"""What a launch holds fixed when its degrees change (`placement.rules` fix hints): the global batch
(train_batch_size, which `_set_batch_related_parameters` in deepspeed/runtime/config.py asserts equals micro
batch x gradient accumulation x dp)."""
ZERO_STAGES = (0, 1, 2, 3)
"""ZeRO stages DeepSpeed implements (`ZeroStageEnum`); ZeRO-2/3 with its pipeline engine is the
placement rule `zero_with_pp`."""

OPTIMIZER_NAMES = {"adam": "adamw", "adamw": "adamw"}
"""`DEEPSPEED_OPTIMIZERS` names (matched lower-cased) -> the costed optimizer (Adam and AdamW keep
the same fp32 master, m and v states)."""
TORCH_OPTIMIZERS = {"SGD": "sgd"}
"""torch.optim class names (matched exactly, `getattr(torch.optim, name)`) -> costed optimizer."""
OPTIMIZER_TYPES = {"adamw": "AdamW", "sgd": "SGD"}
"""Costed optimizer -> the `optimizer.type` written."""
OPTIMIZER_DEFAULTS = {"adamw": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
                      "sgd": {"lr": 1e-3, "momentum": 0.9}}
"""`optimizer.params` written when the model family publishes no values (`emit.deepspeed._optimizer_params`).
AdamW: DeepSpeed's FusedAdam defaults (`deepspeed/ops/adam/fused_adam.py` @edaa722 FusedAdam.__init__: lr 1e-3,
betas (0.9, 0.999), eps 1e-8, weight_decay 0, adam_w_mode True), what DeepSpeed runs with the section absent.
SGD: torch.optim.SGD's lr default 1e-3 and momentum 0.9 -- torch's default momentum is 0, which keeps no
momentum buffer, but the planner costs SGD with one fp32 buffer per parameter (`placement.precision`
_MOMENTS_BYTES['sgd'] 4 B), so the JSON asks for a momentum to run what was costed [convention: 0.9]."""
PRECISION_SECTIONS = {"bf16": section(KEY["bf16"])[0], "fp16": section(KEY["fp16"])[0]}
"""Plan precision -> the section whose `enabled` is set."""

CHECKPOINT_CALL = "deepspeed.checkpointing.checkpoint"
"""What the model code wraps a layer in to recompute it
(`deepspeed/runtime/activation_checkpointing/checkpointing.py`): the JSON cannot switch recompute
on."""

NOT_IN_JSON = {
    "pp": "pipeline stages are built in code (deepspeed.pipe.PipelineModule), not in the JSON",
    "vpp": "interleaved virtual stages need a pipeline, which the JSON cannot build",
    "cp": "Ulysses sequence parallelism is set up in code and not read back from the JSON",
    "ep": "expert parallelism (AutoEP) is not read back from the JSON",
    "etp": "expert tensor parallelism (AutoEP) is not read back from the JSON",
}
"""Degree (> 1) -> why a DeepSpeed JSON cannot launch it (the config reader `planner.check.deepspeed`
fixes each at 1; the writer `planner.emit.deepspeed` refuses a plan or `--fix` above 1)."""
LAUNCH_PINS = {**dict.fromkeys(NOT_IN_JSON, 1), "sequence_parallel": False}
"""The layout fields under which every layout is one a DeepSpeed JSON launches: the degrees of
NOT_IN_JSON at 1, and no Megatron-style sequence parallelism (AutoTP, the JSON's tensor parallelism,
`engine.py` `_configure_tensor_parallel_states` @edaa722, has none). `planner plan --framework deepspeed`
searches under them where the user pins no other value (`planner.plan.plan`), so its OPTIMAL is the
optimum over what `--emit deepspeed` writes; the writer refuses a plan or pin outside them."""

FIX_TERMS = {
    "recompute selective": "selective activation recompute in the model code",
    "recompute full": f"{CHECKPOINT_CALL} around every layer (model code)",
    "micro_batch_size": f"{KEY['micro_batch_size']} {{}} with {KEY['num_microbatches']} {{microbatches}} "
                        f"({KEY['global_batch_size']} kept)",
    "zero_stage": f"{KEY['zero_stage']} {{}}",
}
"""The gate's single-knob changes (`planner.check.gate._single_changes`) in DeepSpeed's keys;
`{}` takes the new value, `{microbatches}` the micro-batches per step after it (DeepSpeed asserts
train_batch_size = micro-batch x gradient accumulation steps x dp: deepspeedai/DeepSpeed edaa722
`deepspeed/runtime/config.py` `_batch_assertion`)."""

ZERO_FIELDS = frozenset((
    "allgather_bucket_size", "allgather_partitions", "allgather_sequential", "contiguous_gradients",
    "cpu_offload", "cpu_offload_param", "cpu_offload_use_pin_memory", "elastic_checkpoint",
    "enable_sanity_checks", "gather_16bit_weights_on_model_save", "ignore_unused_parameters",
    "leaf_module", "legacy_stage1", "load_from_fp32_weights", "log_trace_cache_warnings",
    "max_live_parameters", "max_reuse_distance", "memory_efficient_linear",
    "mics_hierarchical_params_gather", "mics_shard_size", "model_persistence_threshold",
    "module_granularity_threshold", "offload_optimizer", "offload_param", "overlap_comm",
    "override_module_apply", "param_persistence_threshold", "pipeline_loading_checkpoint",
    "prefetch_bucket_size", "reduce_bucket_size", "reduce_scatter", "round_robin_gradients",
    "save_muon_momentum_buffer_in_memory", "stage", "stage3_allgather_sequential",
    "stage3_gather_16bit_weights_on_model_save", "stage3_gather_fp16_weights_on_model_save",
    "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_model_persistence_threshold",
    "stage3_module_granularity_threshold", "stage3_param_persistence_threshold",
    "stage3_prefetch_bucket_size", "stage3_use_all_reduce_for_fetch_params", "sub_group_size",
    "use_all_reduce_for_fetch_params", "use_multi_rank_bucket_allreduce", "zenflow",
    "zero_hpz_partition_size", "zero_quantized_gradients", "zero_quantized_nontrainable_weights",
    "zero_quantized_weights", "zeropp_loco_param"))
"""Every key `zero_optimization` accepts: the fields of `deepspeed/runtime/zero/config.py`
DeepSpeedZeroConfig at edaa722 and their `stage3_` aliases. Its model forbids any other
(`deepspeed/runtime/config_utils.py` DeepSpeedConfigModel: extra="forbid", populate_by_name), so
DeepSpeed stops at start-up on a misspelled ZeRO key, unlike an unknown top-level key."""

_ZERO_AT_LEAST_0 = ("allgather_bucket_size", "sub_group_size", "prefetch_bucket_size",
                    "param_persistence_threshold", "model_persistence_threshold",
                    "max_live_parameters", "max_reuse_distance")
ZERO_BOUNDS = {"reduce_bucket_size": 1, "zero_hpz_partition_size": 0,
               **{key: 0 for key in _ZERO_AT_LEAST_0},
               **{f"stage3_{key}": 0 for key in _ZERO_AT_LEAST_0[2:]}}
"""`zero_optimization` key -> the least integer DeepSpeedZeroConfig accepts, under its field name
and its `stage3_` alias (the model populates by either): every bounded field of DeepSpeed 0.19.8
(the PyPI release, `deepspeed/runtime/zero/config.py` l. 113-324: reduce_bucket_size
Field(gt=0), since edaa722's ge=0; allgather_bucket_size, sub_group_size, prefetch_bucket_size,
param_persistence_threshold, model_persistence_threshold, max_live_parameters, max_reuse_distance,
zero_hpz_partition_size Field(ge=0)). The fields are `int`: a value below its bound or with a
fractional part makes pydantic raise a ValidationError when DeepSpeed builds its config, before
training starts."""
