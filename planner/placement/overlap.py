"""Which communication a layout overlaps with compute: its overlap knobs (`Layout.tp_comm_overlap`,
`overlap_grad_reduce`, `overlap_param_gather`, `ep_comm_overlap`), each taken from the layout or,
where it says None, from its framework's default (`frameworks.<framework>.overlap_defaults`).

The cost model reads only the resolved values (`resolve`): `cost.comm` gives the data-parallel
collectives the phase their overlap puts them in, `cost.step_time` hides TP/SP and EP traffic
under the compute it overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import SpecError
from planner.frameworks import BY_NAME, deepep
from planner.frameworks.megatron import DEVICE_MAX_CONNECTIONS
from planner.placement.layout import OVERLAP_KNOBS, Layout
from planner.placement.precision import blackwell_or_later


NAMES = {"tp-comm": "tp_comm_overlap", "grad-reduce": "overlap_grad_reduce",
         "param-gather": "overlap_param_gather", "ep-a2a": "ep_comm_overlap"}
"""Short name (`planner explain --overlap NAME=on|off`, a plan's summary line) -> overlap knob."""


def parse(items: list[str] | None) -> dict[str, bool]:
    """{knob: on} of `--overlap NAME=on|off` options (NAMES); a name repeated with the same value
    counts once.

    Raises:
        SpecError: an item that is not NAME=on|off with a name of NAMES, or one name given both on
            and off (key --overlap)."""
    out = {}
    for item in items or ():
        name, _, value = item.partition("=")
        if name not in NAMES or value not in ("on", "off"):
            raise SpecError(f"value {item!r} must be NAME=on or NAME=off with NAME one of "
                            f"{', '.join(NAMES)}", key="--overlap")
        if out.setdefault(NAMES[name], value == "on") != (value == "on"):
            raise SpecError(f"{name}=on and {name}=off both given; give one", key="--overlap")
    return out


@dataclass(frozen=True)
class Overlaps:
    """The resolved overlap knobs of one layout (True: overlapped)."""

    tp_comm_overlap: bool
    """TP/SP all-gathers / reduce-scatters pipelined with the neighbouring linear GEMMs."""
    overlap_grad_reduce: bool
    """Gradient reduction bucket by bucket during backward."""
    overlap_param_gather: bool
    """Parameter all-gathers ahead of their use in forward (prefetch)."""
    ep_comm_overlap: bool
    """Dispatch / combine all-to-alls under another micro-batch's compute."""


ACTS_ON = {"tp-comm": ("tp",), "grad-reduce": ("dp", "cp"), "param-gather": ("dp", "cp"), "ep-a2a": ("ep",)}
"""Short name -> the degrees whose product must exceed 1 for the overlap to have traffic to hide: TP/SP
collectives need tp > 1, the gradient reduce-scatter / all-reduce and the parameter all-gather run over the
data-parallel group with context parallelism folded in (Megatron-LM `parallel_state`
get_data_parallel_group(with_context_parallel=True); torchtitan's FSDP mesh dp_shard_cp), the expert
all-to-alls need ep > 1."""


def names_on(given: dict[str, bool | None], framework: str | None, zero_stage: int,
             degrees: dict[str, int] | None = None) -> list[str]:
    """The short names (`NAMES`) of the overlaps on, each knob of `given` ({knob: on}, as a plan
    file writes them, or resolved, as `check` reports them) as given, absent or None replaced by
    `framework`'s default at `zero_stage` as `resolve` replaces it (no framework: as given): the
    one label `plan`, `explain` and `check` print, so the same layout reads the same in each
    (review-fresh11 #8: a torchtitan plan said `overlap tp-comm`, `check` of its emitted launch
    `overlap tp-comm,grad-reduce,param-gather`, FSDP2's default prefetch and reduce-scatter). With
    `degrees` ({axis: degree}), only the overlaps that act (`ACTS_ON`): no grad-reduce at dp = cp = 1
    (review-fresh12 #5)."""
    defaults = BY_NAME[framework].overlap_defaults(zero_stage) if framework in BY_NAME else {}
    return [name for name, knob in NAMES.items()
            if (defaults.get(knob) if given.get(knob) is None else given[knob])
            and (degrees is None or _product(degrees, ACTS_ON[name]) > 1)]


def _product(degrees: dict[str, int], axes: tuple[str, ...]) -> int:
    out = 1
    for axis in axes:
        out *= degrees.get(axis, 1) or 1
    return out


def resolve(layout: Layout) -> Overlaps:
    """The `Overlaps` of `layout`: each knob as given, None replaced by the framework's default for
    the layout's ZeRO stage."""
    key = (layout.framework, layout.zero_stage) + tuple(getattr(layout, k) for k in OVERLAP_KNOBS)
    hit = _RESOLVED.get(key)
    if hit is None:
        defaults = BY_NAME[layout.framework].overlap_defaults(layout.zero_stage)
        hit = _RESOLVED[key] = Overlaps(**{
            k: defaults[k] if v is None else v for k, v in zip(OVERLAP_KNOBS, key[2:])})
    return hit


_RESOLVED: dict[tuple, Overlaps] = {}
"""Cache of `resolve` (a handful of distinct keys)."""


def tuned(layout: Layout) -> Layout:
    """`layout` with the overlaps a tuned recipe switches on, where its framework can switch them
    (`overlap_switches`): TP comm overlap where tp > 1 with SP (which it needs), gradient-reduce
    and parameter-gather overlap -- the three switches of Megatron-LM's own release run
    (NVIDIA/Megatron-LM@d98e8a6
    tests/functional_tests/test_cases/gpt/gpt3_15b_8t_release_gb200/model_config.yaml l. 15-24:
    TP 4 with SP and all three switched on, `frameworks.megatron` FLAG). Knobs the layout
    sets (not None) are kept. EP all-to-all overlap stays as given here: Megatron asserts it off
    with full recompute, which a plan may mix in per layer, so `plan._with_ep_overlap` searches it
    beside the recompute modes (the placement rule `rules.ep_comm_overlap_violations`). torchtitan's torch.compile is switched on
    too (`Layout.torch_compile`): every tuned run of torchtitan's benchmarks compiles
    (pytorch/torchtitan@b5bcd76 benchmarks/llama3_h100_202412_torchtitan.md Tables 1-6), and its
    AsyncTP needs it."""
    wanted = ("tp_comm_overlap",) * (layout.tp > 1 and bool(layout.sequence_parallel)) + (
        "overlap_grad_reduce", "overlap_param_gather")
    changes = {k: True for k in wanted if getattr(layout, k) is None
               and k in BY_NAME[layout.framework].overlap_switches(layout.zero_stage)}
    if layout.framework == "torchtitan" and layout.torch_compile is None:
        changes["torch_compile"] = True
    return layout.replace(**changes) if changes else layout


def tuned_dispatcher(layout: Layout, ep_gpus_per_domain: int, flex_backend: str | None = None) -> Layout:
    """`layout` with the MoE token dispatcher a tuned recipe picks, where the layout leaves it to
    the framework (None), ep > 1 and the framework can be set (`MOE_DISPATCHERS`): flex (DeepEP /
    HybridEP) when the EP group spans scale-up domains (`ep_gpus_per_domain` < ep), as NVIDIA's
    recipes for EP across nodes do (NVIDIA-NeMo/Megatron-Bridge@067f987 perf_recipes/qwen/h100/
    qwen3_moe.py l. 90-91, EP 16 on 2 DGX H100; recipes/deepseek/h100/deepseek_v3.py l. 160, 256
    via training/flex_dispatcher_backend.py, EP 64), else alltoall (one node: the all-to-all over
    NVLink, as written explicitly by `planner plan --emit`). With `flex_backend` deepep (the cluster's,
    `frameworks.megatron.flex_backend`) flex is chosen only where DeepEP's normal-mode kernels run over the
    expert tp x ep group (Megatron's DeepEP buffer group, token_dispatcher.py tp_ep_group;
    `frameworks.deepep.normal_mode_problem`), else alltoall, which runs at any size."""
    if (layout.moe_dispatcher is not None or layout.ep <= 1
            or "flex" not in BY_NAME[layout.framework].MOE_DISPATCHERS):
        return layout
    flex = layout.ep > ep_gpus_per_domain and not deepep_blocked(layout.replace(moe_dispatcher="flex"), flex_backend)
    return layout.replace(moe_dispatcher="flex" if flex else "alltoall")


def deepep_blocked(layout: Layout, flex_backend: str | None) -> str | None:
    """Why `layout`'s flex dispatcher cannot run with `flex_backend` deepep: DeepEP's normal-mode kernels over
    Megatron-LM's expert tp x ep group (`frameworks.deepep.normal_mode_problem`); None otherwise (another
    dispatcher or backend)."""
    if layout.moe_dispatcher != "flex" or flex_backend != "deepep":
        return None
    return deepep.normal_mode_problem(layout.etp * layout.ep, "megatron")


# ---------------------------------------------------------------- SMs communication takes from compute


NCCL_CHANNEL_SMS = 16
"""SMs one overlapped NCCL collective holds on a multi-node DGX (8 GPUs, 8 NICs): NCCL launches
one CTA per channel (NVIDIA/nccl@5067397 src/enqueue.cc l. 1758 `dim3 grid = {nChannels, 1, 1}`),
and each CTA holds its SM for the whole kernel, waiting on the network included. The ring search
finds one channel per NIC (8; `ncclTopoCompute` in src/graph/search.cc, maxChannels MAXCHANNELS/2
from src/init.cc l. 1177), not duplicated at the A100 / H100 inter-node speeds (`ncclTopoDupChannels`,
search.cc l. 1036-1048: bwIntra < 25 GB/s, or sm80+ with < 50 GB/s and > 4 channels), then doubled
once when rings are connected (src/graph/connect.cc l. 460 `nChannels * 2`): 16; the sm90 rule
that doubles again applies only below 16 (connect.cc l. 480). The same 16 SMs Transformer Engine
gives its userbuffers kernels (`USERBUFFERS` below)."""


def sm_share(comm_sms: int, sm_count: int | None) -> float:
    """Fraction k = comm_sms / sm_count of a GPU's SMs a communication kernel holds while it runs
    (0 where the GPU's SM count is unknown). The compute beside it runs on the other 1 - k:

    - a kernel holding SMs only while it runs (NCCL, `NCCL_CHANNEL_SMS`), beside compute of C s
      (at the full GPU) for Z s of communication started together: the compute finishes at
      C / (1 - k) when that is within Z, else at Z (1 - k) of work done plus the rest at full
      speed: the two end at max(C + k Z, Z);
    - a GEMM launched with an SM margin for its whole run (Transformer Engine's set_sm_margin):
      it runs G / (1 - k).

    Args:
        comm_sms: SMs the communication kernel holds.
        sm_count: SMs of the GPU (`GPUSpec.sm_count`), None if unknown.
    """
    return comm_sms / sm_count if sm_count else 0.0


# ---------------------------------------------------------------- how TP comm overlap hides


@dataclass(frozen=True)
class Pipelining:
    """How one TP collective runs beside the GEMM it is paired with (`cost.step_time`
    `tp_overlap_exposed_s` prices it):

    - "ring": the GEMM is split into tp chunks, one per source rank; the local chunk is computed
      first while the next shard arrives point to point, so each of the tp - 1 transfers shows only
      its excess over one chunk's GEMM (all-gather before a GEMM; reduce-scatter after one by
      passing partial chunks, the local chunk last);
    - "pipeline": the GEMM is split into `splits` chunks and chunk i's collective runs beside
      chunk i+1's GEMM: the last chunk's collective is exposed, each other one shows its excess;
    - "bulk": one collective runs beside one whole independent GEMM.
    `comm_sms`: SMs the communication kernel takes from the GEMM (0 for copy-engine transfers),
    which slows the GEMM by sm_count / (sm_count - comm_sms) while they share the GPU."""

    method: str
    """"ring", "pipeline" or "bulk"."""
    comm_sms: int = 0
    """SMs the communication takes from the GEMM beside it."""
    splits: int = 0
    """Chunks of a "pipeline" GEMM (a "ring" has tp)."""


@dataclass(frozen=True)
class TPOverlapScheme:
    """A framework's TP comm overlap: how each sequence-parallel collective of a transformer block
    (attention: QKV column-parallel, projection row-parallel; MLP: FC1 column, FC2 row) is pipelined.

    Forward: the all-gather before the column GEMM (`forward_all_gather`), the reduce-scatter
    after the row GEMM (`forward_reduce_scatter`). Backward: the all-gather of the output gradient
    before the row GEMM's data gradient (`backward_all_gather`), the reduce-scatter of the column
    GEMM's data gradient beside its weight-gradient GEMM (`backward_reduce_scatter`), and where the
    framework gathers the column GEMM's input again for its weight gradient, that all-gather beside
    the column data-gradient GEMM (`backward_input_all_gather`, None where the gathered input is
    kept)."""

    forward_all_gather: Pipelining
    forward_reduce_scatter: Pipelining
    backward_all_gather: Pipelining
    backward_reduce_scatter: Pipelining
    backward_input_all_gather: Pipelining | None
    all_gather_fp8: bool
    """All-gathers move fp8 (1 B per element) under an fp8 recipe."""
    staging_copies: bool
    """The all-gather first copies the local shard into a symmetric buffer and the reduce-scatter
    ends with a kernel summing the tp partial chunks; both stream through HBM, exposed."""
    source: str
    """Where the scheme is read from."""


USERBUFFERS = TPOverlapScheme(
    forward_all_gather=Pipelining("ring"),
    forward_reduce_scatter=Pipelining("pipeline", comm_sms=16, splits=4),
    backward_all_gather=Pipelining("ring"),
    backward_reduce_scatter=Pipelining("bulk", comm_sms=16),
    backward_input_all_gather=Pipelining("bulk", comm_sms=16),
    all_gather_fp8=True, staging_copies=False,
    source="NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/module/base.py l. 335-390 "
           "(initialize_ub defaults: qkv_fprop / fc1_fprop / proj_dgrad / fc2_dgrad 'ring_exchange' "
           "with num_splits = tp_size and num_sm 1 on the copy engine (use_ce, no SM margin); "
           "proj_fprop / fc2_fprop 'pipeline' reduce-scatter with num_splits 4, num_sm 16 and "
           "set_sm_margin; qkv/fc1 dgrad and wgrad 'bulk' with num_sm 16 (the input all-gather "
           "beside dgrad, the dgrad reduce-scatter beside wgrad); fp8_buf for the all-gather layers); "
           "Megatron-LM passes no ub config unless a userbuffers config file is given "
           "(NVIDIA/Megatron-LM@d98e8a6 megatron/training/initialize.py l. 211-215, 240-268)")
"""Megatron-LM's TP comm overlap (`frameworks.megatron` FLAG["tp_comm_overlap"]): Transformer
Engine userbuffers with their defaults."""

ASYNC_TP = TPOverlapScheme(
    forward_all_gather=Pipelining("ring"),
    forward_reduce_scatter=Pipelining("ring"),
    backward_all_gather=Pipelining("ring"),
    backward_reduce_scatter=Pipelining("ring"),
    backward_input_all_gather=None,
    all_gather_fp8=False, staging_copies=True,
    source="pytorch/pytorch@006b161 torch/distributed/_symmetric_memory/__init__.py "
           "(_pipelined_multi_all_gather_and_consume: the local shard copied into the p2p buffer and "
           "a barrier before the first shard_consumer, then group_size - 1 copy-engine copies each "
           "beside one shard's matmul on two streams; _pipelined_produce_and_all2all: group_size - 1 "
           "chunk matmuls each followed by a copy of the partial chunk, the local chunk last, then "
           "reduce_partials sums the group_size partials); torchtitan's AsyncTP applies these fused "
           "ops to the compiled TransformerBlocks (pytorch/torchtitan@b5bcd76 "
           "torchtitan/distributed/compile.py _maybe_enable_async_tp: symmetric memory for the TP "
           "group and inductor's _micro_pipeline_tp pass)")
"""torchtitan's AsyncTP (`frameworks.torchtitan` KEY["async_tp"]): PyTorch symmetric-memory
micro-pipelining."""

TP_OVERLAP_SCHEMES = {"megatron": USERBUFFERS, "torchtitan": ASYNC_TP, "deepspeed": USERBUFFERS}
"""Framework -> its TP comm overlap. DeepSpeed has no switch of its own (`overlap_switches`); a
layout that sets the knob there is costed as Megatron's userbuffers (DeepSpeed-Megatron runs
Megatron's TP layers)."""


def connections_conflict(layout: Layout, gpu_name: str) -> bool:
    """Whether `layout` is Megatron-FSDP (ZeRO-2 / 3 under Megatron-LM, without pipeline parallelism,
    which Megatron-FSDP does not run: `rules.zero_with_pp`) with tp or cp > 1 on a GPU before
    Blackwell, where the two want different CUDA work-queue settings.

    What happens (NVIDIA/Megatron-LM@d98e8a6 megatron/training/arguments.py): Megatron-FSDP asserts
    the device-connections variable (`frameworks.megatron.DEVICE_MAX_CONNECTIONS`) is not 1
    (l. 1166-1167), so it runs with the default 8 queues; tp or cp > 1 before Blackwell would
    otherwise assert it is 1 (l. 1477-1479), and with FSDP Megatron only warns (l. 1454-1466).
    One queue is what makes an NCCL kernel launched before a compute kernel start before it:
    NVIDIA/TransformerEngine@d0067d0 transformer_engine/pytorch/module/base.py l. 1670-1685
    (`set_nccl_overlap_warning_if_tp`: "the NCCL communication needs to be scheduled before the
    GEMM for there to be a guaranteed overlap"); on Hopper the GEMM and attention kernels are
    persistent, so a collective queued behind one waits for all of it. Under FSDP, then:
    - TP comm overlap (Transformer Engine userbuffers) is kept: its pipelined overlaps run the
      chunk GEMMs on the SMs left after the communication's (`_math_sms`) or move data with copy
      engines, and its bulk overlaps order the launch themselves with an event on Hopper when the
      queues are more than one (transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp
      l. 162-177, 486-487; TransformerEngine PR #1308). TP collectives without userbuffers are
      costed exposed anyway (`cost.step_time._layer_comm`).
    - The context-parallel ring (NCCL send / receive beside each attention step) loses its
      guaranteed order: `cost.step_time` prices its transfers unhidden."""
    if layout.framework != "megatron" or layout.zero_stage < 2 or layout.pp > 1 or (layout.tp == 1 and layout.cp == 1):
        return False   # pp > 1: not a layout Megatron-FSDP runs (`rules.zero_with_pp`), so no such run exists
    return not blackwell_or_later(gpu_name)


def connections_note(layout: Layout, gpu_name: str) -> str | None:
    """The plan line's statement for a layout with `connections_conflict`, else None: the setting
    the emitted script writes and which overlap the step time keeps."""
    if not connections_conflict(layout, gpu_name):
        return None
    kept = ["TP comm overlap kept (Transformer Engine's userbuffers order their own kernels)"] * (layout.tp > 1)
    lost = ["context-parallel ring costed unhidden (its NCCL transfers lose their order before the "
            "attention kernels)"] * (layout.cp > 1)
    return (f"{DEVICE_MAX_CONNECTIONS} unset: Megatron-FSDP asserts it is not 1, the value tp/cp > 1 wants "
            f"before Blackwell (Megatron warns at start-up); " + "; ".join(kept + lost))
