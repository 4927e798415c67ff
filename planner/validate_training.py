"""Training validation: published runs -> layouts -> predictions through `explain` -> error statistics.

Data formats (detected by the top-level key; `planner validate --data` takes either):
- `training_runs:` (shared/reference/training_runs.yaml): published runs, each with its own fields
  (tp/pp/dp or a torchtitan `parallelism` string, a published TFLOP/s, MFU, iteration time or
  tokens/s, sometimes a peak memory). What a row leaves out is filled from `GROUP_SETTINGS`, one
  setting per group written as data, each with its reason in `ASSUMPTIONS`; nothing is tuned per row.
- `expert_configs:` (shared/reference/expert_configs.yaml): expert-tuned recipes with a full
  `layout:` and the measured tokens/s per GPU.

A row that cannot be expressed as a `Layout` on a catalog cluster stays in the output with the
reason (`Row.not_expressible`); it is never dropped.

Split (deterministic, decided on ids and row kinds, never on errors): a row is in the EVALUATION
part when crc32(id) % 4 == 0 (id of the file's row, the rule of `serve_validate`; a row that yields
two comparisons keeps both in one part), else in the FIT part; stratified for MoE rows: within a
file, every GPU family (GPU_FAMILIES) with MoE rows of which none hashes into the evaluation part
sends its MoE row of the smallest crc32(id) there (`stratified_parts`), so each family's MoE rows are
evaluated and not only fitted (issue 9 item 5: every MoE row of expert_configs.yaml hashed into FIT).
Constants may be fitted on the fit part only.

Conventions of the published value (`Row.convention`) and of the error:
- `tokens_per_s_per_gpu`: tokens/s per GPU (torchtitan TPS/GPU, expert configs);
- `model_tflops_per_gpu`: model FLOPs (no recompute) per second per GPU (MFU numerator);
- `hardware_tflops_per_gpu`: FLOPs including recomputation (Narayanan 2021 eq. (3));
- `step_time_s`: seconds per optimizer step (Korthikanti 2022 Table 5).
`error` is always the THROUGHPUT error, predicted / published - 1 for the throughput conventions and
published / predicted - 1 for step time (a positive error = the tool is optimistic). The memory
suite's error is predicted / published peak - 1.
"""

from __future__ import annotations

import math
import re
import statistics
import zlib
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import yaml

from planner.cost.comm import ep_gpus_per_domain
from planner.errors import SpecError
from planner.frameworks.torchtitan import TOML_FP8_RECIPE_DEFAULT as TORCHTITAN_TOML_FP8_RECIPE
from planner.placement import overlap
from planner.placement.layout import Layout
from planner.specs.cluster import load_cluster
from planner.specs.model import ModelSpec, from_config, load_model

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "reference"
TRAINING_RUNS = REFERENCE / "training_runs.yaml"
EXPERT_CONFIGS = REFERENCE / "expert_configs.yaml"
"""Copies of shared/reference kept in the repository (the default data of `planner validate`)."""
GIB = 2**30
SUITES = ("training", "memory")
CONVENTIONS = ("tokens_per_s_per_gpu", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "step_time_s")
FORMATS = ("training_runs", "expert_configs")
"""Top-level keys of the two data formats."""

NAMED_MODELS = {
    "GPT 174.6B": dict(hidden_size=12288, num_attention_heads=96, num_hidden_layers=96, vocab_size=51200),
    "GPT 529.6B": dict(hidden_size=20480, num_attention_heads=128, num_hidden_layers=105, vocab_size=51200),
    "MT-NLG 530B": "mt-nlg-530b",
    "OPT 175B": "opt-175b",
    "BLOOM 176B": "bloom-176b",
    "Llama 3 405B": "llama-3.1-405b",
    "Llama 3.1 8B": "llama-3.1-8b",
    "Llama 3.1 70B": "llama-3.1-70b",
    "Llama 3.1 405B": "llama-3.1-405b",
}
"""Model dimensions for rows that name the model only. GPT 174.6B: GPT-3 dims (Brown et al. 2020 Table
2.1) with Megatron's padded vocab 51,200 (174.6B by Narayanan 2021 eq. (2)); GPT 529.6B: the
Narayanan Table 1 row of that size; others: the model catalog."""

KORTHIKANTI_VOCAB = 51200
"""Korthikanti 2022 rows give no vocab; Megatron GPT runs use the padded GPT-2 vocab 51,200."""

CLUSTER_NAMES = {
    "H100 SXM 96 GB HBM2e at 500 W (Meta Grand Teton; not a catalog cluster)": "grand-teton",
}
"""expert_configs `cluster:` text that names no catalog file -> the catalog cluster it describes."""

GPU_FAMILIES = (("A100", "A100"), ("H100", "H100/H200"), ("H800", "H100/H200"), ("H200", "H100/H200"),
                ("GB200", "B200/GB200"), ("B200", "B200/GB200"), ("MI300X", "MI300X"), ("V100", "V100"))
"""GPU name prefix -> family for the statistics (issue 9: A100, H100/H800/H200, B200/GB200, MI300X)."""

