"""Megatron-LM's launch flags (and torchrun's): name, kind, default and the planner knob each sets.

Source: NVIDIA/Megatron-LM commit d98e8a6 (d98e8a64ddf34856e74b24714e3bedb2f5a39553, 2026-08-22):
`megatron/training/arguments.py` (argparse groups, `validate_args`) and the dataclasses its
`ArgumentGroupFactory` turns into `--field-name` flags (`megatron/training/argument_utils.py`
`_format_arg_name`): `megatron/core/model_parallel_config.py` (degrees, --sequence-parallel, --bf16,
--fp16), `megatron/core/transformer/transformer_config.py` (recompute, --fp8-format as field `fp8`,
--normalization), `megatron/training/config/training_config.py` (batch),
`megatron/training/config/common_config.py` (Megatron-FSDP, torch FSDP2), `_add_moe_args` (MoE);
Megatron-FSDP's sharding strategies: `docs/discussions/megatron-fsdp-user-guide`. torchrun's flags:
PyTorch `torch/distributed/run.py` (--nproc_per_node / --nproc-per-node, --nnodes, --node_rank,
--master_addr, --master_port).

`FLAGS` is the table; `FLAG[knob]` a flag's spelling, `DEFAULT[knob]` Megatron's default when the
flag is absent (None: unset or derived in `validate_args`, e.g. --expert-tensor-parallel-size = tp,
--global-batch-size = micro-batch x dp, --ffn-hidden-size = 4h or int(4h x 2/3 / 64) x 64 with
--swiglu, --kv-channels = hidden / heads).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from planner.frameworks.flag_files import Removed
from planner.placement.layout import (CROSS_ENTROPY_FUSIONS, FP8_RECIPES, OFFLOAD_MODULES, OPTIMIZER_DTYPES,
                                      RECOMPUTE_MODULES)

INT, CHOICE, SWITCH, TEXT, LIST = "int", "choice", "switch", "text", "list"
"""Flag kinds: a positive integer; one of `choices`; store_true (no value); a free value (written
only); one or more of `choices` (argparse `nargs="+"`, the words up to the next flag; without
`choices`, numbers such as --moe-aux-loss-coeff's)."""


@dataclass(frozen=True)
class Flag:
    """One Megatron-LM (or torchrun) flag."""

    knob: str
    """What it sets, in the planner's terms: a `Layout` / `ModelSpec` field or a named setting."""
    flag: str
    """Megatron's spelling."""
    kind: str
    """INT | CHOICE | SWITCH | TEXT."""
    default: int | str | bool | None = None
    """Megatron's value when the flag is absent (None: unset, or derived by `validate_args`)."""
    choices: tuple[str, ...] = ()
    """CHOICE flags: the values accepted (Megatron's argparse `choices`; --optimizer: the ones the
    planner costs of adam, sgd, muon, dist_muon, lion, soap, adaptive_muon)."""
    read: bool = True
    """Whether `planner check` reads it (False: written by `planner plan --emit` only)."""


FLAGS = (
    # degrees (model_parallel_config.py; arguments.py `_add_distributed_args`)
    Flag("tp", "--tensor-model-parallel-size", INT, 1),
    Flag("pp", "--pipeline-model-parallel-size", INT, 1),
    Flag("cp", "--context-parallel-size", INT, 1),
    Flag("ep", "--expert-model-parallel-size", INT, 1),
    Flag("etp", "--expert-tensor-parallel-size", INT),
    Flag("sequence_parallel", "--sequence-parallel", SWITCH, False),
    Flag("layers_per_virtual_stage", "--num-layers-per-virtual-pipeline-stage", INT),
    Flag("vpp", "--num-virtual-stages-per-pipeline-rank", INT),
    # interleaved schedule's micro-batch group (model_parallel_config.py l. 431-446, default pp)
    Flag("microbatch_group_size", "--microbatch-group-size-per-virtual-pipeline-stage", INT),
    Flag("first_stage_layers", "--decoder-first-pipeline-num-layers", INT),
    Flag("last_stage_layers", "--decoder-last-pipeline-num-layers", INT),
    # virtual-stage layouts of any layer count (`pipeline_parallel_layer_layout.py`,
    # `transformer_block.py` get_num_layers_to_build @d98e8a6; `placement/pipeline_layout.py`)
    Flag("pipeline_layout", "--pipeline-model-parallel-layout", TEXT),
    Flag("account_for_embedding", "--account-for-embedding-in-pipeline-split", SWITCH, False),
    Flag("account_for_loss", "--account-for-loss-in-pipeline-split", SWITCH, False),
    Flag("no_p2p_overlap", "--no-overlap-p2p-communication", SWITCH, False),
    # batch (training_config.py TrainingConfig)
    Flag("micro_batch_size", "--micro-batch-size", INT),
    Flag("global_batch_size", "--global-batch-size", INT),
    Flag("seq_len", "--seq-length", INT),
    # state sharding (common_config.py; megatron-fsdp-user-guide)
    Flag("distributed_optimizer", "--use-distributed-optimizer", SWITCH, False),
    # communication overlaps (`placement/overlap.py`), all off by default: the DP ones in
    # `distributed_data_parallel_config.py` (gradient buckets reduced during the last micro-batch's
    # backward, per model chunk with interleaving: `schedules.py` l. 1419-1426; updated parameters
    # gathered bucket by bucket in the next forward's pre-hooks: `distributed_data_parallel.py`
    # l. 517-545); --overlap-param-gather asserts --overlap-grad-reduce and a distributed optimizer
    # or Megatron-FSDP (`arguments.py`); TP/SP comm-GEMM overlap through Transformer Engine
    # userbuffers (`model_parallel_config.py` l. 265-269, needs --sequence-parallel); EP
    # all-to-all overlap with another micro-batch's compute in 1F1B (l. 343-346; asserts no full
    # recompute and the alltoall or flex dispatcher: `transformer_config.py` l. 3002-3032)
    Flag("overlap_grad_reduce", "--overlap-grad-reduce", SWITCH, False),
    Flag("overlap_param_gather", "--overlap-param-gather", SWITCH, False),
    Flag("tp_comm_overlap", "--tp-comm-overlap", SWITCH, False),
    Flag("ep_comm_overlap", "--overlap-moe-expert-parallel-comm", SWITCH, False),
    Flag("megatron_fsdp", "--use-megatron-fsdp", SWITCH, False),
    Flag("sharding_strategy", "--data-parallel-sharding-strategy", CHOICE, "optim_grads_params",
         ("no_shard", "optim", "optim_grads", "optim_grads_params")),
    Flag("torch_fsdp2", "--use-torch-fsdp2", SWITCH, False),
    Flag("ckpt_format", "--ckpt-format", CHOICE, "torch_dist",
         ("torch", "torch_dist", "torch_dcp", "fsdp_dtensor")),
    # context parallelism's communication (`_add_distributed_args`; nargs +: one type, or per layer)
    Flag("cp_comm_type", "--cp-comm-type", TEXT, "p2p"),
    # recompute (transformer_config.py; --recompute-activations = selective, validate_args)
    Flag("recompute_granularity", "--recompute-granularity", CHOICE, None, ("full", "selective")),
    Flag("recompute_method", "--recompute-method", CHOICE, None, ("uniform", "block")),
    Flag("recompute_num_layers", "--recompute-num-layers", INT),
    Flag("recompute_activations", "--recompute-activations", SWITCH, False),
    # List[str] field -> nargs "+" (argument_utils.py l. 143-146); default ["core_attn"]
    Flag("recompute_modules", "--recompute-modules", LIST, None, RECOMPUTE_MODULES),
    # fine-grained activation offloading (transformer_config.py l. 1323-1341; default off, [])
    Flag("fine_grained_activation_offloading", "--fine-grained-activation-offloading", SWITCH, False),
    Flag("offload_modules", "--offload-modules", LIST, None, OFFLOAD_MODULES),
    # precision and optimizer
    Flag("bf16", "--bf16", SWITCH, False),
    Flag("fp16", "--fp16", SWITCH, False),
    Flag("fp8_format", "--fp8-format", CHOICE, None, ("e4m3", "hybrid")),
    Flag("fp8_recipe", "--fp8-recipe", CHOICE, "delayed", FP8_RECIPES),
    # fp8 parameters: TE linear weights kept and all-gathered in fp8 (`_add_mixed_precision_args`
    # l. 2016; distributed_data_parallel_config.py l. 78-80; `Layout.fp8_param_gather`)
    Flag("fp8_param_gather", "--fp8-param-gather", SWITCH, False),
    # gradient reduction dtype (`_add_mixed_precision_args`, `validate_args` l. 1204-1216)
    Flag("grad_reduce_in_bf16", "--grad-reduce-in-bf16", SWITCH, False),
    Flag("grads_in_fp32", "--accumulate-allreduce-grads-in-fp32", SWITCH, False),
    # precision-aware optimizer (`_add_training_args` l. 3666-3684; `Layout.precision_aware_optimizer`
    # and the dtype knobs of `layout.OPTIMIZER_DTYPES`, each flag its knob's name)
    Flag("precision_aware_optimizer", "--use-precision-aware-optimizer", SWITCH, False),
    *(Flag(name, "--" + name.replace("_", "-"), CHOICE, "fp32", allowed)
      for name, allowed in OPTIMIZER_DTYPES.items()),
    Flag("optimizer", "--optimizer", CHOICE, "adam", ("adam", "sgd")),
    # the loss (model_parallel_config.py l. 320-328; `Layout.cross_entropy_fusion`)
    Flag("cross_entropy_loss_fusion", "--cross-entropy-loss-fusion", SWITCH, False),
    Flag("cross_entropy_fusion_impl", "--cross-entropy-fusion-impl", CHOICE, "native", CROSS_ENTROPY_FUSIONS),
    # architecture (ModelSpec fields; TokenizerConfig for --vocab-size)
    Flag("num_hidden_layers", "--num-layers", INT),
    Flag("hidden_size", "--hidden-size", INT),
    Flag("intermediate_size", "--ffn-hidden-size", INT),
    Flag("num_attention_heads", "--num-attention-heads", INT),
    Flag("group_query_attention", "--group-query-attention", SWITCH, False),
    Flag("num_key_value_heads", "--num-query-groups", INT, 1),
    Flag("head_dim", "--kv-channels", INT),
    Flag("max_position_embeddings", "--max-position-embeddings", INT),
    Flag("swiglu", "--swiglu", SWITCH, False),
    Flag("normalization", "--normalization", CHOICE, "LayerNorm", ("LayerNorm", "RMSNorm")),
    Flag("position_embedding_type", "--position-embedding-type", CHOICE, "learned_absolute",
         ("learned_absolute", "rope", "yarn", "mrope", "relative", "none")),
    Flag("untie_embeddings", "--untie-embeddings-and-output-weights", SWITCH, False),
    Flag("disable_bias_linear", "--disable-bias-linear", SWITCH, False),
    Flag("vocab_size", "--vocab-size", INT),
    Flag("vocab_divisible_by", "--make-vocab-size-divisible-by", INT, 128),
    Flag("num_experts", "--num-experts", INT),
    Flag("rope_theta", "--rotary-base", INT, 10000),
    Flag("add_qkv_bias", "--add-qkv-bias", SWITCH, False),
    Flag("qk_norm", "--qk-layernorm", SWITCH, False),
    Flag("use_rope_scaling", "--use-rope-scaling", SWITCH, False, read=False),
    Flag("rope_scaling_factor", "--rope-scaling-factor", TEXT, 8.0, read=False),
    Flag("hidden_dropout", "--hidden-dropout", TEXT, 0.1, read=False),
    Flag("attention_dropout", "--attention-dropout", TEXT, 0.1, read=False),
    # sliding-window attention (`_add_network_size_args` l. 2384-2393: a "left,right" window; a layer pattern, an
    # integer N (every N-th layer full) or a 0/1 list expression, 1 = window; transformer/utils.py
    # is_layer_window_attention, layer numbers from 1)
    Flag("window_size", "--window-size", TEXT, read=False),
    Flag("window_attn_skip_freq", "--window-attn-skip-freq", TEXT, read=False),
    # multi-latent attention (`_add_mla_args`; transformer_config.py MLATransformerConfig)
    Flag("multi_latent_attention", "--multi-latent-attention", SWITCH, False),
    Flag("q_lora_rank", "--q-lora-rank", INT),
    Flag("kv_lora_rank", "--kv-lora-rank", INT, 32),
    Flag("qk_nope_head_dim", "--qk-head-dim", INT, 128),
    Flag("qk_rope_head_dim", "--qk-pos-emb-head-dim", INT, 64),
    Flag("v_head_dim", "--v-head-dim", INT, 128),
    Flag("rotary_scaling_factor", "--rotary-scaling-factor", TEXT, 1.0, read=False),
    Flag("mscale", "--mscale", TEXT, 1.0, read=False),
    Flag("mscale_all_dim", "--mscale-all-dim", TEXT, 0.0, read=False),
    Flag("yarn_beta_fast", "--yarn-beta-fast", TEXT, read=False),
    Flag("yarn_beta_slow", "--yarn-beta-slow", TEXT, read=False),
    Flag("yarn_original_positions", "--yarn-original-max-position-embeddings", INT, read=False),
    # MoE (`_add_moe_args`; transformer_config.py: dispatcher allgather, grouped GEMM off by default)
    # token dispatcher (transformer_config.py l. 891-903: type allgather by default, flex backend
    # deepep by default; --moe-enable-deepep the deprecated spelling of flex + deepep, l. 1743-1752)
    Flag("moe_token_dispatcher", "--moe-token-dispatcher-type", CHOICE, "allgather",
         ("allgather", "alltoall", "flex")),
    Flag("moe_flex_backend", "--moe-flex-dispatcher-backend", CHOICE, "deepep",
         ("deepep", "hybridep", "ncclep")),
    Flag("moe_enable_deepep", "--moe-enable-deepep", SWITCH, False),
    Flag("moe_grouped_gemm", "--moe-grouped-gemm", SWITCH, False),
    Flag("moe_shared_expert_overlap", "--moe-shared-expert-overlap", SWITCH, False),
    Flag("num_experts_per_tok", "--moe-router-topk", INT, 2),
    Flag("moe_intermediate_size", "--moe-ffn-hidden-size", INT),
    Flag("shared_expert_intermediate_size", "--moe-shared-expert-intermediate-size", INT),
    Flag("moe_layers", "--moe-layer-freq", TEXT, 1),
    # the router (transformer_config.py l. 743-830; moe_utils.py `topk_routing_with_score_function`,
    # `group_limited_topk`): softmax after top-k, no groups, no scaling, no expert bias by default
    Flag("moe_router_score_function", "--moe-router-score-function", CHOICE, "softmax",
         ("softmax", "sigmoid", "sqrtsoftplus"), read=False),
    Flag("moe_router_pre_softmax", "--moe-router-pre-softmax", SWITCH, False, read=False),
    Flag("moe_router_enable_expert_bias", "--moe-router-enable-expert-bias", SWITCH, False),
    Flag("moe_router_topk_scaling_factor", "--moe-router-topk-scaling-factor", TEXT, read=False),
    Flag("moe_router_num_groups", "--moe-router-num-groups", INT),
    Flag("moe_router_group_topk", "--moe-router-group-topk", INT),
    Flag("moe_router_dtype", "--moe-router-dtype", CHOICE, None, ("fp32", "fp64"), read=False),
    # load balancing (arguments.py `_add_moe_args` l. 3532-3537: nargs "+", one coefficient per type;
    # transformer_config.py l. 1828-1834 asserts the two lists of equal length)
    Flag("moe_router_load_balancing_type", "--moe-router-load-balancing-type", LIST, "aux_loss",
         ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "quantile_balancing", "none")),
    Flag("moe_aux_loss_coeff", "--moe-aux-loss-coeff", LIST, 0.0),
    Flag("moe_router_bias_update_rate", "--moe-router-bias-update-rate", TEXT, 1e-3, read=False),
    # multi-token prediction (transformer_config.py l. 68-75: none by default, loss weight 0.1)
    Flag("mtp_num_layers", "--mtp-num-layers", INT),
    Flag("mtp_loss_scaling_factor", "--mtp-loss-scaling-factor", TEXT, 0.1, read=False),
    # optimizer and initialisation hyper-parameters (`_add_regularization_args` l. 2611-2625;
    # transformer_config.py l. 400 init_method_std; training_config.py l. 169, 190)
    Flag("weight_decay", "--weight-decay", TEXT, 0.01, read=False),
    Flag("adam_beta1", "--adam-beta1", TEXT, 0.9, read=False),
    Flag("adam_beta2", "--adam-beta2", TEXT, 0.999, read=False),
    Flag("adam_eps", "--adam-eps", TEXT, 1e-08, read=False),
    Flag("clip_grad", "--clip-grad", TEXT, 1.0, read=False),
    Flag("init_method_std", "--init-method-std", TEXT, 0.02, read=False),
    Flag("lr_warmup_iters", "--lr-warmup-iters", TEXT, 0),
    Flag("lr_decay_style", "--lr-decay-style", CHOICE, "linear",
         ("constant", "linear", "cosine", "inverse-square-root", "WSD"), read=False),
    # what a plan does not know (data, tokenizer, checkpoints, schedule)
    Flag("tokenizer_type", "--tokenizer-type", TEXT, read=False),
    Flag("tokenizer_model", "--tokenizer-model", TEXT, read=False),
    Flag("data_path", "--data-path", TEXT, read=False),
    Flag("save", "--save", TEXT, read=False),
    Flag("load", "--load", TEXT, read=False),
    Flag("pretrained_checkpoint", "--pretrained-checkpoint", TEXT, read=False),
    Flag("use_checkpoint_args", "--use-checkpoint-args", SWITCH, False),
    Flag("vocab_file", "--vocab-file", TEXT, read=False),
    Flag("train_iters", "--train-iters", TEXT),
    Flag("lr_decay_iters", "--lr-decay-iters", TEXT),
    Flag("lr_warmup_fraction", "--lr-warmup-fraction", TEXT),
    Flag("lr", "--lr", TEXT, read=False),
    Flag("min_lr", "--min-lr", TEXT, 0.0, read=False),  # arguments.py l. 2991 (`_add_learning_rate_args`)
    # torchrun (torch/distributed/run.py): world size = nproc_per_node x nnodes
    Flag("nproc_per_node", "--nproc_per_node", INT),
    Flag("nproc_per_node_dashed", "--nproc-per-node", INT),
    Flag("nnodes", "--nnodes", INT, 1),
    Flag("node_rank", "--node_rank", TEXT, read=False),
    Flag("master_addr", "--master_addr", TEXT, read=False),
    Flag("master_port", "--master_port", TEXT, read=False),
)
"""Every Megatron-LM / torchrun flag the planner reads or writes (module docstring for sources)."""

