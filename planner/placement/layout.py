"""One training configuration to cost: the parallel degrees and the discrete knobs.

`Layout` holds a device mesh (`Layout.mesh`, `placement.mesh.Mesh`: world size, HSDP split,
expert groups, rank order, shared with serving's instances) plus the training knobs (batch,
recompute, precision, framework, overlaps). The degrees stay flat fields, so that a Layout is
built, replaced, hashed and written (plan files, caches) by field name; everything derived from
them is the mesh's. `Layout` validates that each field lies in its own domain (positive degrees,
known names). Whether the degrees *compose* for a
given model and cluster (heads by tp, layers by pp, world size = GPU count, ...) is checked by
`planner.placement.rules.check_layout`, which returns violations as data.

Source: field names follow Megatron-LM `megatron/training/arguments.py` (tensor/pipeline/context/
expert model parallel sizes, `--num-layers-per-virtual-pipeline-stage`, `--micro-batch-size`,
`--global-batch-size`, `--recompute-granularity`) and torchtitan `parallel_dims.py`
(`dp_replicate`, `dp_shard`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner.errors import SpecError, shown
from planner.placement import pipeline_layout
from planner.placement.mesh import Mesh

RECOMPUTE_MODES = ("none", "selective", "full")
RECOMPUTE_MODULES = ("core_attn", "mla_up_proj", "mlp", "moe_act", "moe", "shared_experts", "layernorm")
"""Megatron-LM's `--recompute-modules` choices (`Layout.recompute_modules`; what each drops and
re-runs: `cost.activations`, `cost.step_time`). Source: NVIDIA/Megatron-LM@d98e8a6
megatron/core/transformer/transformer_config.py l. 560-583, default ["core_attn"] l. 1940."""
DEFAULT_RECOMPUTE_MODULES = ("core_attn",)
OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")
"""Megatron-LM's fine-grained activation offloading modules (`Layout.offload_modules`, its
fine-grained activation offloading with its module list): each module's saved tensors go to
host memory in forward and come back before its backward (`cost.activations`). Source:
NVIDIA/Megatron-LM@d98e8a6 megatron/core/transformer/transformer_config.py l. 1323-1341
(`fused_group_mlp`, which needs the TE op fuser, and `gdp_qkv` are not costed)."""
OFFLOAD_TARGETS = ("optimizer", "parameters", "activations")
OPTIMIZERS = ("adamw", "sgd", "adam8bit")
PRECISIONS = ("bf16", "fp16", "fp8")
FRAMEWORKS = ("megatron", "deepspeed", "torchtitan")
GRAD_REDUCE_DTYPES = ("fp32", "bf16", "fp16")
"""Dtypes a data-parallel gradient reduction can run in (`Layout.grad_reduce_dtype`)."""
CP_COMM_TYPES = ("p2p", "a2a")
"""Context-parallel attention: p2p = ring attention (K/V passed around the cp ranks), a2a =
all-to-all of Q, K, V and the output (DeepSpeed-Ulysses). Source: Megatron-LM's cp_comm_type flag
(also all_gather and a2a+p2p, not costed); Transformer Engine AttnFuncWithCPAndKVP2P /
AttnFuncWithCPAndQKVOA2A."""
MOE_DISPATCHERS = ("alltoall", "flex")
"""MoE token dispatchers costed (`Layout.moe_dispatcher`): alltoall = one copy of a token per
routed expert over the EP group (Megatron `MoEAlltoAllTokenDispatcher`); flex = DeepEP / HybridEP,
one copy per destination node over the network and per destination GPU over NVLink (Megatron
`MoEFlexTokenDispatcher`; `cost.comm`). Source: NVIDIA/Megatron-LM@d98e8a6
megatron/core/transformer/moe/token_dispatcher.py."""
OPTIMIZER_DTYPES = {"main_params_dtype": ("fp32", "fp16"), "main_grads_dtype": ("fp32", "bf16"),
                    "exp_avg_dtype": ("fp32", "fp16", "bf16", "fp8"),
                    "exp_avg_sq_dtype": ("fp32", "fp16", "bf16", "fp8")}
"""Precision-aware optimizer dtype knob (`Layout` field) -> the dtypes it takes, fp32 (the
default) first. Source: Megatron-LM's flags of these names (frameworks.megatron; megatron/training/arguments.py l. 3671-3684 @d98e8a6)."""
FP8_RECIPES = ("delayed", "tensorwise", "blockwise", "mxfp8")
"""Transformer Engine fp8 scaling recipes (`Layout.fp8_recipe`), Megatron-LM's default first.
Source: Megatron-LM TransformerConfig.fp8_recipe, default "delayed"
(megatron/core/transformer/transformer_config.py l. 594-596 @d98e8a6; "custom" not costed)."""
TORCHAO_FP8_RECIPES = ("rowwise", "rowwise_with_gw_hp", "tensorwise", "mxfp8")
"""torchao float8 scaling recipes torchtitan runs (`Layout.fp8_recipe` under torchtitan; its
default and the releases that take each: `frameworks.torchtitan.FP8_RECIPES`)."""
ALL_FP8_RECIPES = tuple(dict.fromkeys(FP8_RECIPES + TORCHAO_FP8_RECIPES))
"""Every value `Layout.fp8_recipe` takes; which a framework runs: `rules._fp8_recipe`."""
CROSS_ENTROPY_FUSIONS = ("native", "te")
"""Megatron-LM's fused cross-entropy implementations (`Layout.cross_entropy_fusion`: its
cross-entropy loss fusion flag with the fusion-impl flag's value). Source: NVIDIA/Megatron-LM@d98e8a6
megatron/core/model_parallel_config.py l. 320-328 (`cross_entropy_loss_fusion` False,
`cross_entropy_fusion_impl` 'native')."""
NORM_KERNELS = ("fused", "composite")
"""How an eager (uncompiled) model runs its RMSNorm (`Layout.norm_kernel`; None = "fused"):
"fused", one kernel (Megatron-LM / Transformer Engine; PyTorch's torch.nn.functional.rms_norm,
which calls at::_fused_rms_norm: pytorch/pytorch aten/src/ATen/native/layer_norm.cpp
rms_norm_symint); "composite", the op-by-op Python RMSNorm (fp32 upcast, pow, mean, rsqrt, two
multiplies, cast back) of torchtitan's `norm_type = "rmsnorm"` up to early 2025
(pytorch/torchtitan@9dec370 torchtitan/models/norms.py `RMSNorm.forward`, l. 96-101; the
llama3 train configs' default norm_type, train_configs/llama3_8b.toml). torch.compile fuses
either (`step_time.composite_norm_bytes` prices the difference in eager only)."""
PRECISION_KNOBS = ("fp8_recipe", "fp8_param_gather", "precision_aware_optimizer", *OPTIMIZER_DTYPES,
                   "cross_entropy_fusion", "loss_chunks", "mtp_layers")