ASSUMPTIONS = {
    "clusters": "A100 rows run on dgx-a100-80g (cluster catalog), BLOOM on jean-zay (its machine: 4 x 100 "
                "Gb/s Omni-Path per node, BLOOM paper arXiv 2211.05100 Sec. 3.4.1); Llama 3 rows on dgx-h100; torchtitan "
                    "2024-12 rows and E16 on grand-teton (datasheet SXM peaks; the 500 W limit as its fitted clock fraction, calibration/training.yaml power_limited_gpus).",
    "micro-batch-1": "Micro-batch 1 where the row gives none (Narayanan 2021 Table 1, MT-NLG); vpp 1 where not "
                     "given (Narayanan Table 1 says 'interleaved where applicable' without v).",
    "a100-full-recompute": "A100 rows used full activation recomputation (stated for Narayanan 2021; "
                           "Megatron-DeepSpeed runs MT-NLG and BLOOM checkpoint every layer) and publish hardware "
                           "TFLOP/s that count it (Narayanan 2021 eq. (3): 4 passes of the layers, 3 of the LM "
                           "head); they are compared with `hardware_tflops_per_gpu`.",
    "no-flash-attention": "No FlashAttention (Dao et al. 2022) for runs before 2022 (Megatron-LM SC21, "
                          "Korthikanti 2022, BLOOM, MT-NLG): the attention core materialises the s x s scores.",
    "korthikanti-two-rows": "Korthikanti 2022 rows appear twice, compared on the Table 5 iteration time: full "
                            "recompute, and selective recompute + SP; vpp from the calculon configs. Their interleaved "
                            "(vpp > 1) sends are priced as today's Megatron overlaps them with the next chunk "
                            "(`frameworks.megatron.p2p_overlap`; overlap_p2p_comm arrived in NVIDIA/Megatron-LM "
                            "f9283c5a8a, 2023-05-31): the 2022 code instead sent 1/tp of each boundary tensor "
                            "without SP and all-gathered it (scatter/gather, megatron/p2p_communication.py "
                            "@5942af978a l. 47-56), not modelled; either hides most of the v-fold sends.",
    "llama3": "Llama 3 rows publish bf16 MFU (model FLOPs, compared with `model_tflops_per_gpu`). FSDP shards "
              "'the model, optimizer, and gradients' with bf16 parameters not resharded after forward (Dubey et "
              "al. 2024 §3.3.2) and accumulates gradients in FP32 over the micro-batches before reduce-scattering "
              "them in FP32 (§3.3.4): ZeRO-2 with PP as `cost.memory.fsdp_gradient_sharding_with_pp` costs it "
              "(each chunk's fp32 gradients held from its first backward to its last, one reduce-scatter per "
              "step); rule zero_with_pp (Megatron-LM / DeepSpeed cannot run it) waived for these rows: Meta's "
              "own stack ran it. No activation recompute at 8K ('we could pretrain Llama 3 on sequences of 8K "
              "tokens without activation checkpointing', §3.3.2), selective at 128K (assumed); interleaved "
              "schedule with vpp 4 (assumed): §3.3.2's one-layer chunks imply vpp 8, E|(t|)*126L ('the first "
              "model chunk on the first stage has only the embedding', docs/feasibility.md's layout), at which "
              "the step-time model halves its bubble and over-predicts these rows by +8 to +12% (the 128K "
              "evaluation row +1.3 -> +9.8%, the evaluation median 3.6 -> 6.3% after refit): a time-model gap "
              "at one-layer chunks not yet found, so the rows keep vpp 4 here; rank order [TP, CP, PP, DP] as "
              "stated. The 8,192-GPU row (m = 32) stays does_not_fit at either vpp: each chunk's gradients "
              "are held through the 1F1B steady state (docs/feasibility.md, its xfail reason). Meta's 16,384-GPU "
              "8K layout is priced without TP-comm or DP overlaps (Megatron's defaults; the paper does not say): "
              "with them it predicts 409 instead of 371 TFLOP/s (published 400). `planner plan` for the same job "
              "(405B, 16,384 H100, 8K, 16M-token batch) returns dp32 tp8 pp32 cp2 vpp4 with those overlaps, 426 "
              "TFLOP/s in Megatron's causal convention (445 in this PaLM one): not a model error on Meta's layout "
              "but another layout -- at dp 128 Meta's pipelines run 16 micro-batches each, an interleaved bubble of "
              "(15/4)/16 = 23%, the plan's cp 2 leaves dp 32 and 64 micro-batches, (31/4)/64 = 12%, at 4,096 "
              "tokens per CP rank (no measurement of that layout is published).",
    "deepspeed-grad-accumulation": "DeepSpeed pipeline rows (BLOOM, MT-NLG) pay DeepSpeed's gradient accumulation "
                                   "outside the GEMMs every micro-batch (`frameworks.deepspeed."
                                   "grad_accumulation_bytes_per_param`): MT-NLG (bf16, ZeRO 0 as costed: the paper's "
                                   "ZeRO use is not read here) under the BF16_Optimizer current DeepSpeed picks for "
                                   "bf16 + pipeline at ZeRO 0, 26 B per parameter (+18.5 / +19.5 / +24.0% -> +3.0 / "
                                   "+3.9 / +7.8%); at ZeRO 1 it would be the 6 B add (+15.7 / +16.6 / +21.0%). "
                                   "The 2021 run predates BF16_Optimizer (DeepSpeed 2022): which accumulation it "
                                   "ran is not verified. BLOOM (ZeRO 1, bf16 accumulation by default): 6 B; with "
                                   "BF16_Optimizer's fp32 accumulation (the optimizer written for BLOOM's bf16 + "
                                   "ZeRO 1 run; its fp32 accumulation is not read from a Layout, VERIFY) 26 B, as "
                                   "costed at ZeRO 0, would take it from +5.7% to -0.6%.",
    "zero3-deepspeed": "Narayanan 2021 Table 2 ZeRO-3 rows: DeepSpeed ZeRO-3, no model parallelism, full recompute.",
    "bloom": "BLOOM: ZeRO-1, micro-batch 2 (row); its 8·N·tokens convention omits attention FLOPs (~2% here); "
             "70 layers over pp 12 as 5, 6 x 10, 5 (Megatron-DeepSpeed `--pp-partition-method "
             "'type:transformer|embedding'` counts the embedding and the tied output embedding as layers, "
             "72 / 12 = 6 per stage; bigscience tr11-176B-ml slurm script).",
    "torchtitan-fsdp": "torchtitan rows: FSDP n = ZeRO-3 over dp = n (FSDP2, reshard after forward); SP whenever "
                       "TP (torchtitan apply_tp); with PP, micro-batch = local batch / pp (torchtitan "
                       "build_pipeline_schedule default n_microbatches = pp), layers split as evenly as possible, "
                       "interleaved 1F1B at 2 stages per rank; global batch = FSDP x local batch where not given.",
    "torchtitan-seq-len": "torchtitan 2024-12 Tables 1, 3-5: seq_len 8192 (the torchtitan llama3 default; the "
                          "table does not state it; row marked UNVERIFIED).",
    "torchtitan-table6": "torchtitan 2024-12 Table 6 rows (techniques '4D, 1F1B' in training_runs.yaml) take the "
                         "table's caption, '4D parallelism (FSDP + TP + PP + CP) + torch.compile + Float8 + AsyncTP "
                         "+ 1F1B' (benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd): fp8 GEMMs, compiled, AsyncTP.",
    "torch-compile": "torchtitan rows: torch.compile (named in the row's techniques; the expert rows' "
                     "torchtitan sources all compile) is `Layout.torch_compile` on, which removes the bytes "
                     "eager elementwise kernels move beyond fused ones (`step_time.unfused_elementwise_bytes`); "
                     "without it, off (torchtitan's default, eager).",
    "torchtitan-versions": "torchtitan rows are priced as today's torchtitan runs them (attention core: "
                           "FlashAttention-2, `frameworks.torchtitan.attention_kernel`), except that the 2024-12 rows "
                           "ran torch 1963fc8 / torchtitan 9dec370, whose eager RMSNorm was Python "
                           "(torchtitan/models/norms.py RMSNorm: fp32 upcast, pow, mean, rsqrt, two multiplies: "
                           "32 h bytes per token per norm beyond a fused kernel; today's is nn.RMSNorm, one fused "
                           "kernel): those rows set `Layout.norm_kernel` composite, priced in eager only "
                           "(`step_time.composite_norm_bytes`). Not priced: their AsyncTP gained x1.057 (Table 4) "
                           "where the same job gained x1.164 in benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, "
                           "so AsyncTP 2024-12 rows run slower than predicted.",
    "torchtitan-fp8-tensorwise": "torchtitan fp8 rows ran torchao's tensorwise float8 recipe (`Layout.fp8_recipe` "
                                 "tensorwise): the 2024-12 and 2025-06 benchmarks used the float8 converter without a "
                                 "recipe, which built tensorwise scaling until torchtitan 6348d93d1 (2026-04-27) "
                                 "(`frameworks.torchtitan.TOML_FP8_RECIPE_DEFAULT`); today's default is rowwise.",
    "async-tp": "torchtitan rows with TP: AsyncTP (named in the row's techniques or source) is the TP "
                "communication overlap knob on (`Layout.tp_comm_overlap`); without it, off (torchtitan's "
                "default).",
    "uneven-split": "Where pp (x vpp) does not divide the layers and the row gives no split: vpp 1 -> layers as "
                    "evenly as possible, extra layers to the outer stages (rules.uneven_split); vpp > 1 -> "
                    "Megatron's account-for-embedding/loss split as `planner plan` builds it "
                    "(pipeline_layout.uneven_interleaved), e.g. Llama 3 405B Et|(tt|)*62tL, the paper's 'first "
                    "and last stage one fewer layer'.",
    "fp8-param-gather": "Megatron-Bridge fp8 rows keep the TE linear weights in fp8 and gather them in fp8 "
                        "(`Layout.fp8_param_gather`): perf_recipes/_common.py `_perf_precision` takes "
                        "training/mixed_precision.py's fp8 presets, which set fp8_param_gather = True "
                        "(delayed l. 217-231, mxfp8 l. 255-264, current scaling l. 285-302; "
                        "NVIDIA-NeMo/Megatron-Bridge@067f987); no H100 recipe of these rows switches it "
                        "off (DeepSeek-V3's does only in its blockwise variant, deepseek_v3.py l. 126-131). "
                        "NeMo rows (E9): not verifiable here, left at Megatron-LM's default (off).",
    "expert-configs": "expert_configs rows: the recipe's layout as given, dp = gpus / (tp x pp x cp), "
                      "FlashAttention on, the framework's defaults for everything the row does not give.",
    "nvidia-perf-recipes": "expert_configs rows measured by NVIDIA's performance recipes (Megatron-Bridge, "
                           "NeMo) reduce gradients in bf16: Megatron-Bridge perf_recipes/_common.py "
                           "`_benchmark_common` and `_perf_precision` set grad_reduce_in_fp32 = False "
                           "(NVIDIA-NeMo/Megatron-Bridge@067f987), as NeMo 2.0's performance scripts do for "
                           "fp8 (`recipe.trainer.plugins.grad_reduce_in_fp32 = False`); and they overlap "
                           "communication as a tuned plan does (placement.overlap.tuned: gradient-reduce "
                           "and parameter-gather overlap wherever dp > 1, Megatron-Bridge "
                           "training/comm_overlap.py `_get_optimizer_overlap_cfgs`; TP communication "
                           "overlap with SP, the userbuffers configs of perf_recipes/llama/h100/llama3.py), "
                           "except where the recipe switches one off (RECIPE_OVERRIDES); and they dispatch "
                           "MoE tokens as a tuned plan does (placement.overlap.tuned_dispatcher): the flex "
                           "dispatcher (HybridEP) when the EP group spans nodes, as perf_recipes/qwen/h100/"
                           "qwen3_moe.py l. 90-91 (E13) and recipes/deepseek/h100/deepseek_v3.py l. 160, 256 "
                           "(E10) set, else alltoall.",
}
"""Every assumption made where a row is silent, by key; `Row.assumptions` lists the keys applied."""