TORCHRUN_FLAGS = frozenset((
    "--nnodes", "--nproc-per-node", "--nproc_per_node", "--rdzv-backend", "--rdzv_backend",
    "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--rdzv-conf", "--rdzv_conf",
    "--standalone", "--max-restarts", "--max_restarts", "--monitor-interval", "--monitor_interval",
    "--start-method", "--start_method", "--role", "--module", "--no-python", "--no_python",
    "--run-path", "--run_path", "--log-dir", "--log_dir", "--redirects", "--tee",
    "--local-ranks-filter", "--local_ranks_filter", "--node-rank", "--node_rank", "--master-addr",
    "--master_addr", "--master-port", "--master_port", "--local-addr", "--local_addr",
    "--logs-specs", "--logs_specs", "--numa-binding", "--numa_binding", "--event-log-handler",
    "--event_log_handler", "--signals-to-handle", "--signals_to_handle", "--use-env", "--use_env",
    "--local-rank", "--local_rank"))
"""torchrun's own long flags: every `add_argument` of `get_args_parser` in PyTorch
`torch/distributed/run.py` at pytorch/pytorch 010929fd3f401c3868310396e6a91ed95aa0305b (dashed and
underscored spellings; its short -m, -r, -t are not long flags), plus --use-env / --local-rank of
the older `torch.distributed.launch`."""