"""The fp8 recipe and parameter storage, the precision-aware optimizer's, the loss's and the
multi-token-prediction `Layout` fields, which `plan` takes and its plan files record (None = the
framework's default: delayed; off; off; fp32; unfused; `placement.precision.loss_chunks`;
`placement.mtp.mtp_layers`). `Layout.swiglu_fp8_input_store` is not one: Megatron-LM has no flag
for it, so `explain` alone sets it."""
BUCKET_KNOBS = ("reduce_bucket", "allgather_bucket", "zero3_prefetch", "zero3_live_parameters",
                "zero3_persistence")
"""DeepSpeed ZeRO's bucket and threshold sizes, elements (`Layout.buckets`; the keys, defaults and sources
in `frameworks.deepspeed`, where `bucket(layout, knob)` fills a size the layout leaves out)."""
OVERLAP_KNOBS = ("tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather", "ep_comm_overlap")
"""The communication-overlap knobs (`Layout` fields; None = the framework's default,
`placement.overlap.resolve`)."""


@dataclass(frozen=True, kw_only=True)
class Layout:
    """One training configuration to cost."""

    dp: int = 1
    """Data-parallel degree (replicas of the dense model), count."""
    tp: int = 1
    """Tensor-parallel degree, count."""
    pp: int = 1
    """Pipeline-parallel degree (stages), count."""
    cp: int = 1
    """Context-parallel degree (sequence split), count."""
    ep: int = 1
    """Expert-parallel degree (routed experts split), count; lives inside dp*cp*tp for experts."""
    etp: int = 1
    """Expert tensor-parallel degree, count."""
    dp_shard: int | None = None
    """HSDP: ZeRO shards over dp_shard and replicates over dp // dp_shard; None = all of dp, count."""
    zero_stage: int = 0
    """ZeRO stage 0..3 (3 = FSDP)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism (norm/dropout activations split along the sequence over tp)."""
    vpp: int = 1
    """Virtual stages per pipeline rank (interleaved 1F1B when > 1), count."""
    pipeline_layers: tuple[int, ...] | None = None
    """Explicit (uneven) decoder layers per stage, len == pp; None = even split."""
    pipeline_layout: tuple[str, ...] | None = None
    """Layer symbols per virtual stage (E embedding, t decoder, m MTP, L loss), len == pp * vpp,
    chunk c on rank c % pp (`placement/pipeline_layout.py`, Megatron's
    pipeline-model-parallel layout string); None = equal chunks. Takes precedence over
    pipeline_layers for which layers each rank holds."""
    micro_batch_size: int = 1
    """Sequences per micro-batch per DP rank."""
    microbatch_group_size: int | None = None
    """Interleaved 1F1B: micro-batches run back to back through one virtual stage (Megatron-LM's
    `frameworks.megatron.FLAG["microbatch_group_size"]`, the N of Llama 3's schedule,
    `cost.pipeline.interleaved_warmup_chunks`); None = pp, Megatron's default (depth-first)."""
    global_batch_size: int = 1
    """Sequences per optimizer step."""
    seq_len: int = 4096
    """Tokens per sequence."""
    recompute: str = "none"
    """Activation recompute: none | selective | full (uniform; the search may mix per layer)."""
    recompute_modules: tuple[str, ...] | None = None
    """The modules `selective` recomputes (Megatron's `--recompute-modules`, a subset of
    RECOMPUTE_MODULES, one set for every selectively recomputed layer); None = ("core_attn",),
    Megatron's default. Megatron only (torchtitan's `selective` is its op-level policy)."""
    offload_modules: tuple[str, ...] | None = None
    """Megatron's fine-grained activation offloading: the modules (OFFLOAD_MODULES) whose saved
    tensors are kept in host memory between forward and backward; None = off (its default).
    `attn_proj` only with `core_attn` (the attention output is saved by both)."""
    offload: frozenset[str] = frozenset()
    """Subset of {"optimizer", "parameters", "activations"} kept in host memory."""
    optimizer: str = "adamw"
    """adamw | sgd | adam8bit."""
    precision: str = "bf16"
    """Compute dtype of the GEMMs: bf16 | fp16 | fp8."""
    framework: str = "megatron"
    """megatron | deepspeed | torchtitan: sets conventions such as fp32 gradient accumulation."""
    grad_reduce_dtype: str | None = None
    """Dtype of the data-parallel gradient reduction (and, where the framework keeps it in that
    dtype, of the accumulated gradients): fp32 | bf16 | fp16; None = the framework's default
    (`placement.precision.grad_reduce_dtype`)."""
    fp8_recipe: str | None = None
    """fp8 scaling recipe under precision fp8. Megatron-LM (Transformer Engine): delayed |
    tensorwise (current scaling) | blockwise | mxfp8; None = delayed (Megatron-LM's default),
    costed where it changes the state bytes (who owns the precision-aware optimizer's master
    weights, `placement.precision`). torchtitan (torchao float8): rowwise | rowwise_with_gw_hp |
    tensorwise | mxfp8; None = the release's default (`frameworks.torchtitan.FP8_RECIPE_DEFAULT`),
    costed in the linear GEMMs and casts (`cost.compute.torchao_fp8_linear_factor`)."""
    fp8_param_gather: bool | None = None
    """Megatron-LM's fp8 parameter gather (its flag `frameworks.megatron.FLAG["fp8_param_gather"]`):
    under precision fp8 the Transformer Engine linear weights are stored in fp8 (no separate fp8
    weight workspace) and the data-parallel parameter all-gather moves 1 B per linear weight; the
    vocabulary, norms and router stay 16-bit (`placement.precision.fp8_weight_bytes`,
    `cost.memory`, `cost.comm`); None = off (Megatron-LM's default)."""
    precision_aware_optimizer: bool | None = None
    """Megatron-LM's precision-aware optimizer (Transformer Engine FusedAdam keeps the master
    weights, moments and gradients in the dtypes below; `placement.precision.state_bytes`);
    None = off (the framework's default)."""
    main_params_dtype: str | None = None
    """Master-weight dtype of the precision-aware optimizer: fp32 | fp16; None = fp32."""
    main_grads_dtype: str | None = None
    """Gradient dtype the precision-aware optimizer reads: fp32 | bf16; None = fp32 (bf16 under
    bf16 / fp8 compute also reduces gradients in bf16, `placement.precision.grad_reduce_dtype`)."""
    exp_avg_dtype: str | None = None
    """Adam first-moment dtype: fp32 | fp16 | bf16 | fp8; None = fp32."""
    exp_avg_sq_dtype: str | None = None
    """Adam second-moment dtype: fp32 | fp16 | bf16 | fp8; None = fp32."""
    cross_entropy_fusion: str | None = None
    """Megatron-LM's fused cross-entropy: native | te (CROSS_ENTROPY_FUSIONS); None = off (its
    default, the unfused vocab-parallel cross-entropy). The same bytes either way
    (`cost.activations.loss_working_set_bytes`); te is refused as Megatron-LM refuses it."""
    loss_chunks: int | None = None
    """torchtitan's chunked loss (`ChunkedLossWrapper` num_chunks): the head and cross-entropy run
    on this many token chunks, no logits kept; 1 = the plain cross-entropy; None = the framework's
    default (`placement.precision.loss_chunks`)."""
    mtp_layers: int | None = None
    """Multi-token-prediction layers trained after the last decoder layer (Megatron-LM's
    `frameworks.megatron.FLAG["mtp_num_layers"]`; 0 = none); None = the recipe's default
    (`placement.mtp.mtp_layers`: the model's num_nextn_predict_layers under Megatron, as
    Megatron-Bridge's DeepSeek-V3 recipes train it; none elsewhere). Costed on the stage that holds
    it (`placement.mtp.mtp_stage`): its parameters, gradients and optimizer states, activations and
    time (`cost.memory`, `cost.step_time`)."""
    swiglu_fp8_input_store: bool | None = None
    """Megatron-LM's fp8 store of the SwiGLU input (`frameworks.megatron.FLAG[
    "activation_func_fp8_input_store"]`): the activation function's saved input is kept in fp8,
    1 B per element instead of 2 (`cost.activations`); None = off (its default)."""
    buckets: tuple[tuple[str, int], ...] | None = None
    """DeepSpeed ZeRO bucket and threshold sizes the config sets, as sorted (knob, elements) pairs of
    BUCKET_KNOBS (integers >= 0); a knob left out, or None, is DeepSpeed's default
    (`frameworks.deepspeed.bucket`). Costed by `cost.memory` (reduce bucket, live parameters,
    persistent parameters); DeepSpeed layouts only."""
    cp_comm_type: str = "p2p"
    """Context-parallel attention communication: p2p (ring) | a2a (all-to-all, Ulysses)."""
    tp_comm_overlap: bool | None = None
    """TP/SP all-gathers and reduce-scatters pipelined with the neighbouring linear GEMMs (Megatron
    Transformer Engine userbuffers, torchtitan AsyncTP); None = the framework's default
    (`placement.overlap`)."""
    overlap_grad_reduce: bool | None = None
    """Data-parallel gradient reduction overlapped with backward (Megatron's grad-reduce overlap,
    DeepSpeed's ZeRO comm overlap; FSDP2 / DDP always); None = the framework's default."""
    overlap_param_gather: bool | None = None
    """Parameter all-gathers overlapped with forward (Megatron's param-gather overlap of the
    distributed optimizer / Megatron-FSDP, ZeRO-3 prefetch, FSDP2 implicit prefetch); None = the
    framework's default."""
    ep_comm_overlap: bool | None = None
    """Expert-parallel dispatch / combine all-to-alls overlapped with another micro-batch's
    compute (Megatron's 1F1B all-to-all overlap); None = the framework's default."""
    moe_dispatcher: str | None = None
    """MoE token dispatcher: alltoall | flex (DeepEP / HybridEP, `MOE_DISPATCHERS`); None = the
    framework's default, costed as alltoall (Megatron's default allgather is not costed apart;
    torchtitan and DeepSpeed have no other)."""
    norm_kernel: str | None = None
    """RMSNorm kernel of an eager model (`NORM_KERNELS`); None = fused."""
    fused_qkv: bool | None = None
    """The attention's q, k, v projections run as one matmul (torchtitan's `wqkv`, pytorch/torchtitan
    3396a4b, 2026-06-24: `fuse_qkv=True` in the llama3 / qwen3 / gpt-oss presets; Megatron-LM's
    `linear_qkv` always); False = separate wq, wk, wv (torchtitan before 3396a4b). Read by torchtitan's
    selective op AC alone (`cost.activations.torchtitan_op_sac_tensors`); None = fused
    (`placement.precision.fused_qkv`)."""
    torch_compile: bool | None = None
    """torch.compile of the transformer blocks (torchtitan `compile.enable`), which fuses their
    elementwise kernels; None = the framework's default (`placement.overlap.compiled`)."""
    vocab_divisible_by: int | None = None
    """What Megatron-LM pads the vocabulary to a multiple of, times tp (its flag
    `frameworks.megatron.FLAG["vocab_divisible_by"]`; `placement.precision.padded_vocab`);
    None = the framework's default (128)."""
    vocab_rows: int | None = None
    """Embedding rows a loaded checkpoint fixes: Megatron-LM's use_checkpoint_args switch
    (`frameworks.megatron.FLAG`) takes the checkpoint's padded_vocab_size (NVIDIA/Megatron-LM@d98e8a6 `megatron/training/checkpointing.py`
    `load_args_from_checkpoint`, `_set_arg('padded_vocab_size')`), which `_set_padded_vocab_size`
    then keeps instead of padding to vocab_divisible_by x tp; None = padded by the framework
    (`placement.precision.padded_vocab`)."""

    def __post_init__(self) -> None:
        # Fast path first (a search builds tens of thousands of Layouts): every check below is the
        # slow path's, which runs only when one fails, to raise the same SpecError.
        if not (type(self.dp) is type(self.tp) is type(self.pp) is type(self.cp) is type(self.ep)
                is type(self.etp) is type(self.vpp) is type(self.micro_batch_size)
                is type(self.global_batch_size) is type(self.seq_len) is int
                and min(self.dp, self.tp, self.pp, self.cp, self.ep, self.etp, self.vpp,
                        self.micro_batch_size, self.global_batch_size, self.seq_len) >= 1):
            self._check_degrees()
        if self.dp_shard is not None:
            self._check_dp_shard()
        if self.zero_stage not in (0, 1, 2, 3):
            raise SpecError(f"value {self.zero_stage!r} not allowed; allowed: 0, 1, 2, 3",
                            key="zero_stage")
        if (self.recompute not in RECOMPUTE_MODES or self.optimizer not in OPTIMIZERS
                or self.precision not in PRECISIONS or self.framework not in FRAMEWORKS):
            _check_choice("recompute", self.recompute, RECOMPUTE_MODES)
            _check_choice("optimizer", self.optimizer, OPTIMIZERS)
            _check_choice("precision", self.precision, PRECISIONS)
            _check_choice("framework", self.framework, FRAMEWORKS)
        if self.grad_reduce_dtype is not None and self.grad_reduce_dtype not in GRAD_REDUCE_DTYPES:
            _check_choice("grad_reduce_dtype", self.grad_reduce_dtype, GRAD_REDUCE_DTYPES)
        if self.fp8_recipe is not None and self.fp8_recipe not in ALL_FP8_RECIPES:
            _check_choice("fp8_recipe", self.fp8_recipe, ALL_FP8_RECIPES)
        if self.microbatch_group_size is not None and not (
                type(self.microbatch_group_size) is int and self.microbatch_group_size >= 1):
            raise SpecError(f"value {self.microbatch_group_size!r} must be an integer >= 1",
                            key="microbatch_group_size")
        if self.vocab_divisible_by is not None and not (
                type(self.vocab_divisible_by) is int and self.vocab_divisible_by >= 1):
            raise SpecError(f"value {self.vocab_divisible_by!r} must be an integer >= 1",
                            key="vocab_divisible_by")
        if self.vocab_rows is not None and not (type(self.vocab_rows) is int and self.vocab_rows >= 1):
            raise SpecError(f"value {self.vocab_rows!r} must be an integer >= 1", key="vocab_rows")
        if (self.main_params_dtype is not None or self.main_grads_dtype is not None
                or self.exp_avg_dtype is not None or self.exp_avg_sq_dtype is not None):
            for name, allowed in OPTIMIZER_DTYPES.items():
                if getattr(self, name) is not None:
                    _check_choice(name, getattr(self, name), allowed)
        if self.fp8_param_gather is not None and type(self.fp8_param_gather) is not bool:
            raise SpecError(f"value {self.fp8_param_gather!r} must be true, false or absent (off)",
                            key="fp8_param_gather")
        if self.precision_aware_optimizer is not None and type(self.precision_aware_optimizer) is not bool:
            raise SpecError(f"value {self.precision_aware_optimizer!r} must be true, false or absent "
                            "(off)", key="precision_aware_optimizer")
        if self.recompute_modules is not None and not _recompute_modules_ok(self):
            self._check_recompute_modules()
        if self.offload_modules is not None and not _offload_modules_ok(self):
            self._check_offload_modules()
        if self.cp_comm_type not in CP_COMM_TYPES:
            _check_choice("cp_comm_type", self.cp_comm_type, CP_COMM_TYPES)
        if self.norm_kernel is not None and self.norm_kernel not in NORM_KERNELS:
            _check_choice("norm_kernel", self.norm_kernel, NORM_KERNELS)
        if self.cross_entropy_fusion is not None and self.cross_entropy_fusion not in CROSS_ENTROPY_FUSIONS:
            _check_choice("cross_entropy_fusion", self.cross_entropy_fusion, CROSS_ENTROPY_FUSIONS)
        if self.loss_chunks is not None and not _loss_chunks_ok(self):
            raise SpecError(f"value {self.loss_chunks!r} must be an integer >= 1 (1 = no chunking)",
                            key="loss_chunks")
        if self.mtp_layers is not None and not _mtp_layers_ok(self):
            raise SpecError(f"value {self.mtp_layers!r} must be an integer >= 0 (0 = no MTP)", key="mtp_layers")
        if self.swiglu_fp8_input_store is not None and type(self.swiglu_fp8_input_store) is not bool:
            raise SpecError(f"value {self.swiglu_fp8_input_store!r} must be true, false or absent (off)",
                            key="swiglu_fp8_input_store")
        if self.moe_dispatcher is not None and self.moe_dispatcher not in MOE_DISPATCHERS:
            _check_choice("moe_dispatcher", self.moe_dispatcher, MOE_DISPATCHERS)
        if type(self.offload) is not frozenset:
            object.__setattr__(self, "offload", frozenset(self.offload))
        for target in self.offload:
            _check_choice("offload", target, OFFLOAD_TARGETS)
        for name in (*OVERLAP_KNOBS, "torch_compile", "fused_qkv"):
            if getattr(self, name) is not None and type(getattr(self, name)) is not bool:
                raise SpecError(f"value {getattr(self, name)!r} must be true, false or absent "
                                "(the framework's default)", key=name)
        if self.buckets is not None and not _buckets_ok(self):
            self._check_buckets()
        if self.pipeline_layers is not None:
            self._check_pipeline_layers()
        if self.pipeline_layout is not None and not _pipeline_layout_ok(self):
            self._check_pipeline_layout()

    def _check_degrees(self) -> None:
        for name in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch_size",
                     "global_batch_size", "seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"value {value!r} must be an integer >= 1", key=name)

    def _check_buckets(self) -> None:
        pairs = self.buckets
        if isinstance(pairs, dict):
            pairs = tuple(pairs.items())
        if not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
            raise SpecError(f"value {pairs!r} must be (knob, elements) pairs", key="buckets")
        for knob, elements in pairs:
            _check_choice("buckets", knob, BUCKET_KNOBS)
            if type(elements) is not int or elements < 0:
                raise SpecError(f"value {elements!r} of {knob} must be an integer >= 0", key="buckets")
        if len({knob for knob, _ in pairs}) != len(pairs):
            raise SpecError(f"value {pairs!r} names a knob twice", key="buckets")
        if self.framework != "deepspeed":
            raise SpecError(f"bucket sizes are DeepSpeed settings; framework {self.framework!r} has "
                            "none", key="buckets")
        object.__setattr__(self, "buckets", tuple(sorted((k, e) for k, e in pairs)))

    def _check_dp_shard(self) -> None:
        if (isinstance(self.dp_shard, bool) or not isinstance(self.dp_shard, int)
                or self.dp_shard < 1 or self.dp % self.dp_shard):
            raise SpecError(f"value {self.dp_shard!r} must be a positive divisor of dp={self.dp}",
                            key="dp_shard")

    def _check_recompute_modules(self) -> None:
        self._check_module_list("recompute_modules", RECOMPUTE_MODULES, empty_ok=True)

    def _check_offload_modules(self) -> None:
        modules = self._check_module_list("offload_modules", OFFLOAD_MODULES, empty_ok=False)
        if "attn_proj" in modules and "core_attn" not in modules:
            raise SpecError(f"value {modules!r}: attn_proj must be used together with core_attn "
                            "(Megatron-LM docs/user-guide/features/fine_grained_activation_offloading.md)",
                            key="offload_modules")

    def _check_module_list(self, name: str, allowed: tuple[str, ...], *, empty_ok: bool) -> tuple[str, ...]:
        """Field `name` as a tuple of distinct names from `allowed` (normalized in place)."""
        modules = getattr(self, name)
        if isinstance(modules, str) or not all(isinstance(m, str) for m in modules) or not (modules or empty_ok):
            raise SpecError(f"value {modules!r} must be a list of module names ({', '.join(allowed)})", key=name)
        for module in modules:
            _check_choice(name, module, allowed)
        if len(set(modules)) != len(modules):
            raise SpecError(f"value {modules!r} names a module twice", key=name)
        if self.framework != "megatron":
            raise SpecError(f"value {modules!r} is a Megatron-LM setting; framework {self.framework!r} has "
                            "no module list", key=name)
        object.__setattr__(self, name, tuple(modules))
        return tuple(modules)

    @property
    def selective_modules(self) -> tuple[str, ...]:
        """`recompute_modules`, Megatron's default ("core_attn",) when None."""
        return DEFAULT_RECOMPUTE_MODULES if self.recompute_modules is None else self.recompute_modules

    def _check_pipeline_layers(self) -> None:
        layers = self.pipeline_layers
        if type(layers) is not tuple:
            layers = tuple(layers)
            object.__setattr__(self, "pipeline_layers", layers)
        if len(layers) == self.pp and (not layers or set(map(type, layers)) == {int}
                                       and min(layers) >= 0):
            return
        if len(layers) != self.pp or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in layers
        ):
            raise SpecError(f"value {shown(layers)} must be {self.pp} non-negative integers "
                            f"(one per pipeline stage)", key="pipeline_layers")

    def _check_pipeline_layout(self) -> None:
        stages = self.pipeline_layout
        if isinstance(stages, str) or not all(isinstance(x, str) for x in stages):
            raise SpecError(f"value {stages!r} must be {self.pp * self.vpp} strings of layer "
                            "symbols (one per virtual stage)", key="pipeline_layout")
        stages = tuple(stages)
        object.__setattr__(self, "pipeline_layout", stages)
        if len(stages) != self.pp * self.vpp:
            raise SpecError(f"{len(stages)} virtual stages, need pp x vpp = {self.pp} x {self.vpp} = "
                            f"{self.pp * self.vpp}", key="pipeline_layout")
        pipeline_layout.parse("|".join(stages), self.pp)  # raises its SpecError

    def replace(self, **changes: object) -> Layout:
        """`dataclasses.replace(self, **changes)`, validated the same way, without its per-field
        overhead (searches derive tens of thousands of layouts from one another)."""
        if not changes.keys() <= _FIELD_NAMES:
            return dataclasses.replace(self, **changes)  # raises its TypeError
        new = object.__new__(Layout)
        state = new.__dict__
        state.update(self.__dict__)
        state.update(changes)
        # `self` passed every check: re-check only the changed fields and those checked against
        # them; any doubt runs the full checks, which raise (or normalize) exactly as the
        # constructor would.
        for name in changes:
            for checked in _CHECKED_WITH.get(name, (name,)):
                if not _FIELD_OK[checked](new):
                    new.__post_init__()
                    return new
        return new

    @property
    def mesh(self) -> Mesh:
        """The device mesh of the degrees (`placement.mesh.Mesh`: world size, HSDP split, expert
        groups, rank-order sharing, the TP-domain rule); one shared object per set of degrees
        (a search asks for the same few meshes tens of thousands of times)."""
        key = (self.dp, self.tp, self.pp, self.cp, self.ep, self.etp, self.dp_shard)
        mesh = _MESHES.get(key)
        if mesh is None:
            if len(_MESHES) >= 4096:
                _MESHES.clear()
            mesh = _MESHES[key] = Mesh(dp=self.dp, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep,
                                       etp=self.etp, dp_shard=self.dp_shard)
        return mesh

    # The mesh's own derived degrees, read straight off the Layout's fields (the same property
    # objects, so the arithmetic lives once, in `Mesh`, and a search pays no Mesh per call).
    world_size = Mesh.world_size
    """GPUs used: dp * tp * pp * cp (`Mesh.world_size`)."""
    dp_shard_degree = Mesh.dp_shard_degree
    """Degree the ZeRO/FSDP sharding runs over (`Mesh.dp_shard_degree`)."""
    dp_replicate_degree = Mesh.dp_replicate_degree
    """HSDP replica groups (`Mesh.dp_replicate_degree`)."""
    expert_dp = Mesh.expert_dp
    """Expert-data-parallel degree (`Mesh.expert_dp`: world / (ep * etp * pp), at least 1)."""

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per step per DP rank: global_batch_size // (dp * micro_batch_size)."""
        return self.global_batch_size // (self.dp * self.micro_batch_size)


