"""torchtitan's TOML job-config keys: section, name, older spellings, default and the planner knob
each sets.

Source: pytorch/torchtitan commit 238fa99 (238fa9953e4aec2a62582121564273d7cbb1e9f1, 2026-02-23, the
last commit before the TOML configs were replaced by Python registries in 9810191; the newest
snapshot read, b5bcd76 of 2026-08-21, has no TOML job configs): `torchtitan/config/job_config.py`
(dataclasses `Job`, `Model`, `Optimizer`, `Training`, `Parallelism`, `ActivationCheckpoint`) and
`torchtitan/models/llama3/train_configs/llama3_{8b,70b,405b}.toml`. Older spellings, from the
history:
- `[training] batch_size` (renamed `local_batch_size`, with `global_batch_size` added, in 8570415,
  2025-06-05, "Support gradient accumulation");
- the degrees under `[training]` (data_parallel_*, tensor_parallel_degree) and `[experimental]`
  (pipeline and context parallelism) before `[parallelism]` (785c34c, 2025-03-18);
- `pipeline_parallel_microbatches` (a count, default pp) before `pipeline_parallel_microbatch_size`
  (5e2033c, 2025-04-07);
- `[float8] enable_float8_linear = true` before the `model.converters = ["float8"]` converter
  (57387af, 2025-02-14); converter "quantize.linear.float8" since 8a2686c (2025-09-30).

The current releases (from 9810191; read at b5bcd76, `CLI_COMMIT`) launch a Python config
function with `--module` / `--config` and `--section.field` overrides; the second part of this
module holds that form: the fields the command line takes (`CLI_FIELDS`), the token-based batch
keys, the activation-checkpoint subcommand and the config functions' values (`PRESETS`).

`KEYS` is the table: setting -> (section, key) spellings, the current one first; `KEY[setting]` the
current dotted spelling, `NAME[setting]` its key within the section, `DEFAULT[setting]`
torchtitan's value when absent (`job_config.py`).
"""

from __future__ import annotations

KEYS = {
    "local_batch": (("training", "local_batch_size"), ("training", "batch_size")),
    "global_batch_size": (("training", "global_batch_size"),),
    "seq_len": (("training", "seq_len"),),
    "param_dtype": (("training", "mixed_precision_param"),),
    "reduce_dtype": (("training", "mixed_precision_reduce"),),
    "dtype": (("training", "dtype"),),
    "offload": (("training", "enable_cpu_offload"),),
    "reshard": (("parallelism", "fsdp_reshard_after_forward"),),
    "replicate": (("parallelism", "data_parallel_replicate_degree"),
                  ("training", "data_parallel_replicate_degree")),
    "shard": (("parallelism", "data_parallel_shard_degree"),
              ("training", "data_parallel_shard_degree")),
    "tp": (("parallelism", "tensor_parallel_degree"), ("training", "tensor_parallel_degree")),
    "pp": (("parallelism", "pipeline_parallel_degree"), ("experimental", "pipeline_parallel_degree")),
    "cp": (("parallelism", "context_parallel_degree"), ("experimental", "context_parallel_degree")),
    "ep": (("parallelism", "expert_parallel_degree"),),
    "etp": (("parallelism", "expert_tensor_parallel_degree"),),
    "pp_microbatch_size": (("parallelism", "pipeline_parallel_microbatch_size"),),
    "pp_microbatches": (("parallelism", "pipeline_parallel_microbatches"),
                        ("experimental", "pipeline_parallel_microbatches")),
    "pp_schedule": (("parallelism", "pipeline_parallel_schedule"),
                    ("experimental", "pipeline_parallel_schedule")),
    "pp_schedule_csv": (("parallelism", "pipeline_parallel_schedule_csv"),
                        ("experimental", "pipeline_parallel_schedule_csv")),
    "pp_layers_per_stage": (("parallelism", "pipeline_parallel_layers_per_stage"),),
    "pp_first_less": (("parallelism", "pipeline_parallel_first_stage_less_layers"),),
    "pp_last_less": (("parallelism", "pipeline_parallel_last_stage_less_layers"),),
    "pp_fqns": (("parallelism", "module_fqns_per_model_part"),),
    "pp_split_points": (("parallelism", "pipeline_parallel_split_points"),
                        ("experimental", "pipeline_parallel_split_points")),
    "ac_mode": (("activation_checkpoint", "mode"),),
    "ac_option": (("activation_checkpoint", "selective_ac_option"),),
    "async_tp": (("parallelism", "enable_async_tensor_parallel"),),
    "compile": (("compile", "enable"),),
    "converters": (("model", "converters"),),
    "float8_linear": (("float8", "enable_float8_linear"),),
    "fp8_recipe": (("quantize.linear.float8", "recipe_name"), ("float8", "recipe_name")),
    "model_name": (("model", "name"),),
    "model_flavor": (("model", "flavor"),),
    "optimizer": (("optimizer", "name"),),
    "description": (("job", "description"),),
}
"""Setting -> (section, key) spellings, the current one first (module docstring). The reader reads
`READ` (the model's name and flavor by their own code); the writer writes the current spellings."""