SRUN = "srun"
SRUN_NODES = ("--nodes", "-N")
SRUN_TASKS_PER_NODE = ("--ntasks-per-node",)
SRUN_TASKS = ("--ntasks", "-n")
SBATCH = "#SBATCH"
"""Slurm's launcher of a Megatron-LM job (`srun [OPTIONS] python pretrain_gpt.py ...`, NVIDIA's cluster launch with
pyxis' --container-image): one rank per task, tasks = --ntasks, else --nodes x --ntasks-per-node (one task per
node when neither is given); a batch script's `#SBATCH` lines give srun's defaults. Source: Slurm srun(1)
(-N/--nodes, -n/--ntasks, --ntasks-per-node; 'the default is one task per node') and sbatch(1) ('#SBATCH'
directives; srun inside the allocation inherits them as SLURM_NNODES / SLURM_NTASKS_PER_NODE)."""

RECORDED_FLAGS_FILE = Path(__file__).with_name("megatron_flags.txt")
"""Every flag Megatron-LM's parser defines at d98e8a6 (`megatron/training/arguments.py`
`add_megatron_arguments`, the `ArgumentGroupFactory` dataclass flags, modelopt's extra
arguments), recorded by `tools/record_megatron_flags.py`."""


def recorded_flags() -> frozenset[str]:
    """The flags of `RECORDED_FLAGS_FILE` (Megatron-LM's argparse exits on any other:
    `parse_args`, allow_abbrev=False, so no prefix of a flag is accepted either)."""
    text = RECORDED_FLAGS_FILE.read_text()
    return frozenset(line for line in text.splitlines() if line.startswith("--"))