TORCHTITAN_2024_12 = "torchtitan-H100-2024-12"
"""training_runs.yaml group of the torchtitan benchmark that ran torch 1963fc8 / torchtitan 9dec370
(benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd, Versions and Dates): its eager RMSNorm is
the composite one (`layout.NORM_KERNELS`)."""
CAPTION_TECHNIQUES = {"4D, 1F1B": "4D + torch.compile + Float8 + AsyncTP, 1F1B"}
"""torchtitan row `techniques` that shorten their table's caption -> the caption's list (ASSUMPTIONS
`torchtitan-table6`)."""

NOT_EXPRESSIBLE = {
    "torchtitan-H100-perf-doc": "torchtitan docs/performance.md (older version) gives no sequence length and names the "
                                "GPU only 'H100 94GB' (neither the variant nor its power limit), so neither the "
                                "layout nor the cluster is known; its three results (bf16, Float8, Float8 + AsyncTP) "
                                "are not compared",
}
"""Groups of training_runs.yaml the tool cannot express, with why (kept in the output)."""

GROUP_SETTINGS: dict[str, dict] = {
    "Narayanan2021-Table1-weak-scaling": dict(
        cluster="dgx-a100-80g", framework="megatron", recompute="full", flash_attention=False,
        convention="hardware_tflops_per_gpu", assumptions=("clusters", "micro-batch-1",
                                                            "a100-full-recompute", "no-flash-attention",
                                                            "deepspeed-grad-accumulation")),
    "Narayanan2021-Table2-PTDP-vs-ZeRO3": dict(
        cluster="dgx-a100-80g", framework="megatron", recompute="full", flash_attention=False,
        convention="hardware_tflops_per_gpu", assumptions=("clusters", "a100-full-recompute",
                                                            "no-flash-attention", "zero3-deepspeed")),
    "Korthikanti2022-Table5": dict(
        cluster="dgx-a100-80g", framework="megatron", flash_attention=False, convention="step_time_s",
        assumptions=("clusters", "no-flash-attention", "korthikanti-two-rows")),
    "Llama3-405B-Table4": dict(
        cluster="dgx-h100", framework="megatron", recompute={8192: "none"}, default_recompute="selective",
        vpp=4, zero_stage=2, waived_rules=("zero_with_pp",),
        sequence_parallel=True, flash_attention=True, rank_order=("tp", "cp", "ep", "pp", "dp"),
        convention="model_tflops_per_gpu", assumptions=("clusters", "llama3")),
    "BLOOM-176B": dict(
        cluster="jean-zay", framework="deepspeed", recompute="full", flash_attention=False,
        pipeline_layers=(5,) + (6,) * 10 + (5,),
        convention="hardware_tflops_per_gpu", assumptions=("clusters", "a100-full-recompute",
                                                            "no-flash-attention", "bloom",
                                                            "deepspeed-grad-accumulation")),
    "MT-NLG-530B": dict(
        cluster="dgx-a100-80g", framework="deepspeed", recompute="full", flash_attention=False,
        convention="hardware_tflops_per_gpu", assumptions=("clusters", "micro-batch-1",
                                                            "a100-full-recompute", "no-flash-attention")),
    "OPT-175B": dict(
        cluster="dgx-a100-80g", framework="megatron", recompute="full", flash_attention=False,
        convention="hardware_tflops_per_gpu", assumptions=("clusters", "micro-batch-1")),
    "torchtitan-H100-2024-12": dict(
        cluster="grand-teton", framework="torchtitan", zero_stage=3, flash_attention=True,
        convention="tokens_per_s_per_gpu", assumptions=("clusters", "torchtitan-fsdp")),
}
"""Per group of training_runs.yaml: cluster, framework, Layout defaults, FlashAttention, rank order,
the published value's convention and the assumption keys. A group not listed is not expressible."""