READ = tuple(s for s in KEYS if s not in ("model_name", "model_flavor", "optimizer", "description", "fp8_recipe"))
"""The settings `planner check` reads through `KEYS` (its typo and unknown-key checks cover their
sections)."""
KEY = {setting: ".".join(spellings[0]) for setting, spellings in KEYS.items()}
"""Setting -> its current dotted key (`parallelism.tensor_parallel_degree`)."""
SEARCHED_OFFLOAD = (frozenset(),)
"""`Layout.offload` sets `planner plan` tries under torchtitan: none. `KEY["offload"]` (FSDP2's
`CPUOffloadPolicy`: parameters, gradients and optimizer states on the host; torchtitan @9dec370
parallelisms/parallelize_llama.py `apply_fsdp`), which `check` reads as parameters + optimizer,
is not searched: `emit.torchtitan` does not write it, so a plan choosing it would launch without."""
NAME = {setting: spellings[0][1] for setting, spellings in KEYS.items()}
"""Setting -> its current key within its section (`tensor_parallel_degree`)."""
SECTION = {setting: spellings[0][0] for setting, spellings in KEYS.items()}
"""Setting -> its current section (`parallelism`)."""
DEFAULT = {"local_batch": 8, "global_batch_size": -1, "seq_len": 2048, "param_dtype": "bfloat16",
           "reduce_dtype": "float32", "dtype": "float32", "offload": False, "reshard": "default", "replicate": 1, "shard": -1,
           "tp": 1, "pp": 1, "cp": 1, "ep": 1, "etp": 1, "pp_microbatch_size": 1, "pp_schedule": "1F1B",
           "pp_first_less": 1, "pp_last_less": 1, "ac_mode": "selective", "ac_option": "2",
           "optimizer": "AdamW", "async_tp": False, "compile": False}
"""Setting -> torchtitan's value when absent (`job_config.py`; shard -1 = the GPUs left; global
batch -1 = local batch x dp)."""

OVERLAP_KNOBS = {"tp_comm_overlap": "async_tp"}
"""Overlap knob (`Layout` field) -> the setting that switches it: AsyncTP (`job_config.py`
Parallelism.enable_async_tensor_parallel, default false, "only effective when compile is
enabled", i.e. with the `compile` setting, `job_config.py` Compile.enable; since 9810191
`compile.enable_async_tensor_parallel`, `config/configs.py` l. 298 at `CLI_COMMIT`). FSDP2 reduce-scatters gradients during backward and prefetches the next module's
all-gather (implicit prefetch), DDP buckets its all-reduce during backward: always on, no key."""


def overlap_switches(zero_stage: int) -> tuple[str, ...]:
    """The overlap knobs a torchtitan config switches (AsyncTP only)."""
    return tuple(OVERLAP_KNOBS)


def fused_elementwise(torch_compile: bool | None) -> bool:
    """Whether the transformer blocks' elementwise kernels are fused: with torch.compile
    (`compile.enable`, default false: pytorch/torchtitan@b5bcd76 torchtitan/config/configs.py
    l. 294-296 CompileConfig.enable; torchtitan/distributed/compile.py apply_compile compiles each
    TransformerBlock), else eager PyTorch (`cost.step_time` prices the difference)."""
    return DEFAULT["compile"] if torch_compile is None else torch_compile


def attention_kernel() -> str:
    """torchtitan's attention core in the runs measured here: PyTorch's
    `F.scaled_dot_product_attention` (pytorch/torchtitan@9dec370 torchtitan/models/llama/model.py
    l. 209), whose default backend order on CUDA is flash, efficient, math, cuDNN (cuDNN made
    opt-in after PyTorch 2.5: pytorch/pytorch#138522, the order quoted in pytorch/pytorch#138907),
    and with context parallelism restricted to the flash and efficient backends
    (torchtitan/utils.py l. 209-216 at that commit). The flash backend is FlashAttention-2
    (aten's vendored kernel): `compute.attention_efficiency` "flash_attention_2". The torch of
    the 2025-06 H200 run (2.8.0a0, benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md) keeps
    the same order. Today's default (pytorch/torchtitan@b5bcd76 models/llama3/__init__.py
    l. 371, `attn_backend="flex"`) is FlexAttention, a Triton kernel with no measured row here;
    it is priced on the same curve (an assumption)."""
    return "flash_attention_2"