ABBREVIATIONS = {
    "--tp": "tp", "--pp": "pp", "--cp": "cp", "--ep": "ep", "--etp": "etp", "--vpp": "vpp",
    "--dp": "dp", "--sp": "sequence_parallel", "--mbs": "micro_batch_size",
    "--gbs": "global_batch_size", "--seq-len": "seq_len", "--recompute": "recompute_granularity",
}
"""Short names of planner knobs that are no Megatron-LM flag (`planner explain`'s --tp, --pp, --cp,
--ep, --etp, --vpp, --seq-len, --recompute; the field's dp, sp, mbs, gbs) -> the knob, whose flag
`FLAG[knob]` the unknown-flag error suggests (dp has none: Megatron-LM derives it as world size /
(tp x pp x cp), `validate_args`)."""

DEVICE_MAX_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
"""The environment variable Megatron-LM's start-up checks read (`validate_args`: must not be 1 with
Megatron-FSDP or torch FSDP2; must be 1 with tp or cp > 1 before Blackwell otherwise)."""

CPU_OFFLOAD_V1 = "NVTE_CPU_OFFLOAD_V1"
"""The environment variable Megatron-LM asserts is "1" with fine-grained activation offloading
under Transformer Engine >= 2.10.0 ("to avoid offloading weights"; `validate_args`,
megatron/training/arguments.py l. 1935-1940 @d98e8a6)."""