@dataclass(frozen=True, kw_only=True)
class Row:
    """One comparison: a published number and everything needed to predict it.

    `layout`, `model` and `cluster` are None exactly when `not_expressible` gives the reason."""

    id: str
    """Comparison id: the file row's id, with `/full` or `/sel+sp` (Korthikanti) or `/<opt>` appended
    where one file row yields several comparisons."""
    row_id: str
    """The file row's id (decides the fit/evaluation part)."""
    source: str
    """`training_runs` or `expert_configs` (the data format)."""
    group: str
    part: str
    """`fit` or `evaluation` (`part_of`, then `stratified_parts` for MoE rows)."""
    model_name: str
    model: ModelSpec | None
    cluster: str | None
    """Catalog name or path of the cluster file."""
    gpus: int | None
    layout: Layout | None
    framework: str
    flash_attention: bool
    rank_order: tuple[str, ...] | None
    convention: str
    """One of CONVENTIONS: the unit of `published`."""
    published: float | None
    published_memory_gib: float | None
    """torchtitan `memory/max_reserved(GiB)` where published (memory suite), binary GiB."""
    precision: str
    moe: bool
    assumptions: tuple[str, ...] = ()
    not_expressible: str | None = None

    @property
    def gpu_family(self) -> str:
        """Family of the GPU (GPU_FAMILIES), `unknown` for a row that is not expressible."""
        if self.cluster is None:
            return "unknown"
        name = _cluster(self.cluster, self.gpus).gpu.name
        return next((fam for prefix, fam in GPU_FAMILIES if name.startswith(prefix)), name)


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """What the tool says about a row (through `planner.explain.explain`)."""

    predicted: float | None
    """In the row's convention; None when the row is not expressible or explain gives no time."""
    predicted_memory_gib: float | None
    verdict: str
    """explain's memory verdict (fits | at_risk | does_not_fit | not_costed) or `not_expressible`."""
    error: float | None
    """Throughput error (module docstring), None when there is no prediction."""
    memory_error: float | None
    violations: tuple[str, ...] = field(default=())
    """Rules explain reports as errors (a layout that ran should break none)."""


# ------------------------------------------------------------------------------------------ loading

@lru_cache(maxsize=None)
def _cluster(ref: str, gpus: int | None):
    return load_cluster(ref, gpus=gpus)


_catalog_model = lru_cache(maxsize=None)(load_model)


def load_rows(path: str | Path = TRAINING_RUNS) -> list[Row]:
    """Every comparison of a data file in either format (module docstring).

    Raises:
        SpecError: a missing or unreadable file, YAML syntax, an unknown top-level key, a row that is
            not a mapping or lacks an id, a value of the wrong type (naming file, key and value).
    """
    path = Path(path)
    if path.is_dir():
        raise SpecError("is a directory; give a training_runs or expert_configs YAML file", file=str(path), key="--data")
    if not path.is_file():
        raise SpecError("file not found", file=str(path), key="--data")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise SpecError(f"not readable as YAML{line}; give a training_runs or expert_configs file",
                        file=str(path)) from None
    if not isinstance(doc, dict):
        raise SpecError(f"is not a YAML mapping; allowed: one top-level key, {' or '.join(FORMATS)}", file=str(path))
    keys = list(doc)
    if len(keys) != 1 or keys[0] not in FORMATS:
        raise SpecError(f"top-level key(s) {', '.join(map(str, keys))} not allowed; allowed: exactly one of "
                        f"{', '.join(FORMATS)}", file=str(path), key=str(keys[0]) if keys else None)
    kind = keys[0]
    rows = doc[kind]
    if not isinstance(rows, list) or not rows:
        raise SpecError("must be a non-empty list of rows", file=str(path), key=kind)
    out: list[Row] = []
    seen: set[str] = set()
    for i, raw in enumerate(rows):
        where = f"{kind}[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str) or not raw["id"]:
            raise SpecError("each row must be a mapping with a string `id`", file=str(path), key=where)
        if raw["id"] in seen:
            raise SpecError(f"value {raw['id']!r} given twice; each row needs its own id", file=str(path),
                            key=f"{where}.id")
        seen.add(raw["id"])
        if kind == "expert_configs":
            out.extend(_expert_row(raw, str(path), f"{where}."))
        else:
            out.extend(_training_rows(raw, str(path), f"{kind}[{raw['id']}]."))
    return stratified_parts(out)


def stratified_parts(rows: list[Row]) -> list[Row]:
    """`rows` (one file's) with the MoE stratum rule of the module docstring applied: for each GPU
    family whose expressible MoE rows all hash into FIT (`part_of`), the one of the smallest
    crc32(row_id) -- every comparison of that file row -- moves to the evaluation part. Dense rows
    and families with an evaluation MoE row keep `part_of`."""
    strata: dict[str, set[str]] = {}
    for r in rows:
        if r.moe and r.not_expressible is None:
            strata.setdefault(r.gpu_family, set()).add(r.row_id)
    moved = {min(ids, key=lambda i: zlib.crc32(i.encode())) for ids in strata.values()
             if all(part_of(i) == "fit" for i in ids)}
    return [replace(r, part="evaluation") if r.row_id in moved else r for r in rows]


def part_of(row_id: str) -> str:
    """`evaluation` when crc32(row_id) % 4 == 0, else `fit` (before `stratified_parts`)."""
    return "evaluation" if zlib.crc32(row_id.encode()) % 4 == 0 else "fit"


def _int(raw: dict, key: str, file: str, where: str, default: int | None = None) -> int | None:
    value = raw.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"value {value!r} not allowed; allowed: a positive integer", file=file, key=where + key)
    return value


def _number(raw: dict, key: str, file: str, where: str) -> float | None:
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise SpecError(f"value {value!r} not allowed; allowed: a positive finite number", file=file, key=where + key)
    return float(value)


def _base(raw: dict, source: str, **kw) -> dict:
    return dict(row_id=raw["id"], source=source, part=part_of(raw["id"]), **kw)


def _not_expressible(raw: dict, reason: str, *, model_name: str = "", precision: str = "bf16",
                     convention: str = "tokens_per_s_per_gpu", published: float | None = None,
                     memory: float | None = None, suffix: str = "", source: str = "training_runs") -> Row:
    return Row(id=raw["id"] + suffix, **_base(raw, source), group=raw.get("group", source),
               model_name=model_name or str(raw.get("model", "")), model=None, cluster=None,
               gpus=raw.get("gpus") if isinstance(raw.get("gpus"), int) else None, layout=None,
               framework=str(raw.get("framework", "")), flash_attention=True, rank_order=None,
               convention=convention, published=published, published_memory_gib=memory,
               precision=precision, moe=False, not_expressible=reason)