def cp_ring_bytes(cp: int) -> tuple[float, float, float, float]:
    """HBM bytes that PyTorch's ring `context_parallel` (what torchtitan runs) moves outside the
    attention kernels of one layer, per element, as `frameworks.megatron.cp_ring_bytes`: (forward
    per output element, forward per K/V element, backward per dQ element, backward per dK/dV
    element), (cp - 1) x (38, 4, 10, 25). Each step after the first merges its partial output in
    eager fp32 (`_SDPAMerger.step`, `convert_to_f32` default True: `out.to(float32)` read 2 +
    write 4, then `out - block_out`, `sigmoid(...) * (...)`, `out - ...`, fp32 reads and writes:
    38) and concatenates K and V for the next exchange (`torch.cat`, read 2 + write 2); the
    backward accumulates in fp32 (`grad_query += grad_query_`: 10; `_partial_update` of dK / dV,
    the `torch.cat` of the chunks and of dK and dV for the all-to-all, and the K/V concatenation:
    25); the K/V elements are those of the query heads (`cp_ring_exchange`: `repeat_kv`). Source:
    pytorch/pytorch torch/distributed/tensor/experimental/_attention.py
    (`_SDPAMerger`, `_templated_ring_attention`, `_templated_ring_attention_backward`,
    `_partial_update`), as read at @f2127dbd and @0123248a by the `cpcausal` work (not re-read
    for this table; step 0's copies not counted)."""
    later = float(max(cp - 1, 0))
    return 38.0 * later, 4.0 * later, 10.0 * later, 25.0 * later


def cp_ring_exchange() -> tuple[str, bool, int]:
    """How PyTorch's ring `context_parallel` (torchtitan's CP) moves K/V and dK/dV: (K/V rotation,
    whether the K/V sent carry the query heads, dK/dV bytes per element sent).

    - "all_gather": torchtitan's `--experimental.context_parallel_rotate_method` defaults to
      "allgather" (pytorch/torchtitan@9dec370 torchtitan/config_manager.py l. 365-377, set by
      `utils.create_context_parallel_ctx`), so `_AllGatherRotater` gathers every rank's K/V in one
      all-gather issued before step 0's kernel and waited for whole at step 1 (`next_buffer`); the
      backward gathers K/V the same way (`kv_rotater = _create_rotater(group, 2)`);
    - True: the model expands K/V to the query heads before the attention call (`repeat_kv`,
      torchtitan/models/llama/model.py l. 200-209 at that commit), so the ring moves a / tp heads;
    - 4: the dK/dV accumulators are fp32 (`convert_to_f32` default True: `accum_dtype`), passed to
      the next rank after every backward step by `_AllToAllRotater` (`permute_tensor`) and waited
      at the next step, the last one after the loop.
    Source: pytorch/pytorch torch/distributed/tensor/experimental/_attention.py @0123248a
    (`_ContextParallelOptions`, `_templated_ring_attention`, `_templated_ring_attention_backward`);
    the torch of the runs (1963fc8, 2024-12-23) not re-read line by line."""
    return "all_gather", True, 4


def grad_accumulation_bytes_per_param(precision: str, zero_stage: int, pp: int) -> float:
    """HBM bytes per parameter moved outside the GEMMs per micro-batch to accumulate gradients: not
    priced for torchtitan (FSDP2 reduce-scatters or accumulates in its own buffers; not verified
    here), 0."""
    return 0.0


def p2p_overlap(vpp: int) -> bool:
    """torchtitan's pipeline schedules (torch.distributed.pipelining) are costed with their sends on
    the critical path: whether they hide under the next stage's compute is not verified here."""
    return False


def overlap_defaults(zero_stage: int) -> dict[str, bool]:
    """torchtitan's overlaps when its keys are absent: DP reduce / gather on (FSDP2, DDP), AsyncTP
    off, no expert all-to-all overlap."""
    return {"tp_comm_overlap": DEFAULT["async_tp"], "overlap_grad_reduce": True,
            "overlap_param_gather": True, "ep_comm_overlap": False}


CATALOG = {("llama3", "8B"): "llama-3.1-8b", ("llama3", "70B"): "llama-3.1-70b",
           ("llama3", "405B"): "llama-3.1-405b", ("qwen3", "32B"): "qwen3-32b",
           ("qwen3", "30B-A3B"): "qwen3-30b-a3b", ("deepseek_v3", "671B"): "deepseek-v3"}
"""(model.name, model.flavor) -> catalog model. Source: torchtitan `models/llama3/__init__.py`
`llama3_args` (8B: dim 4096, 32 layers; 70B: 8192, 80; 405B: 16384, 126 -- Llama 3.1 shapes);
the flavors of b5bcd76's `models/qwen3/__init__.py` (32B, 30B-A3B) and
`models/deepseek_v3/__init__.py` (671B = DeepSeek-V3), which the TOML releases did not ship."""
OPTIMIZERS = {"adamw": "AdamW"}
"""Planner optimizer -> [optimizer] name. Source: `components/optimizer.py` (`build_optimizers`:
"Adam" and "AdamW" only); the planner's sgd / adam8bit have no torchtitan name."""

SCHEDULES = {"1f1b": 1, "interleaved1f1b": None}
"""Supported pipeline_parallel_schedule names (torch `get_schedule_class` matches them
case-insensitively) -> stages per rank (None = several). Source: torch
`distributed/pipelining/schedules.py` (Schedule1F1B is a PipelineScheduleSingle,
ScheduleInterleaved1F1B a PipelineScheduleMulti)."""
OTHER_SCHEDULES = ("GPipe", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV",
                   "PipelineScheduleSingle", "PipelineScheduleMulti")