_MESHES: dict[tuple, Mesh] = {}
"""(dp, tp, pp, cp, ep, etp, dp_shard) -> its Mesh (`Layout.mesh`)."""

_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Layout))


def _positive_int(name: str):
    return lambda layout: type(v := getattr(layout, name)) is int and v >= 1


def _pipeline_layers_ok(layout: Layout) -> bool:
    layers = layout.pipeline_layers
    return layers is None or (type(layers) is tuple and len(layers) == layout.pp and (
        not layers or set(map(type, layers)) == {int} and min(layers) >= 0))


def _recompute_modules_ok(layout: Layout) -> bool:
    modules = layout.recompute_modules
    return modules is None or (type(modules) is tuple and set(modules) <= set(RECOMPUTE_MODULES)
                               and len(set(modules)) == len(modules) and layout.framework == "megatron")


def _offload_modules_ok(layout: Layout) -> bool:
    modules = layout.offload_modules
    return modules is None or (type(modules) is tuple and bool(modules) and set(modules) <= set(OFFLOAD_MODULES)
                               and len(set(modules)) == len(modules)
                               and ("attn_proj" not in modules or "core_attn" in modules)
                               and layout.framework == "megatron")


def _pipeline_layout_ok(layout: Layout) -> bool:
    stages = layout.pipeline_layout
    return stages is None or (
        type(stages) is tuple and len(stages) == layout.pp * layout.vpp
        and all(type(x) is str for x in stages)
        and set("".join(stages)) <= set(pipeline_layout.SYMBOLS)
        and pipeline_layout.structure_problem(stages, layout.pp) is None)