# ---------------------------------------------------------------- expert_configs

EXPERT_REQUIRED = ("model", "cluster", "gpus", "seq_len", "global_batch_seqs", "precision", "layout",
                   "measured_tokens_per_s_per_gpu", "framework")
LAYOUT_KEYS = ("tp", "pp", "vpp", "cp", "ep", "micro_batch_size", "zero_stage", "sequence_parallel", "recompute")


def _expert_row(raw: dict, file: str, where: str) -> list[Row]:
    for key in EXPERT_REQUIRED:
        if key not in raw:
            raise SpecError("missing value", file=file, key=where + key)
    lay = raw["layout"]
    if not isinstance(lay, dict):
        raise SpecError(f"value {lay!r} not allowed; allowed: a mapping of {', '.join(LAYOUT_KEYS)}",
                        file=file, key=where + "layout")
    unknown = sorted(set(lay) - set(LAYOUT_KEYS))
    if unknown:
        raise SpecError(f"key {unknown[0]!r} not allowed; allowed: {', '.join(LAYOUT_KEYS)}",
                        file=file, key=f"{where}layout.{unknown[0]}")
    gpus = _int(raw, "gpus", file, where)
    seq, batch = _int(raw, "seq_len", file, where), _int(raw, "global_batch_seqs", file, where)
    published = _number(raw, "measured_tokens_per_s_per_gpu", file, where)
    cluster = CLUSTER_NAMES.get(raw["cluster"], raw["cluster"])
    model = _load(_catalog_model, raw["model"], file, where + "model")
    spec = _load(_cluster, cluster, file, where + "cluster", gpus)
    degrees = {k: _int(lay, k, file, f"{where}layout.", 1) for k in ("tp", "pp", "vpp", "cp", "ep", "micro_batch_size")}
    if gpus % (degrees["tp"] * degrees["pp"] * degrees["cp"]):
        raise SpecError(f"value {gpus} not allowed; allowed: a multiple of tp x pp x cp = "
                        f"{degrees['tp'] * degrees['pp'] * degrees['cp']}", file=file, key=where + "gpus")
    layout = _layout(file, where, nested=True, dp=gpus // (degrees["tp"] * degrees["pp"] * degrees["cp"]), **degrees,
                     zero_stage=lay.get("zero_stage", 0), sequence_parallel=bool(lay.get("sequence_parallel", False)),
                     recompute=lay.get("recompute", "none"), seq_len=seq, global_batch_size=batch,
                     precision=raw["precision"], framework=raw["framework"])
    assumptions = ["expert-configs"]
    if raw["framework"] == "megatron" and any(w in str(raw.get("source", "")) for w in NVIDIA_RECIPES):
        bridge_fp8 = raw["precision"] == "fp8" and "Megatron-Bridge" in str(raw.get("source", ""))
        layout = overlap.tuned(layout.replace(**{"grad_reduce_dtype": "bf16",
                                                 **({"fp8_param_gather": True} if bridge_fp8 else {}),
                                                 **RECIPE_OVERRIDES.get(raw["id"], {})}))
        layout = overlap.tuned_dispatcher(layout, ep_gpus_per_domain(layout, spec.scaleup_domain_gpus))
        assumptions += ["nvidia-perf-recipes"] + (["fp8-param-gather"] if bridge_fp8 else [])
    if raw["framework"] == "torchtitan":  # both rows (2024-12, 2025-06) predate the chunked loss: 1,
        # and the fused wqkv (pytorch/torchtitan 3396a4b, 2026-06-24; `Layout.fused_qkv`)
        layout = _torchtitan_fp8(layout.replace(torch_compile=True, loss_chunks=1, fused_qkv=False), assumptions)
        assumptions += ["torch-compile"]
        if degrees["tp"] > 1:
            layout = layout.replace(tp_comm_overlap="AsyncTP" in str(raw.get("source", "")))
            assumptions.append("async-tp")
    layout, assumptions = _split(model, layout, tuple(assumptions))
    return [Row(id=raw["id"], **_base(raw, "expert_configs"), group="expert_configs", model_name=raw["model"],
                model=model, cluster=cluster, gpus=gpus, layout=layout, framework=raw["framework"],
                flash_attention=True, rank_order=None, convention="tokens_per_s_per_gpu", published=published,
                published_memory_gib=None, precision=layout.precision, moe=model.is_moe,
                assumptions=tuple(assumptions))]


NVIDIA_RECIPES = ("Megatron-Bridge", "NeMo", "nemo-framework")
"""Words of an expert row's `source:` that name NVIDIA's performance recipes (ASSUMPTIONS
`nvidia-perf-recipes`)."""

RECIPE_OVERRIDES = {"E10": {"overlap_grad_reduce": False, "overlap_param_gather": False,
                            "fp8_recipe": "tensorwise", "precision_aware_optimizer": True,
                            "main_grads_dtype": "bf16", "exp_avg_dtype": "bf16",
                            "exp_avg_sq_dtype": "bf16", "recompute_modules": ("mla_up_proj", "mlp"),
                            "pipeline_layout": ("Et",) + ("tt",) * 30 + ("mL",)}}
"""Expert rows whose recipe sets knobs the others leave at their defaults: DeepSeek-V3 on H100
(Megatron-Bridge src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py @067f987):
- l. 94-95 (`deepseek_v3_pretrain_1024gpu_h100_fp8cs_config`) `cfg.ddp.overlap_grad_reduce =
  False`; Megatron-LM asserts the parameter-gather overlap only with the gradient-reduce overlap,
  so both are off;
- l. 80 `_perf_precision("fp8_cs")`: fp8 current scaling, `fp8_recipe = "tensorwise"`
  (training/mixed_precision.py `bf16_with_fp8_current_scaling_mixed`); the 25.09 row's 1297
  tokens/s is that recipe's (performance-summary-archive: the blockwise 128x128 variant is the
  number in parentheses);
- l. 79 `deepseek_v3_pretrain_config()`, i.e. recipes/deepseek/h100/deepseek_v3.py
  `deepseek_v3_pretrain_1024gpu_h100_bf16_config` l. 221-225 (re-exported by
  recipes/deepseek/deepseek_v3.py): the precision-aware optimizer with fp32 main params, bf16 main
  grads and bf16 exp_avg / exp_avg_sq, which the perf recipe does not change;
- l. 92 `cfg.model.recompute_modules = ["mla_up_proj", "mlp"]` with perf_recipes/deepseek/common.py
  l. 35 `recompute_granularity = "selective"` (`_deepseek_v3_common`): selective recompute of the
  MLA up projections and the dense MLPs (the row's `recompute: selective`);
- l. 97 `set_deepseek_v3_pipeline_model_parallel_layout(cfg.model, "Et|(tt|)*30mL")`: the
  embedding with one decoder layer, 30 chunks of two, the MTP layer `m` with the loss, which the
  row trains (recipes/deepseek/h100/deepseek_v3.py l. 136-138 mtp_num_layers 1; `placement.mtp`)."""