"""Schedules torch knows that hold micro-batches otherwise (not modelled)."""
FP8_CONVERTER = "quantize.linear.float8"
"""The float8 linear converter's name since 8a2686c (`components/quantization/float8.py`
register_model_converter)."""
FP8_CONVERTERS = ("float8", FP8_CONVERTER)
"""Converters that swap nn.Linear for Float8Linear (`float8` before 8a2686c)."""
FP8_RECIPE_KEYS = tuple((*section.split("."), key) for section, key in KEYS["fp8_recipe"])
"""`KEYS["fp8_recipe"]` as paths into a parsed TOML document (the float8 recipe's table is nested,
so the reader looks it up apart from `READ`): the `[quantize.linear.float8]` table since 8a2686c,
`[float8]` before (from 57387af). Source:
pytorch/torchtitan 238fa99 `config/job_config.py` l. 731-739 (Float8Linear.recipe_name:
Literal["tensorwise", "rowwise", "rowwise_with_gw_hp"] | None = None)."""
TOML_FP8_RECIPE_DEFAULT = "tensorwise"
"""The recipe a TOML release runs with the float8 converter and no recipe_name: recipe_name None
builds `Float8LinearConfig(enable_fsdp_float8_all_gather=...)`, torchao's tensorwise dynamic
scaling ("Float8 tensorwise scaled training active"; `components/quantization/float8.py` at 238fa99
and up to 6348d93d1^). The validation rows of torchtitan's float8 runs (2024-12, 2025-06) ran it."""
FP8_RECIPE_DEFAULT = "rowwise"
"""The recipe of the current releases (`CLI_COMMIT`): since 6348d93d1 (2026-04-27, "quantize on
config instead of on model") `Float8LinearConverter.Config.recipe_name: Literal["rowwise",
"rowwise_with_gw_hp"] = "rowwise"` -- tensorwise is gone -- and the llama3_405b config function
keeps the default (`models/llama3/config_registry.py` l. 310-320 at `CLI_COMMIT`;
`components/quantization/float8.md`: "For parallelisms, for float8 with rowwise scaling, all
distributed communication is done in high precision")."""
FP8_RECIPES = {"toml": ("tensorwise", "rowwise", "rowwise_with_gw_hp"),
               "cli": ("rowwise", "rowwise_with_gw_hp")}
"""The float8 linear recipes each form runs: the TOML releases' recipe_name Literal (238fa99) and
the current converter's (`CLI_COMMIT`). mxfp8 is a separate converter (`UNMODELLED_CONVERTERS`;
`MXFP8LinearConverter` of the llama3_8b_mxfp8 config function at `CLI_COMMIT`, Blackwell only)."""
UNMODELLED_CONVERTERS = ("mx", "quantize.linear.mx", "quantize.grouped_mm.mx")
"""MX (mxfp8) converters: Blackwell block-scaled GEMMs, not modelled."""
AC_MODES = ("none", "selective", "full")
"""activation_checkpoint.mode values modelled (`memory_budget` is not)."""
OP_SAC = "op"
"""selective_ac_option value of the op-level policy (= the planner's `selective`)."""
RESHARD_NEVER = "never"
"""fsdp_reshard_after_forward value keeping parameters gathered from forward to backward (ZeRO-2,
`torchtitan/distributed/fsdp.py` `get_fsdp_reshard_after_forward_policy`)."""
OTHER_FIELDS = {
    "training": ("dataset", "dataset_path", "max_norm", "steps", "compile", "gc_freq", "gc_debug", "seed", "deterministic",
                 "debug_moe_force_load_balance"),
    "parallelism": ("enable_compiled_autograd", "disable_loss_parallel",
                    "context_parallel_rotate_method", "expert_parallel_comm_backend"),
    "model": ("name", "flavor", "tokenizer_path", "hf_assets_path", "print_after_conversion"),
    "activation_checkpoint": ("per_op_sac_force_recompute_mm_shapes_by_fqns", "memory_budget",
                              "visualize_memory_budget_pareto", "early_stop",
                              "preserve_rng_state", "determinism_check", "debug"),
}
"""Fields of those sections the planner does not cost (torchtitan 000204a and 238fa99
`config/job_config.py` Training, Parallelism, Model, ActivationCheckpoint; model.hf_assets_path from
the llama3 train_configs). Fields differ between versions, so the union with `KEYS` is not the
complete set torchtitan accepts."""
GRAD_REDUCE_DTYPES = ("fp32",)
"""Gradient-reduction dtypes torchtitan runs: `mixed_precision_reduce: Literal["float32"]`
(`torchtitan/config/configs.py` l. 102 @b5bcd76), the FSDP2 `MixedPrecisionPolicy.reduce_dtype`."""
REDUCE_DTYPES = {"float32": "fp32"}
"""mixed_precision_reduce value -> `Layout.grad_reduce_dtype`."""