BY_KNOB = {f.knob: f for f in FLAGS}
FLAG = {f.knob: f.flag for f in FLAGS}
"""knob -> Megatron's flag name."""
DEFAULT = {f.knob: f.default for f in FLAGS}
"""knob -> Megatron's value when the flag is absent."""

RENAMED = {
    "--fp8-hybrid": Removed(f"{FLAG['fp8_format']} hybrid", "Megatron-LM 1b7a383, 2023-08-24, 'consolidate fp8 args': "
                            "the fp8 switches became the one format flag"),
    "--fp8-e4m3": Removed(f"{FLAG['fp8_format']} e4m3", "Megatron-LM 1b7a383, 2023-08-24, 'consolidate fp8 args'"),
    "--distribute-checkpointed-activations": Removed(
        "--distribute-saved-activations", "Megatron-LM bbab79f and d19e8ad, 2022-05-16"),
    "--DDP-impl": Removed(None, "Megatron-LM 3fb3e95, 2023-08-31, 'Deprecate torchDDP and get rid of "
                                "args.DDP_impl': Megatron's own DDP is the only one"),
    "--no-async-tensor-model-parallel-allreduce": Removed(
        None, "Megatron-LM 639c08a, 2026-01-29; its help said 'DEPRECATED. This flag is ignored.'"),
}
"""Flags Megatron-LM removed -> what replaces them (`Removed`), each read in the commit that removed it
(NVIDIA/Megatron-LM history, `megatron/arguments.py` then `megatron/training/arguments.py`). The
unknown-flag check (`planner.check.megatron`) gives this replacement before any closest-name guess:
the closest name of a removed flag is often an unrelated feature (--fp8-hybrid is nearest to
--fp8-recipe; fresh-user review 10 finding 11)."""

READ = {f.flag: f for f in FLAGS if f.read}
SCHEDULE_FLAGS = ("--train-iters", "--lr-decay-iters", "--lr-warmup-iters", "--lr-warmup-fraction")
"""The schedule's lengths, read only for its start-up assertion (`planner.check.megatron._schedule`): a value
from a variable the file does not set (a job's environment) is left unread, not an error."""
"""flag name -> Flag, for the flags `planner check` reads."""
NPROC_PER_NODE = (FLAG["nproc_per_node"], FLAG["nproc_per_node_dashed"])
"""torchrun's two spellings of the GPUs per node (the last one given wins)."""