ROW_LEVEL_KEYS = ("precision", "framework", "seq_len", "global_batch_size")
"""Layout fields an expert_configs row gives outside `layout:` (training_runs rows: all of them)."""


def _layout(file: str, where: str, *, nested: bool = False, **fields) -> Layout:
    """Layout(**fields), its SpecError re-raised naming the data file and the row's key (`nested`:
    the row gives its degrees under `layout:`, as expert_configs does; else the Layout field name)."""
    try:
        return Layout(**fields)
    except SpecError as exc:
        key = f"layout.{exc.key}" if nested and exc.key not in ROW_LEVEL_KEYS else exc.key
        raise SpecError(exc.message, file=file, key=where + key) from None


def _split(model: ModelSpec, layout: Layout, assumptions: tuple[str, ...]) -> tuple[Layout, tuple[str, ...]]:
    """The layout with an uneven split where pp x vpp does not divide the layers (ASSUMPTIONS
    `uneven-split`), and the assumption keys with it; unchanged otherwise."""
    n = model.num_hidden_layers
    if layout.pipeline_layers or layout.pipeline_layout or n % (layout.pp * layout.vpp) == 0:
        return layout, assumptions
    from planner.placement import pipeline_layout
    from planner.placement.rules import uneven_split

    if layout.vpp == 1:
        layout = layout.replace(pipeline_layers=tuple(uneven_split(n, layout.pp)))
    else:
        stages = pipeline_layout.uneven_interleaved(n, layout.pp, layout.vpp)
        if stages is None:
            return layout, assumptions
        layout = layout.replace(pipeline_layout=stages)
    return layout, (*assumptions, "uneven-split")


def _load(loader, ref, file: str, key: str, *args):
    if not isinstance(ref, str) or not ref:
        raise SpecError(f"value {ref!r} not allowed; allowed: a catalog name or file", file=file, key=key)
    try:
        return loader(ref, *args)
    except SpecError as exc:
        raise SpecError(f"value {ref!r}: {exc.message}", file=file, key=key) from None


# ---------------------------------------------------------------- training_runs

def _gpt(row: dict, dims: dict, vocab: int) -> ModelSpec:
    h = dims["hidden_size"]
    cfg = dict(model_type="gpt", hidden_size=h, num_attention_heads=dims["num_attention_heads"],
               num_hidden_layers=dims.get("num_hidden_layers") or dims["num_layers"],
               vocab_size=vocab, intermediate_size=4 * h,
               max_position_embeddings=row["seq_len"], tie_word_embeddings=True)
    return from_config(cfg, name=str(row.get("model", row["id"])))


def _model(row: dict) -> ModelSpec | None:
    if "hidden_size" in row:
        return _gpt(row, row, row.get("vocab_size", KORTHIKANTI_VOCAB))
    named = NAMED_MODELS.get(row.get("model"))
    if named is None:
        return None
    return _catalog_model(named) if isinstance(named, str) else _gpt(row, named, named["vocab_size"])


def _precision(row: dict) -> str:
    text = str(row.get("precision", "")) + " " + str(row.get("techniques", ""))
    if "Float8" in text or "fp8" in text:
        return "fp8"
    return "fp16" if text.startswith("fp16 mixed") else "bf16"


def _training_rows(raw: dict, file: str, where: str) -> list[Row]:
    settings = GROUP_SETTINGS.get(raw.get("group"))
    if raw.get("group") in NOT_EXPRESSIBLE:
        return [_not_expressible(raw, NOT_EXPRESSIBLE[raw["group"]])]
    if settings is None:
        return [_not_expressible(raw, f"group {raw.get('group')!r} has no mapping to a layout "
                                      f"(GROUP_SETTINGS); hardware {raw.get('hardware', '?')!r}",
                                 published=raw.get("tokens_per_s_per_gpu"))]
    if "parallelism" in raw:
        return _torchtitan_rows(raw, settings, file, where)
    for key in ("tp", "pp", "dp", "cp", "micro_batch", "global_batch_seqs", "batch_seqs_per_dp", "seq_len", "gpus"):
        _int(raw, key, file, where)
    for key in ("achieved_tflops_per_gpu", "iteration_time_s_full_recompute", "iteration_time_s_selective_plus_sp"):
        _number(raw, key, file, where)
    convention = settings["convention"]
    if "tp" not in raw or "dp" not in raw or "seq_len" not in raw:
        return [_not_expressible(raw, "no tp, dp or seq_len in the row", convention=convention)]
    model = _model(raw)
    if model is None:
        return [_not_expressible(raw, f"model dimensions unknown ({raw.get('model')})", convention=convention)]
    dp, mb = raw["dp"], raw.get("micro_batch", 1)
    batch = raw.get("global_batch_seqs") or raw.get("batch_seqs_per_dp", 0) * dp
    if not batch or batch % (dp * mb):
        return [_not_expressible(raw, f"global batch {batch} is not a multiple of dp x micro-batch = {dp * mb}",
                                 model_name=model.name, convention=convention)]
    common = dict(dp=dp, tp=raw["tp"], pp=raw.get("pp", 1), cp=raw.get("cp", 1), seq_len=raw["seq_len"],
                  global_batch_size=batch, micro_batch_size=mb, precision=_precision(raw),
                  zero_stage=raw.get("zero_stage", settings.get("zero_stage", 0)),
                  vpp=settings.get("vpp", 1), sequence_parallel=settings.get("sequence_parallel", False),
                  pipeline_layers=settings.get("pipeline_layers"))
    framework = "deepspeed" if common["zero_stage"] == 3 else settings["framework"]
    rows = []
    for suffix, recompute, published, extra in _variants(raw, settings, model, batch):
        if published is None:
            rows.append(_not_expressible(raw, "no published TFLOP/s, MFU or iteration time",
                                         model_name=model.name, convention=convention, suffix=suffix))
            continue
        layout, assumptions = _split(model, _layout(file, where, **common | extra, recompute=recompute,
                                                    framework=framework), settings["assumptions"])
        rows.append(Row(id=raw["id"] + suffix, **_base(raw, "training_runs"), group=raw["group"],
                        model_name=model.name, model=model, cluster=settings["cluster"], gpus=layout.world_size,
                        layout=layout, framework=framework, flash_attention=settings["flash_attention"],
                        rank_order=settings.get("rank_order"), convention=convention, published=published,
                        published_memory_gib=None, precision=layout.precision, moe=model.is_moe,
                        assumptions=assumptions))
    return rows