MOE_DISPATCHERS: tuple[str, ...] = ()
"""`Layout.moe_dispatcher` values the planner sets for torchtitan: none. torchtitan (b5bcd76) does
have DeepEP and HybridEP backends, but they are chosen in the model's Python config
(`torchtitan/models/common/config_utils.py` comm_backend "standard" | "deepep" | "hybridep" |
"minimal_async_ep", l. 364-424) or an override module (`config/override.py` l. 72), not by a
job-config key the planner reads or writes; so a torchtitan layout keeps its default, "standard"
all-to-all, costed as alltoall."""
BATCH_HELD = "per_rank"
"""What a launch holds fixed when its degrees change (`placement.rules` fix hints): the per-rank batch
(`local_batch_size`); the global batch follows as local_batch_size x dp at global_batch_size -1, the default
(`torchtitan/train.py` l. 196-200 @238fa99: `if global_batch_size < 0: global_batch_size = local_batch_size *
batch_degree`)."""
ZERO_STAGES = (0, 2, 3)
"""ZeRO stages torchtitan implements: FSDP2 `fully_shard` = ZeRO-3, ZeRO-2 with
fsdp_reshard_after_forward "never" (the default under PP), and replication only
(data_parallel_replicate_degree, DDP) = ZeRO-0; nothing shards the optimizer alone, so no ZeRO-1."""

FIX_TERMS = {
    "recompute selective": f'{KEY["ac_mode"]} = "selective"',
    "recompute full": f'{KEY["ac_mode"]} = "full"',
    "micro_batch_size": f"{NAME['local_batch']} {{}} with {NAME['global_batch_size']} kept "
                        f"(gradient accumulation)",
    "micro_batch_size pipelined": f"{NAME['pp_microbatch_size']} {{}} (dividing {NAME['local_batch']})",
    "zero_stage 2": f"FSDP ({NAME['shard']} > 1) with {NAME['reshard']} = "
                    f'"{RESHARD_NEVER}"',
    "zero_stage 3": f"FSDP ({NAME['shard']} > 1)",
}
"""The gate's single-knob changes (`planner.check.gate._single_changes`) in torchtitan's keys;
`{}` takes the new value. Under PP the micro-batch is the pipeline micro-batch size, the local batch
over it the pipeline's micro-batches (`pipeline_parallel.py` `build_pipeline_schedule`), hence the
`"micro_batch_size pipelined"` entry the gate takes when pp > 1."""


# ---------------------------------------------------------------- current releases (2026)

CLI_COMMIT = "b5bcd76"
"""pytorch/torchtitan b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (2026-08-21): a run is a Python
config function chosen by `--module M --config C` (`config/manager.py` ConfigManager._load_config,
`config/README.md`), with `--section.field value` overrides parsed by tyro (precedence CLI > the
function's values); activation checkpointing is a tyro subcommand
`activation-checkpoint:{selective,full,memory-budget,none}` (`distributed/activation_checkpoint.py`
ActivationCheckpointingConfig)."""
CLI_FIELDS = {
    "training": ("num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
                 "max_context_length", "max_norm", "steps", "enable_cpu_offload",
                 "disable_cuda_graphs", "dtype", "mixed_precision_param", "mixed_precision_reduce",
                 "gc_freq", "gc_debug"),
    "parallelism": ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                    "fsdp_reshard_after_forward", "enable_fsdp_symm_mem", "tensor_parallel_degree",
                    "enable_sequence_parallel", "spmd_backend", "pipeline_parallel_degree",
                    "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
                    "pipeline_parallel_last_stage_less_layers",
                    "pipeline_parallel_layers_per_stage", "pipeline_parallel_schedule",
                    "pipeline_parallel_schedule_csv", "num_pp_microbatches",
                    "context_parallel_degree", "context_parallel_load_balancer",
                    "context_parallel_ptrr_mask_key", "expert_parallel_degree"),
}
"""Every field of `config/configs.py` TrainingConfig and ParallelismConfig at `CLI_COMMIT` (all on
the command line as `--training.F` / `--parallelism.F`; tyro exits on any other)."""
CLI_FIELDS["compile"] = ("enable", "enable_async_tensor_parallel", "components", "backend")
"""`config/configs.py` CompileConfig at `CLI_COMMIT` (l. 292-310: AsyncTP asserts compile.enable)."""
CLI_PARTS = KEY["pp_fqns"]
"""The module names per pipeline model part on the command line: tyro parses ParallelismConfig's
`list[list[str]] | None` field as one word per model part, each word the part's module names
joined by commas (torchtitan's own `list[str]` rule, `config/manager.py` `register_tyro_rules`
`list_str_rule`: comma-separated; tyro itself is unpinned in `pyproject.toml` at `CLI_COMMIT`,
checked with tyro 1.0.17: `--parallelism.module_fqns_per_model_part tok_embeddings,layers.0
layers.1,norm,lm_head` gives [['tok_embeddings', 'layers.0'], ['layers.1', 'norm', 'lm_head']])."""
CLI_OUTPUT_MODULES = ("norm", "lm_head")
"""The modules after the last decoder layer at `CLI_COMMIT` (`models/common/decoder.py`: the
output projection is `lm_head`; `pipeline_parallel.py` `_generate_llm_fqn_per_model_part` puts
["norm", "lm_head"] on the last part); the TOML releases named it `output`."""
CLI_COMPILE = "compile.enable"
"""torch.compile on (AsyncTP needs it)."""
CLI_ASYNC_TP = "compile.enable_async_tensor_parallel"
"""AsyncTP on the current command line (the TOML's `KEY["async_tp"]` moved under compile)."""
CLI_MOVED = {KEY["async_tp"]: CLI_ASYNC_TP}
"""Command-line field of the TOML releases -> the field it moved to (AsyncTP moved under compile in
9810191, `config/configs.py` l. 298 at `CLI_COMMIT`; `OVERLAP_KNOBS`): an unknown-field finding names
the new field, not the closest spelling (senior review 7 M4: it offered enable_sequence_parallel)."""
CLI_LOSS_CHUNKS = "loss.num_chunks"
"""The chunked loss's token chunks on the current command line (`Layout.loss_chunks`): every
preset of `PRESETS` trains with `ChunkedLossWrapper.Config`, whose `num_chunks` (default 8) tyro
exposes from the preset's instance (`torchtitan/components/loss.py`, models/*/config_registry.py at
`CLI_COMMIT`). The TOML releases had no chunked loss (1)."""
CLI_LOSS_CHUNKS_DEFAULT = 8
"""`ChunkedLossWrapper.Config.num_chunks`'s default at `CLI_COMMIT`."""
CLI_SETTINGS = ("replicate", "shard", "reshard", "tp", "pp", "cp", "ep", "pp_schedule",
                "pp_layers_per_stage", "pp_first_less", "pp_last_less", "param_dtype", "dtype",
                "offload")