def _buckets_ok(layout: Layout) -> bool:
    pairs = layout.buckets
    return pairs is None or (type(pairs) is tuple and layout.framework == "deepspeed"
                             and all(type(p) is tuple and len(p) == 2 and p[0] in BUCKET_KNOBS
                                     and type(p[1]) is int and p[1] >= 0 for p in pairs)
                             and list(pairs) == sorted(set(pairs)) and len({p[0] for p in pairs}) == len(pairs))


_FIELD_OK = {
    **{name: _positive_int(name) for name in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp",
                                              "micro_batch_size", "global_batch_size", "seq_len")},
    "dp_shard": lambda layout: layout.dp_shard is None or (
        type(layout.dp_shard) is int and layout.dp_shard >= 1 and type(layout.dp) is int
        and layout.dp % layout.dp_shard == 0),
    "zero_stage": lambda layout: layout.zero_stage in (0, 1, 2, 3),
    "sequence_parallel": lambda layout: True,
    "microbatch_group_size": lambda layout: layout.microbatch_group_size is None or (
        type(layout.microbatch_group_size) is int and layout.microbatch_group_size >= 1),
    "pipeline_layers": _pipeline_layers_ok,
    "pipeline_layout": _pipeline_layout_ok,
    "recompute": lambda layout: layout.recompute in RECOMPUTE_MODES,
    "recompute_modules": _recompute_modules_ok,
    "offload_modules": _offload_modules_ok,
    "offload": lambda layout: type(layout.offload) is frozenset and layout.offload.issubset(
        OFFLOAD_TARGETS),
    "optimizer": lambda layout: layout.optimizer in OPTIMIZERS,
    "precision": lambda layout: layout.precision in PRECISIONS,
    "framework": lambda layout: layout.framework in FRAMEWORKS,
    "grad_reduce_dtype": lambda layout: (layout.grad_reduce_dtype is None
                                         or layout.grad_reduce_dtype in GRAD_REDUCE_DTYPES),
    "cp_comm_type": lambda layout: layout.cp_comm_type in CP_COMM_TYPES,
    "cross_entropy_fusion": lambda layout: (layout.cross_entropy_fusion is None
                                            or layout.cross_entropy_fusion in CROSS_ENTROPY_FUSIONS),
    "loss_chunks": lambda layout: layout.loss_chunks is None or _loss_chunks_ok(layout),
    "mtp_layers": lambda layout: layout.mtp_layers is None or _mtp_layers_ok(layout),
    "swiglu_fp8_input_store": lambda layout: (layout.swiglu_fp8_input_store is None
                                             or type(layout.swiglu_fp8_input_store) is bool),
    "moe_dispatcher": lambda layout: (layout.moe_dispatcher is None
                                      or layout.moe_dispatcher in MOE_DISPATCHERS),
    "fp8_recipe": lambda layout: layout.fp8_recipe is None or layout.fp8_recipe in ALL_FP8_RECIPES,
    "norm_kernel": lambda layout: layout.norm_kernel is None or layout.norm_kernel in NORM_KERNELS,
    "fp8_param_gather": lambda layout: (layout.fp8_param_gather is None
                                        or type(layout.fp8_param_gather) is bool),
    "precision_aware_optimizer": lambda layout: (layout.precision_aware_optimizer is None
                                                 or type(layout.precision_aware_optimizer) is bool),
    **{name: (lambda name, allowed: lambda layout: getattr(layout, name) is None
              or getattr(layout, name) in allowed)(name, allowed)
       for name, allowed in OPTIMIZER_DTYPES.items()},
    **{name: (lambda name: lambda layout: getattr(layout, name) is None
              or type(getattr(layout, name)) is bool)(name) for name in (*OVERLAP_KNOBS, "torch_compile", "fused_qkv")},
    "vocab_divisible_by": lambda layout: layout.vocab_divisible_by is None or (
        type(layout.vocab_divisible_by) is int and layout.vocab_divisible_by >= 1),
    "buckets": _buckets_ok,
    "vocab_rows": lambda layout: layout.vocab_rows is None or (
        type(layout.vocab_rows) is int and layout.vocab_rows >= 1),
}
"""Field -> whether its value passes `Layout.__post_init__` (in its normalized form: offload a
frozenset, pipeline_layers a tuple), given the other fields; `replace`'s fast path."""

_CHECKED_WITH = {"dp": ("dp", "dp_shard"), "pp": ("pp", "pipeline_layers", "pipeline_layout"),
                 "vpp": ("vpp", "pipeline_layout"),
                 "framework": ("framework", "recompute_modules", "offload_modules", "buckets")}
"""Fields whose check reads another field: changing dp re-checks dp_shard, pp pipeline_layers and
pipeline_layout, vpp pipeline_layout, framework the module lists (Megatron only)."""


def _loss_chunks_ok(layout: Layout) -> bool:
    return type(layout.loss_chunks) is int and layout.loss_chunks >= 1


def _mtp_layers_ok(layout: Layout) -> bool:
    return type(layout.mtp_layers) is int and layout.mtp_layers >= 0


def _check_choice(key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SpecError(f"value {value!r} not allowed; allowed: {', '.join(allowed)}", key=key)