ZERO_BY_STRATEGY = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
"""Megatron-FSDP --data-parallel-sharding-strategy -> ZeRO stage (optimizer; + gradients;
+ parameters). Source: Megatron-LM docs/discussions/megatron-fsdp-user-guide."""
FSDP_CKPT_FORMAT = "fsdp_dtensor"
"""The checkpoint format Megatron-FSDP asserts (`validate_args`: "Megatron-FSDP requires the
`fsdp_dtensor` checkpointing format"; and that format only with Megatron-FSDP)."""
ZERO_FLAGS = {0: (), 1: (FLAG["distributed_optimizer"],),
              **{stage: (FLAG["megatron_fsdp"], f"{FLAG['sharding_strategy']} {strategy}",
                         f"{FLAG['ckpt_format']} {FSDP_CKPT_FORMAT}")
                 for strategy, stage in ZERO_BY_STRATEGY.items() if stage >= 2}}
"""ZeRO stage -> the flags that give it: ZeRO-1 the distributed optimizer, ZeRO-2 / 3 Megatron-FSDP
with the strategy of `ZERO_BY_STRATEGY` (written even where it is the default) and the checkpoint
format it asserts."""
GRAD_REDUCE_DTYPES = {"bf16": ("fp32", "bf16"), "fp8": ("fp32", "bf16"), "fp16": ("fp16", "fp32")}
"""Compute precision -> the gradient-reduction dtypes Megatron-LM can run: fp32 (the default for
bf16, forced by `validate_args`; `--accumulate-allreduce-grads-in-fp32` for fp16) or the parameter
dtype (`--grad-reduce-in-bf16` under --bf16; the default for --fp16): the gradient buffer is
`torch.float if grad_reduce_in_fp32 else param.dtype` (param_and_grad_buffer.py l. 924)."""

BATCH_HELD = "global"
"""What a launch holds fixed when its degrees change (`placement.rules` fix hints): the global batch
(--global-batch-size, whose micro-batches per step are global / (micro-batch x dp): dp must divide it;
`megatron/core/num_microbatches_calculator.py`)."""
ZERO_STAGES = (0, 1, 2, 3)
"""ZeRO stages Megatron-LM implements (`ZERO_FLAGS`). Megatron-FSDP with pp > 1: `arguments.py`
rejects pipeline parallelism only for --use-torch-fsdp2 and for Megatron-FSDP version 2
(`mcore_fsdp_adapter.py` `_validate_config`), not for the default version 1; no functional test
runs it with pp > 1, so it stays allowed (unconfirmed)."""

OPTIMIZERS = {"adamw": "adam", "sgd": "sgd"}
"""Planner optimizer -> --optimizer (Megatron's adam decouples weight decay: AdamW)."""
SEARCHED_OFFLOAD = (frozenset(),)
"""`Layout.offload` sets `planner plan` tries under Megatron-LM: none. No flag of `FLAGS` states
a `Layout.offload` target (the writer refuses one, `emit.megatron`); Megatron's activation
offloading is its module lists (`Layout.offload_modules`, searched as `search.module_sets` pairs)."""
PRECISION_FLAGS = {"bf16": (FLAG["bf16"],), "fp16": (FLAG["fp16"],),
                   "fp8": (FLAG["bf16"], f"{FLAG['fp8_format']} hybrid")}
"""Plan precision -> flags (fp8: bf16 master compute with Transformer Engine's hybrid E4M3 forward /
E5M2 backward format, `transformer_config.py` field `fp8`). Without any of them Megatron trains in
fp32."""


def padded_vocab_size(vocab_size: int, divisible_by: int, tp: int) -> int:
    """The embedding rows Megatron-LM builds: the tokenizer's vocabulary rounded up to a multiple
    of --make-vocab-size-divisible-by x tp.

    Source: Megatron-LM d98e8a6 `megatron/core/tokenizers/utils/build_tokenizer.py`
    `vocab_size_with_padding` (`multiple = make_vocab_size_divisible_by * tensor_model_parallel_size`;
    `ceil(vocab / multiple) * multiple`), called unless the checkpoint's args set it
    (`_set_padded_vocab_size`; `megatron/training/checkpointing.py` `load_args_from_checkpoint`
    `_set_arg('padded_vocab_size')` under --use-checkpoint-args)."""
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple


OVERLAP_SWITCHES = ("tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather",
                    "ep_comm_overlap")
"""The overlap knobs (`Layout` fields) Megatron-LM switches with a flag of the same knob (`FLAG`)."""


def overlap_switches(zero_stage: int) -> tuple[str, ...]:
    """The overlap knobs a Megatron-LM launch can switch: all, but the parameter-gather overlap
    only with a distributed optimizer or Megatron-FSDP (ZeRO >= 1; `arguments.py` asserts it)."""
    return _SWITCHES_WITH_GATHER if zero_stage >= 1 else _SWITCHES_WITHOUT_GATHER


_SWITCHES_WITH_GATHER = OVERLAP_SWITCHES
_SWITCHES_WITHOUT_GATHER = tuple(k for k in OVERLAP_SWITCHES if k != "overlap_param_gather")
"""`overlap_switches` of ZeRO >= 1 and of ZeRO-0 (a search asks once per candidate)."""