"""Settings whose current CLI key is the `KEYS` spelling (`KEY[setting]`)."""
MICROBATCH_TOKENS = "training.num_tokens_per_microbatch_per_dp_rank"
"""Tokens one data-parallel rank runs per forward (a micro-batch of whole sequences x context)."""
STEP_TOKENS = "training.num_tokens_per_train_step"
"""Tokens per optimizer step over all ranks (-1: micro-batch tokens x pp micro-batches x dp)."""
CONTEXT = "training.max_context_length"
"""Tokens per sequence."""
PP_MICROBATCHES = "parallelism.num_pp_microbatches"
"""Pipeline micro-batches per step."""
SEQUENCE_PARALLEL = "parallelism.enable_sequence_parallel"
"""Sequence parallelism with TP (default true)."""
CLI_DEFAULT = {MICROBATCH_TOKENS: 16384, STEP_TOKENS: -1, CONTEXT: 2048, PP_MICROBATCHES: 1,
               SEQUENCE_PARALLEL: True}
"""Their values when neither the config function nor the command line sets them (`configs.py`)."""
BATCH_RENAME_COMMIT = "73aed7f"
"""pytorch/torchtitan 73aed7f6c09c04041dae2d2c185bb4c6384ebb3f (2026-08-20, "fold batch dim"):
the batch fields in sequences became token counts (`CLI_RENAMED`)."""
CLI_RENAMED = {
    KEY["local_batch"]: (MICROBATCH_TOKENS, "tokens"),
    KEY["global_batch_size"]: (STEP_TOKENS, "tokens"),
    KEY["seq_len"]: (CONTEXT, "same"),
    KEY["pp_microbatch_size"]: (MICROBATCH_TOKENS, "tokens"),
}
"""Command-line field before `BATCH_RENAME_COMMIT` -> (its replacement at `CLI_COMMIT`, how the
value converts): "tokens" = sequences x `CONTEXT` (local_batch_size: per data-parallel rank and
forward without pipeline parallelism; with it the pipeline micro-batch size is the forward's
sequences and `PP_MICROBATCHES` = local batch / that size), "same" = the value unchanged. Source:
`config/configs.py` diff of 73aed7f (TrainingConfig local_batch_size -> num_tokens_per_microbatch_
per_dp_rank, global_batch_size -> num_tokens_per_train_step, seq_len -> max_context_length;
ParallelismConfig pipeline_parallel_microbatch_size -> num_pp_microbatches, a count)."""
AC_SUBCOMMANDS = ("activation-checkpoint", "activation_checkpoint")
"""The tyro subcommand prefix of activation checkpointing (`activation-checkpoint:full`)."""
AC_CHOICES = {"selective": "selective", "full": "full", "none": "none"}
"""Subcommand -> the modelled mode (`memory-budget`, a compiler setting, is not modelled)."""
AC_MODE_COMMIT = "78fc8ae"
"""pytorch/torchtitan 78fc8ae32b14d1392bfcd18c66e4bf82bd8f53e5, the parent of c5d93d1 (2026-06-15,
"Refactor activation checkpointing into a policy class hierarchy"), the last commit whose command
line chooses activation checkpointing with the override `--activation_checkpoint.mode`
(`KEY["ac_mode"]`; from 9810191, 2026-02-23): `config/configs.py` ActivationCheckpointConfig.mode
is `Literal["selective", "full", "memory_budget", "none"]` (tyro exits on any other value);
`distributed/activation_checkpoint.py` recomputes the whole block for full and applies per-op
SAC for selective. Since c5d93d1 (so at `CLI_COMMIT`) the choice is the `AC_SUBCOMMANDS`
subcommand and tyro exits on the override."""
AC_MODE_VALUES = ("selective", "full", "memory_budget", "none")
"""The values `--activation_checkpoint.mode` takes at `AC_MODE_COMMIT` (all but memory_budget are
`AC_CHOICES`, modelled)."""