def _variants(raw: dict, settings: dict, model: ModelSpec, batch: int) -> list[tuple[str, str, float | None, dict]]:
    """(id suffix, recompute, published value, Layout overrides) of each comparison a row yields."""
    if raw["group"].startswith("Korthikanti"):
        vpp = raw.get("pipeline_interleave_stages_in_calculon_config", 1)
        return [("/full", "full", raw.get("iteration_time_s_full_recompute"), dict(vpp=vpp)),
                ("/sel+sp", "selective", raw.get("iteration_time_s_selective_plus_sp"),
                 dict(vpp=vpp, sequence_parallel=True))]
    recompute = settings["recompute"]
    if isinstance(recompute, dict):
        recompute = recompute.get(raw["seq_len"], settings["default_recompute"])
    return [("", recompute, raw.get("achieved_tflops_per_gpu"), {})]


def _degree(text: str, axis: str) -> int:
    match = re.search(rf"{axis} (\d+)", text)
    return int(match.group(1)) if match else 1


def _torchtitan_fp8(layout: Layout, assumptions: list[str]) -> Layout:
    """A torchtitan fp8 row's layout with the float8 recipe it ran: tensorwise (ASSUMPTIONS
    `torchtitan-fp8-tensorwise`, appended); other layouts unchanged."""
    if layout.precision != "fp8":
        return layout
    assumptions.append("torchtitan-fp8-tensorwise")
    return layout.replace(fp8_recipe=TORCHTITAN_TOML_FP8_RECIPE)