def fused_elementwise(torch_compile: bool | None) -> bool:
    """Megatron-LM fuses the elementwise kernels of its layers by default, torch.compile or not:
    SwiGLU with its bias, bias-dropout-add and RoPE (`--no-bias-swiglu-fusion`,
    `--no-bias-dropout-fusion`, `--no-rope-fusion` switch them off:
    NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py l. 2895-2902), RMSNorm in Transformer
    Engine's fused kernel."""
    return True


def attention_kernel() -> str:
    """Megatron-LM's attention core (`--transformer-impl transformer_engine`, the default):
    Transformer Engine's DotProductAttention, which prefers cuDNN FusedAttention over
    FlashAttention on Hopper and newer (NVIDIA/TransformerEngine@d0067d0 transformer_engine/
    pytorch/attention/dot_product_attention/utils.py l. 1647-1653): `compute.attention_efficiency`
    "fused"."""
    return "fused"


def cp_ring_bytes(cp: int) -> tuple[float, float, float, float]:
    """HBM bytes that ring context parallelism (`--cp-comm-type p2p`, the default: Transformer
    Engine `AttnFuncWithCPAndKVP2P`) moves outside the attention kernels of one layer, per element:
    (forward, per output element; forward, per K/V element; backward, per dQ element; backward,
    per dK/dV element), bf16 attention (fp8 attention, off by default, accumulates in fp32):

    - forward: step 0's partial output is scaled into the running output (read 2 + write 2: 4,
      `flash_attn_fwd_out_correction_init`), each later step's is corrected and added in one fused
      kernel (read the step's output 2, read and write the running output 2 + 2: 6,
      `flash_attn_fwd_out_correction`; the log-sum-exp corrections are per row, not counted);
      K and V are concatenated once into the first send buffer (read 2 + write 2: 4);
    - backward: K/V copied into the first send buffer (4), step 0's dQ and dK/dV copied into the
      accumulators (4 each), each later step's added in place (`dq.add_(dq_)`, `dk.add_(dk_)`,
      `dv.add_(dv_)`: read 2 + 2, write 2: 6 each).
    So (4 + 6 (cp - 1), 4, 4 + 6 (cp - 1), 8 + 6 (cp - 1)); K/V are sent from the buffers they
    arrive in (no copy per step). Source: NVIDIA/TransformerEngine@d0067d0 transformer_engine/
    pytorch/attention/dot_product_attention/context_parallel.py l. 139-166 (corrections), 1709
    (`torch.cat` of K and V), 1980-2030 (output correction loop), 2420-2430 (backward buffers),
    2651-2790 (dQ / dK / dV accumulation)."""
    if cp <= 1:
        return 0.0, 0.0, 0.0, 0.0
    later = 6.0 * (cp - 1)
    return 4.0 + later, 4.0, 4.0 + later, 8.0 + later


def cp_ring_exchange() -> tuple[str, bool, int]:
    """How ring context parallelism (`--cp-comm-type p2p`, Transformer Engine
    `AttnFuncWithCPAndKVP2P`) moves K/V and dK/dV, as `frameworks.torchtitan.cp_ring_exchange`:
    ("p2p": each step's K/V sent to the next rank while the step computes, waited before the next
    step's kernel; False: the K/V heads of the GQA groups (Transformer Engine's attention takes
    num_gqa_groups), not the query heads; 2: dK/dV priced at 2 bytes per element, as before (the
    backward's dkv buffer dtype not re-read). Source: NVIDIA/TransformerEngine@d0067d0
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py l. 1698-1715
    (`req.wait()` then the next send)."""
    return "p2p", False, 2


def grad_accumulation_bytes_per_param(precision: str, zero_stage: int, pp: int) -> float:
    """HBM bytes per parameter moved outside the GEMMs per micro-batch to accumulate gradients: none
    priced -- Megatron-LM adds each weight gradient into the fp32 main_grad inside the weight-gradient
    GEMM (gradient_accumulation_fusion, on by default: NVIDIA/Megatron-LM@d98e8a6
    megatron/core/tensor_parallel/layers.py), whose bytes the GEMM efficiency carries."""
    return 0.0


def p2p_overlap(vpp: int) -> bool:
    """Whether Megatron-LM's pipeline schedule overlaps its point-to-point sends with the compute of
    the next model chunk by default: yes for the interleaved schedule (vpp > 1), no for 1F1B.
    `--no-overlap-p2p-communication` is a store_false flag (overlap_p2p_comm defaults to True;
    NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py l. 3118-3120), forced off without a
    virtual pipeline (l. 1010-1012), and batch_p2p_comm (the batched exchange followed by a
    device-wide synchronize) is its negation (megatron/training/argument_utils.py l. 307); the
    interleaved schedule then posts each chunk's receive before the previous chunk's compute and
    waits on it after (megatron/core/pipeline_parallel/schedules.py l. 1697-1713). Megatron-Bridge
    sets the same for the recipes measured here (NVIDIA-NeMo/Megatron-Bridge@067f987
    src/megatron/bridge/training/comm_overlap.py l. 454-460: vp_size > 1 -> overlap_p2p_comm True,
    batch_p2p_comm False)."""
    return vpp > 1