PRESETS = {
    ("llama3", "llama3_8b"): {"model": ("llama3", "8B"), MICROBATCH_TOKENS: 1 * 8192,
                              CONTEXT: 8192, "ac": "selective"},
    ("llama3", "llama3_70b"): {"model": ("llama3", "70B"), MICROBATCH_TOKENS: 8 * 8192,
                               CONTEXT: 8192, KEY["tp"]: 8, "ac": "full"},
    ("llama3", "llama3_405b"): {"model": ("llama3", "405B"), MICROBATCH_TOKENS: 2 * 8192,
                                CONTEXT: 8192, KEY["tp"]: 8, "ac": "full", "float8": FP8_RECIPE_DEFAULT},
    ("qwen3", "qwen3_32b"): {"model": ("qwen3", "32B"), MICROBATCH_TOKENS: 2 * 4096,
                             CONTEXT: 4096, "ac": "full"},
    ("qwen3", "qwen3_30b_a3b"): {"model": ("qwen3", "30B-A3B"), MICROBATCH_TOKENS: 2 * 4096,
                                 CONTEXT: 4096, "ac": "full"},
    ("deepseek_v3", "deepseek_v3_671b"): {"model": ("deepseek_v3", "671B"),
                                          MICROBATCH_TOKENS: 4 * 4096, CONTEXT: 4096,
                                          KEY["pp_schedule"]: "Interleaved1F1B", KEY["ep"]: 2,
                                          "ac": "selective"},
}
"""(--module, --config) -> what the config function sets that the planner costs (the rest are
`DEFAULT` / `CLI_DEFAULT`). Source: `torchtitan/models/{llama3,qwen3,deepseek_v3}/config_registry.py`
at `CLI_COMMIT` (llama3_8b, llama3_70b, llama3_405b -- Float8 linear converter --, qwen3_32b,
qwen3_30b_a3b, deepseek_v3_671b); "float8": the Float8LinearConverter's recipe (its default,
`FP8_RECIPE_DEFAULT`: llama3_405b sets no recipe_name)."""
LR_SCHEDULER = "lr_scheduler"
"""Trainer.Config's learning-rate schedule section on the command line (`--lr_scheduler.FIELD`;
`torchtitan/trainer.py` l. 100 at `CLI_COMMIT`)."""
LR_SCHEDULER_DEFAULT = {"warmup_steps": 200, "decay_ratio": None, "decay_type": "linear", "min_lr_factor": 0.0}
"""LRSchedulersContainer.Config's fields and defaults at `CLI_COMMIT`
(`torchtitan/components/optimizer/lr_scheduler.py` l. 51-82: decay_ratio None decays from the end of
the warm-up to the end of `--training.steps`; the floor is lr x min_lr_factor)."""
PRESET_LR = {
    ("llama3", "llama3_8b"): {"lr": "3e-4"},
    ("llama3", "llama3_70b"): {"lr": "1.5e-4"},
    ("llama3", "llama3_405b"): {"lr": "8e-5", "warmup_steps": 600},
    ("qwen3", "qwen3_32b"): {"lr": "8e-4", "warmup_steps": 600},
    ("qwen3", "qwen3_30b_a3b"): {"lr": "8e-4", "warmup_steps": 600},
    ("deepseek_v3", "deepseek_v3_671b"): {"lr": "2.2e-4", "warmup_steps": 2000, "decay_ratio": 0.8,
                                          "decay_type": "cosine", "min_lr_factor": 0.1},
}
"""(--module, --config) of `PRESETS` -> the AdamW learning rate its config function sets
(`default_adamw(lr=...)`, which puts it in `optimizer.param_groups[0].optimizer_kwargs`, a config-function
setting, no `--optimizer.lr` field: `components/optimizer/optimizer.py` l. 378-398) and the schedule
fields it sets over `LR_SCHEDULER_DEFAULT`. Source: `models/llama3/config_registry.py` l. 211, 284,
336-337, `models/qwen3/config_registry.py` l. 318-319, 353-354, `models/deepseek_v3/config_registry.py`
l. 225-231 at `CLI_COMMIT`."""
HF_BACKEND_MOE_REFUSAL = (
    "its Hugging Face backend (experiments/transformers_modeling_backend) cannot be pointed at it "
    "from the command line: the model config is off the command line (config/README.md: "
    "model_spec is tyro.conf.Suppress), the backend's MoE flavors fix Qwen3-30B-A3B's dimensions "
    "(__init__.py flavors 'full_moe') and its MoE path has no pipeline parallelism (README)")