def _torchtitan_rows(raw: dict, settings: dict, file: str, where: str) -> list[Row]:
    """torchtitan benchmark rows: `parallelism` 'FSDP 8, TP 8, PP 8, CP 1', `techniques`, local batch."""
    text = raw["parallelism"]
    memory, published = (_number(raw, k, file, where) for k in ("peak_memory_gib", "tokens_per_s_per_gpu"))
    model = _model(raw)
    if not re.fullmatch(r"(FSDP|TP|PP|CP) \d+(, (FSDP|TP|PP|CP) \d+)*", str(text)):
        return [_not_expressible(raw, f"parallelism {text!r} is not 'FSDP n[, TP n][, PP n][, CP n]'",
                                 published=published, memory=memory)]
    if model is None or "seq_len" not in raw or "local_batch" not in raw or published is None:
        return [_not_expressible(raw, "model, seq_len, local batch or tokens/s missing", published=published,
                                 memory=memory)]
    _int(raw, "local_batch", file, where), _int(raw, "seq_len", file, where)
    fsdp, tp, pp, cp = (_degree(text, a) for a in ("FSDP", "TP", "PP", "CP"))
    techniques = str(raw.get("techniques", ""))
    assumptions = list(settings["assumptions"])
    if techniques in CAPTION_TECHNIQUES:
        techniques = CAPTION_TECHNIQUES[techniques]
        assumptions.append("torchtitan-table6")
    local = raw["local_batch"]
    # loss_chunks=1, fused_qkv=False: the benchmark's torchtitan (Dec 2024) ran the plain cross-entropy
    # and separate wq, wk, wv (the chunked loss of `precision.LOSS_CHUNKS` and the fused wqkv,
    # pytorch/torchtitan 3396a4b, arrived in 2026)
    layout = _layout(file, where, dp=fsdp, tp=tp, pp=pp, cp=cp, zero_stage=3, framework="torchtitan",
                     loss_chunks=1, fused_qkv=False, sequence_parallel=tp > 1, micro_batch_size=local,
                     global_batch_size=raw.get("global_batch_seqs", fsdp * local), seq_len=raw["seq_len"],
                     recompute=raw.get("activation_checkpointing", "none"),
                     precision=_precision({"techniques": techniques}))
    if pp > 1:
        from planner.placement.rules import uneven_split
        vpp = 2 if "Interleaved" in techniques else 1
        n = model.num_hidden_layers
        split = tuple(2 * c for c in uneven_split(n // 2, pp)) if vpp == 2 else tuple(uneven_split(n, pp))
        layout = layout.replace(pp=pp, vpp=vpp, pipeline_layers=split, micro_batch_size=local // pp)
    if "UNVERIFIED" in str(raw.get("notes", "")):
        assumptions.append("torchtitan-seq-len")
    layout = layout.replace(torch_compile="compile" in techniques,
                            norm_kernel="composite" if raw["group"] == TORCHTITAN_2024_12 else None)
    assumptions += ["torch-compile", "torchtitan-versions"]
    layout = _torchtitan_fp8(layout, assumptions)
    if tp > 1:
        layout = layout.replace(tp_comm_overlap="AsyncTP" in techniques)
        assumptions.append("async-tp")
    return [Row(id=raw["id"], **_base(raw, "training_runs"), group=raw["group"], model_name=model.name,
                model=model, cluster=settings["cluster"], gpus=layout.world_size, layout=layout,
                framework="torchtitan", flash_attention=True, rank_order=None, convention=settings["convention"],
                published=float(published), published_memory_gib=memory, precision=layout.precision,
                moe=model.is_moe, assumptions=tuple(assumptions))]


# ---------------------------------------------------------------- prediction

def predict(row: Row) -> Prediction:
    """The row's prediction through `planner.explain.explain` (the code path of `planner explain`).

    `predicted` is in the row's convention: tokens/s per GPU = explain's tokens/s / world size;
    model or hardware TFLOP/s per GPU; step time in s. A run the memory model rejects is still timed
    (its verdict says does_not_fit); None when the row is not expressible or breaks a composition rule."""
    if row.not_expressible:
        return Prediction(predicted=None, predicted_memory_gib=None, verdict="not_expressible", error=None,
                          memory_error=None)
    from planner.explain import explain

    data = explain(row.model, _cluster(row.cluster, row.gpus), row.layout, flash_attention=row.flash_attention,
                   rank_order=row.rank_order, time_despite_memory=True,
                   waived_rules=GROUP_SETTINGS.get(row.group, {}).get("waived_rules", ()))
    t = data["time_s"]
    predicted = None if t is None else {
        "tokens_per_s_per_gpu": lambda: t["tokens_per_s"] / row.layout.world_size,
        "model_tflops_per_gpu": lambda: t["tflops_per_gpu"],
        "hardware_tflops_per_gpu": lambda: t["hardware_tflops_per_gpu"],
        "step_time_s": lambda: t["step"],
    }[row.convention]()
    mem = data["memory_bytes"]
    mem_gib = None if mem is None else mem["total"] / GIB
    return Prediction(
        predicted=predicted, predicted_memory_gib=mem_gib, verdict=data["memory_verdict"],
        error=None if predicted is None else throughput_error(predicted, row.published, row.convention),
        memory_error=None if mem_gib is None or row.published_memory_gib is None
        else mem_gib / row.published_memory_gib - 1,
        violations=tuple(v["rule"] for v in data["violations"] if v["severity"] == "error"))


def throughput_error(predicted: float, published: float, convention: str) -> float:
    """predicted / published - 1 for throughputs; published / predicted - 1 for a step time (both:
    positive = the tool predicts more throughput than was measured)."""
    return published / predicted - 1 if convention == "step_time_s" else predicted / published - 1


# ---------------------------------------------------------------- statistics

def error_stats(errors: list[float]) -> dict:
    """Statistics of signed relative errors (fractions, 0.1 = 10 %).

    Returns:
        {n, median_abs_error, mean_abs_error, max_abs_error, within_10 (count |e| <= 0.10),
        within_25 (count |e| <= 0.25), bias (mean signed error)}; the error fields are None when n = 0.
    """
    if not errors:
        return {"n": 0, "median_abs_error": None, "mean_abs_error": None, "max_abs_error": None,
                "within_10": 0, "within_25": 0, "bias": None}
    absolute = [abs(e) for e in errors]
    return {"n": len(errors), "median_abs_error": statistics.median(absolute),
            "mean_abs_error": statistics.fmean(absolute), "max_abs_error": max(absolute),
            "within_10": sum(a <= 0.10 for a in absolute), "within_25": sum(a <= 0.25 for a in absolute),
            "bias": statistics.fmean(errors)}


GROUP_KEYS = ("gpu_family", "model_class", "precision", "gpu_family x precision")
"""How `summarize` groups the rows (issue 9: per GPU family, dense/MoE and precision; the bias bar
is per GPU family x precision)."""


def summarize(rows: list[dict]) -> tuple[dict, dict]:
    """(summary, by) of result rows (`validate`'s): error statistics of the rows with an error,
    plus `does_not_fit` (rows the memory model rejects, though they ran) and `not_expressible`
    counts; `by` the same per GROUP_KEYS value."""
    def one(part: list[dict]) -> dict:
        return error_stats([r["error"] for r in part if r["error"] is not None]) | {
            "rows": len(part), "does_not_fit": sum(r["verdict"] == "does_not_fit" for r in part),
            "not_expressible": sum(r["not_expressible"] is not None for r in part)}

    by = {}
    for key in GROUP_KEYS:
        values = sorted({_group_value(r, key) for r in rows if r["not_expressible"] is None})
        by[key] = {v: one([r for r in rows if r["not_expressible"] is None and _group_value(r, key) == v])
                   for v in values}
    return one(rows), by


def _group_value(row: dict, key: str) -> str:
    if key == "gpu_family x precision":
        return f"{row['gpu_family']} {row['precision']}"
    return row[key]


PRECISION_GROUPS = {"bf16": "bf16/fp16", "fp16": "bf16/fp16", "fp8": "fp8"}
"""Precision label of the statistics: the 16-bit formats run at one tensor-core peak."""


def _result_row(row: Row, pred: Prediction, suite: str) -> dict:
    lay = row.layout
    memory = suite == "memory"
    return {
        "id": row.id, "source": row.source, "group": row.group, "part": row.part, "model": row.model_name,
        "cluster": row.cluster, "gpus": row.gpus, "gpu_family": row.gpu_family,
        "model_class": "moe" if row.moe else "dense", "precision": PRECISION_GROUPS[row.precision],
        "framework": row.framework, "flash_attention": row.flash_attention,
        "layout": None if lay is None else layout_text(lay),
        "convention": "peak_memory_gib" if memory else row.convention,
        "published": row.published_memory_gib if memory else row.published,
        "predicted": pred.predicted_memory_gib if memory else pred.predicted,
        "error": pred.memory_error if memory else pred.error,
        "verdict": pred.verdict, "violations": list(pred.violations),
        "assumptions": list(row.assumptions), "not_expressible": row.not_expressible,
    }


def layout_text(lay: Layout) -> str:
    """One-line layout: degrees, batch, sequence, ZeRO, recompute, precision, framework, split."""
    text = (f"tp{lay.tp} pp{lay.pp} dp{lay.dp} cp{lay.cp} ep{lay.ep} vpp{lay.vpp} b{lay.micro_batch_size} "
            f"B{lay.global_batch_size} s{lay.seq_len} z{lay.zero_stage} rc={lay.recompute}"
            + (f"({','.join(lay.recompute_modules)})" if lay.recompute_modules else "") + f" {lay.precision} "
            f"{lay.framework}" + (" sp" if lay.sequence_parallel else ""))
    if lay.pipeline_layout is not None:
        from planner.placement import pipeline_layout
        return f"{text} {pipeline_layout.to_string(lay.pipeline_layout)}"
    if lay.pipeline_layers is not None:
        return f"{text} layers {'/'.join(map(str, lay.pipeline_layers))}"
    return text


def validate(rows: list[Row], *, suite: str = "training", part: str = "all") -> dict:
    """Predicted vs published per row and the statistics of `summarize`.

    Args:
        suite: `training` (throughput, every row), `memory` (peak memory, rows that publish it) or
            `all` (both; the result then holds one such result per suite under `suites`).
        part: `all`, `fit` or `evaluation`.
    Returns:
        {suite, part, rows: [{id, ..., published, predicted, error, verdict, not_expressible}],
        summary: {n, median_abs_error, mean_abs_error, max_abs_error, within_10, within_25, bias,
        rows, does_not_fit, not_expressible}, by: {group key: {value: summary}},
        assumptions: {key: text} of the keys the rows use}; errors are fractions.
    Raises:
        SpecError: an unknown suite or part.
    """
    if suite not in (*SUITES, "all"):
        raise SpecError(f"value {suite!r} not allowed; allowed: {', '.join(SUITES)}, all", key="--suite")
    if part not in ("all", "fit", "evaluation"):
        raise SpecError(f"value {part!r} not allowed; allowed: all, fit, evaluation", key="--part")
    chosen = [r for r in rows if part == "all" or r.part == part]
    predictions = {r.id: predict(r) for r in chosen}
    if suite == "all":
        return {"suite": "all", "part": part,
                "suites": {s: _suite(chosen, predictions, s, part) for s in SUITES}}
    return _suite(chosen, predictions, suite, part)


def _suite(rows: list[Row], predictions: dict[str, Prediction], suite: str, part: str) -> dict:
    if suite == "memory":
        rows = [r for r in rows if r.published_memory_gib is not None]
    out = [_result_row(r, predictions[r.id], suite) for r in rows]
    summary, by = summarize(out)
    used = sorted({a for r in rows for a in r.assumptions}, key=list(ASSUMPTIONS).index)
    return {"suite": suite, "part": part, "rows": out, "summary": summary, "by": by,
            "assumptions": {a: ASSUMPTIONS[a] for a in used}}


def default_rows() -> list[Row]:
    """The rows of both shipped reference files (training_runs.yaml, then expert_configs.yaml)."""
    return load_rows(TRAINING_RUNS) + load_rows(EXPERT_CONFIGS)


DOC = ROOT / "docs" / "validation.md"


def doc_text() -> str:
    """docs/validation.md as `make validate` writes it (report.training_validation_markdown)."""
    from planner import report

    rows = default_rows()
    return report.training_validation_markdown(validate(rows, suite="all"),
                                               validate(rows, suite="all", part="evaluation"))


if __name__ == "__main__":
    import sys

    if "--write" in sys.argv:
        DOC.write_text(doc_text(), encoding="utf-8")