def overlap_defaults(zero_stage: int) -> dict[str, bool]:
    """Megatron-LM's value of each overlap knob when its flag is absent: all off (`DEFAULT`)."""
    return {knob: bool(DEFAULT[knob]) for knob in OVERLAP_SWITCHES}


MOE_DISPATCHERS = ("alltoall", "flex")
"""`Layout.moe_dispatcher` values Megatron-LM can be set to (--moe-token-dispatcher-type)."""
def flex_backend(gpus_per_node: int, scaleup_domain_gpus: int) -> str:
    """The flex dispatcher's backend for a cluster: HybridEP where the NVLink domain spans nodes
    (multi-node NVLink, GB200 NVL72), the only backend Megatron-LM says supports that case; DeepEP
    otherwise (one NVLink domain per node, nodes joined by InfiniBand / RoCE: H100, H800), the one
    Megatron-LM lists for cross-node expert parallelism and fine-grained MoE such as DeepSeek-V3,
    and its default.

    Source: Megatron-LM d98e8a6 `megatron/core/transformer/moe/README.md` (Token Dispatching table:
    DeepEP "Cross-node EP, fine-grained MoE (DeepSeek-V3)"; HybridEP "GB200 NVL72, Multi-Node
    NVLink") and `transformer_config.py` l. 898-903 (default deepep; "only hybridep backend
    supports the MNNVL case")."""
    return "hybridep" if scaleup_domain_gpus > gpus_per_node else "deepep"


def recompute_flags(granularity: str | None, method: str | None = None,
                    num_layers: int | None = None, modules: tuple[str, ...] | None = None) -> list[str]:
    """The recompute flags of one granularity (None: none), with method and layer count for full,
    and selective's module list when given (None: Megatron's default, core_attn, left implicit).

    Source: `transformer_config.py` `__post_init__` (full needs a method and a layer count;
    selective takes neither) and `megatron/core/recompute.py` (uniform with 1 recomputes every
    layer; block the first N layers of every model chunk)."""
    if granularity is None:
        return []
    out = [f"{FLAG['recompute_granularity']} {granularity}"]
    if granularity == "full":
        out += [f"{FLAG['recompute_method']} {method}",
                f"{FLAG['recompute_num_layers']} {num_layers}"]
    elif modules:
        out.append(f"{FLAG['recompute_modules']} {' '.join(modules)}")
    return out


def recomputed_modes(granularity: str | None, method: str | None, num_layers: int | None,
                     chunks, num_hidden_layers: int) -> tuple[str, ...]:
    """Each decoder layer's recompute mode under one set of Megatron recompute options: none;
    selective on every layer; full with uniform on every layer (any chunk size recomputes all of
    them); full with block on the first `num_layers` layers of each model chunk (`chunks`: each
    chunk's decoder layers in order, `evaluation.model_chunks`) and none on the rest.

    Source: `megatron/core/recompute.py` @d98e8a6 l. 156-181 (`num_layers_per_pipeline_rank` is
    the model chunk's own layer count, one TransformerBlock per virtual stage)."""
    modes = [granularity or "none"] * num_hidden_layers
    if granularity == "full" and method == "block":
        for chunk in chunks:
            for k, i in enumerate(chunk):
                modes[i] = "full" if k < num_layers else "none"
    return tuple(modes)


FIX_TERMS = {
    "recompute selective": " ".join(recompute_flags("selective")),
    "recompute full": " ".join(recompute_flags("full", "uniform", 1)),
    "micro_batch_size": f"{FLAG['micro_batch_size']} {{}}",
    **{f"zero_stage {stage}": " ".join(flags) for stage, flags in ZERO_FLAGS.items() if stage},
}
"""The gate's single-knob changes (`planner.check.gate._single_changes`) in Megatron's flags;
`{}` takes the new value."""

DEEPSPEED_LAUNCHER = "deepspeed"
DEEPSPEED_GPUS = ("--num_gpus", "--num_accelerators")
DEEPSPEED_NODES = ("--num_nodes",)
DEEPSPEED_HOSTS = ("--hostfile", "-H", "--include", "-i", "--exclude", "-e")
"""DeepSpeed's launcher (`deepspeed [OPTIONS] pretrain_gpt.py ...`, as Megatron-DeepSpeed launches): one rank per
GPU, --num_gpus GPUs on each of --num_nodes nodes; without --num_nodes, the hosts of its hostfile (one node when no
host option is given); -1 (the default) every GPU / host. Source: deepspeedai/DeepSpeed
deepspeed/launcher/runner.py at edaa722 (parse_args: --num_nodes, --num_gpus / --num_accelerators, -H/--hostfile,
-i/--include, -e/--exclude)."""
ACCELERATE_LAUNCHER = ("accelerate", "launch")
ACCELERATE_PROCESSES = ("--num_processes",)
"""Hugging Face Accelerate's launcher (`accelerate launch [OPTIONS] script.py ...`): --num_processes ranks in all
("The total number of processes to be launched in parallel"). Source: huggingface/accelerate
src/accelerate/commands/launch.py at 16cb6eb (launch_command_parser, resource arguments)."""