"""Why a mixture-of-experts model without a torchtitan preset has no command line at `CLI_COMMIT`
(source: pytorch/torchtitan b5bcd76 `torchtitan/experiments/transformers_modeling_backend/
__init__.py` `flavors`, `config_registry.py`, `README.md` "Further work: Missing PP support for
MoE"; `torchtitan/config/README.md`)."""
HF_BACKEND_DENSE_NOTE = (
    "torchtitan's Hugging Face backend trains a dense model from the command line (--module "
    "transformers_modeling_backend --config transformers_modeling_backend_full --hf_model "
    "{hf_id}: the 'full' flavor takes the model from AutoConfig), which this planner neither "
    "emits nor costs (HF modeling, lower MFU than torchtitan's own: its README)")
"""What a dense model without a torchtitan preset can run at `CLI_COMMIT` (same sources:
`config_registry.py` transformers_modeling_backend_full, `configs.py` TransformersBackendConfig
`hf_model`)."""
CLI_FIX_TERMS = {
    "recompute selective": f"{AC_SUBCOMMANDS[0]}:selective",
    "recompute full": f"{AC_SUBCOMMANDS[0]}:full",
    "micro_batch_size": f"--{MICROBATCH_TOKENS} {{tokens}} (micro-batch {{}}) with --{STEP_TOKENS} kept "
                        f"(gradient accumulation)",
    "zero_stage 2": f"--{KEY['shard']} > 1 with --{KEY['reshard']} {RESHARD_NEVER}",
    "zero_stage 3": f"--{KEY['shard']} > 1",
}
"""`FIX_TERMS` for a command line of the current releases (`CLI_COMMIT`); `{tokens}` the new
micro-batch in tokens, the unit of the setting."""
CLI_INTEGERS = {KEY["replicate"]: 1, KEY["shard"]: -1, KEY["tp"]: 1, KEY["pp"]: 1, KEY["cp"]: 1, KEY["ep"]: 1,
                KEY["pp_first_less"]: 0, KEY["pp_last_less"]: 0, KEY["pp_layers_per_stage"]: 1,
                MICROBATCH_TOKENS: 1, STEP_TOKENS: -1, CONTEXT: 1, PP_MICROBATCHES: 1, CLI_LOSS_CHUNKS: 1,
                KEY["local_batch"]: 1, KEY["global_batch_size"]: -1, KEY["seq_len"]: 1,
                KEY["pp_microbatch_size"]: 1}
"""The integer overrides the planner costs -> the least value it reads (-1: >= 1, or -1 for "derived"; 0: >= 0).
Source: `config/configs.py` at `CLI_COMMIT` (`int` fields; TrainingConfig.__post_init__ raises on a token count
<= 0 other than num_tokens_per_train_step -1; data_parallel_shard_degree -1 = the GPUs left), `components/loss.py`
ChunkedLossWrapper.Config.num_chunks; the renamed fields of `CLI_RENAMED` as at `BATCH_RENAME_COMMIT`'s parent
(global_batch_size -1 = local batch x dp)."""
CLI_SWITCHES = (KEY["offload"], SEQUENCE_PARALLEL, CLI_COMPILE, CLI_ASYNC_TP, KEY["async_tp"])
"""The `bool` overrides the planner costs (`config/configs.py` at `CLI_COMMIT`; the last, moved, `CLI_MOVED`)."""
OLD_PP_MICROBATCH_SIZE = 1
"""`parallelism.pipeline_parallel_microbatch_size`'s default before `BATCH_RENAME_COMMIT` (73aed7f^
`config/configs.py` l. 223: "The size of each pipeline parallel microbatch (default 1). `training.local_batch_size`
must be evenly divisible by this value"); no config function of llama3, qwen3 or deepseek_v3 set it there
(`models/*/config_registry.py` at 73aed7f^): an old command line's local batch with pp > 1 was that many pipeline
micro-batches of one sequence."""

ENTRY_POINTS = ("torchtitan.train", "torchtitan/train.py")
"""How a command line runs torchtitan's trainer: `python -m torchtitan.train` / `torchrun ... -m torchtitan.train`
(run_train.sh at b5bcd76) or the script path. Source: pytorch/torchtitan run_train.sh."""
JOB_CONFIG_FILE = "--job.config_file"
"""The pre-2026 command line's TOML job config (run_train.sh `--job.config_file ${CONFIG_FILE}` until torchtitan
9810191, 2026-02-23, "Config System Refactor: TOML to Python Dataclass Registry", which replaced it with
`--module M --config C`)."""
