"""Pipeline schedules: time of the pipelined part of a step and its bubble.

With `m` micro-batches, `p` stages and a bottleneck per-micro-batch stage time t = t_f + t_b (forward
plus backward, incl. recompute and exposed in-layer communication, on the slowest stage):

| schedule | step (pipelined part) | bubble |
|---|---|---|
| 1f1b (PipeDream-Flush) | (m + p - 1) t | (p - 1) t |
| interleaved (v virtual stages per rank) | m t + (p - 1) t / v | (p - 1) t / v |
| zb-h1 (zero bubble, 1F1B memory) | m t + (p - 1)(t_f + t_b_input - t_w) | (p - 1)(t_f + t_b_input - t_w) |

Sources: Narayanan et al. 2021 (SC21, arXiv 2104.04473) §2.2.1 (bubble time fraction (p-1)/m for
1F1B) and §2.2.2 (interleaved: (p-1)/(v m)); Qi et al. 2023, "Zero Bubble Pipeline Parallelism"
(arXiv 2401.10241) §3.1 (ZB-H1 bubble (p-1)(T_F + T_B - T_W), 1/3 of 1F1B when T_F = T_B = T_W).

Point-to-point sends: each micro-batch crosses each stage boundary once forward (activations) and
once backward (their gradients); Megatron's 1F1B exchanges them blocking, on the critical path, and
the interleaved schedule crosses v times as many boundaries (Narayanan 2021 §2.2.2: "the amount of
communication also increases by v") but overlaps each send with the next chunk's compute by default,
so `p2p_send_s` is what the caller found exposed (`step_time._p2p_time`,
`frameworks.<framework>.p2p_overlap`). Each send also leaves the stage idle for SCHEDULE_STEP_GAP_S.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import SpecError

SCHEDULES = ("1f1b", "interleaved", "zb-h1")

SCHEDULE_STEP_GAP_S = 20e-6
"""Idle time of a stage at each send / receive of the schedule (one per micro-batch per virtual
stage per direction, as many as the sends), s. Megatron's 1F1B exchanges each boundary tensor with
`batch_isend_irecv` followed by a device-wide `torch.cuda.synchronize()` (NVIDIA/Megatron-LM@d98e8a6
megatron/core/pipeline_parallel/p2p_communication.py l. 421-424; batch_p2p_comm and
batch_p2p_sync default true, megatron/core/model_parallel_config.py l. 390-398), and the
interleaved schedule waits on each receive before the chunk's forward or backward: the host then
launches the next micro-batch's kernels onto an idle GPU. [Empirical] not fitted: one CUDA launch
plus the schedule's Python step (a few kernel-launch latencies of ~5 us); a candidate for the
calibration data. It makes PP 32-64 with thousands of micro-batches pay per micro-batch."""


@dataclass(frozen=True, kw_only=True)
class PipelineTime:
    """Time of the pipelined part of one step."""

    total_s: float
    """Forward/backward of all micro-batches incl. bubble and p2p sends, s."""
    bubble_s: float
    """Idle time of the bottleneck stage (part of total_s), s."""
    p2p_s: float
    """Exposed point-to-point send time and the schedule's gap at each send (part of total_s), s."""


def pipeline_time(*, forward_s: float, backward_s: float, num_microbatches: int, pp: int,
                  vpp: int = 1, schedule: str | None = None, p2p_send_s: float = 0.0,
                  weight_grad_fraction: float = 0.5) -> PipelineTime:
    """Time of `num_microbatches` micro-batches through a `pp`-stage pipeline.

    Args:
        forward_s: forward time of one micro-batch on the bottleneck stage (all its virtual stages), s.
        backward_s: backward time of one micro-batch there (incl. recompute), s.
        num_microbatches: m, micro-batches per step per pipeline.
        pp: stages p.
        vpp: virtual stages per rank v (interleaved when > 1).
        schedule: one of SCHEDULES; None = "interleaved" if vpp > 1 else "1f1b".
        p2p_send_s: one send of one micro-batch's boundary tensor, s.
        weight_grad_fraction: share of backward that is weight-gradient work (t_w), for zb-h1.

    Raises:
        SpecError: m, p or v below 1, unknown schedule, interleaving with m not a multiple of p
            (Megatron requires it: Narayanan 2021 §2.2.2).
    """
    if num_microbatches < 1 or pp < 1 or vpp < 1:
        raise SpecError(f"m={num_microbatches}, pp={pp}, vpp={vpp} must all be >= 1", key="num_microbatches")
    schedule = schedule or ("interleaved" if vpp > 1 else "1f1b")
    if schedule not in SCHEDULES:
        raise SpecError(f"schedule {schedule!r} not allowed; allowed: {', '.join(SCHEDULES)}", key="schedule")
    if schedule == "interleaved" and pp > 1 and num_microbatches % pp:
        raise SpecError(f"interleaved schedule needs num_microbatches ({num_microbatches}) to be a "
                        f"multiple of pp ({pp})", key="num_microbatches")
    m, t = num_microbatches, forward_s + backward_s
    crossings = vpp if schedule == "interleaved" else 1
    p2p = 0.0 if pp == 1 else 2 * crossings * (p2p_send_s + SCHEDULE_STEP_GAP_S) * (m + pp - 1)
    if schedule == "1f1b":
        bubble = (pp - 1) * t
    elif schedule == "interleaved":
        bubble = (pp - 1) * t / vpp
    else:
        t_w = weight_grad_fraction * backward_s
        bubble = (pp - 1) * max(0.0, forward_s + (backward_s - t_w) - t_w)
    return PipelineTime(total_s=m * t + bubble + p2p, bubble_s=bubble, p2p_s=p2p)


@dataclass(frozen=True, kw_only=True)
class PipelineCoefficients:
    """`pipeline_time` as an affine function of the bottleneck stage's per-micro-batch time t and
    its forward part f: total = (slots + bubble_per_t) t + bubble_per_forward f + p2p_s."""

    slots: float
    """Micro-batch slots m, 1/1."""
    bubble_per_t: float
    """Bubble seconds per second of t (1f1b: p - 1; interleaved: (p - 1)/v; zb-h1: (p-1)(1-2w))."""
    bubble_per_forward: float
    """Bubble seconds per second of forward (zb-h1: 2 w (p - 1); else 0)."""
    p2p_s: float
    """Exposed point-to-point send time, s."""

    def time(self, forward_s: float, backward_s: float) -> PipelineTime:
        """The `PipelineTime` of a stage with these forward and backward times."""
        t = forward_s + backward_s
        bubble = self.bubble_per_t * t + self.bubble_per_forward * forward_s
        return PipelineTime(total_s=self.slots * t + bubble + self.p2p_s, bubble_s=bubble,
                            p2p_s=self.p2p_s)


def pipeline_coefficients(*, num_microbatches: int, pp: int, vpp: int = 1,
                          schedule: str | None = None, p2p_send_s: float = 0.0,
                          weight_grad_fraction: float = 0.5) -> PipelineCoefficients:
    """The affine form of `pipeline_time` (same arguments, same sources).

    For zb-h1 the bubble (p - 1) max(0, f + (b - t_w) - t_w) with t_w = w b is affine when
    w <= 1/2 (the max never binds since f, b >= 0): (p - 1)(2 w f + (1 - 2 w) t) with t = f + b.

    Raises:
        SpecError: as `pipeline_time`; zb-h1 with weight_grad_fraction outside [0, 1/2].
    """
    zero = pipeline_time(forward_s=0.0, backward_s=0.0, num_microbatches=num_microbatches, pp=pp,
                         vpp=vpp, schedule=schedule, p2p_send_s=p2p_send_s,
                         weight_grad_fraction=weight_grad_fraction)
    schedule = schedule or ("interleaved" if vpp > 1 else "1f1b")
    p = pp - 1
    if schedule == "1f1b":
        per_t, per_f = float(p), 0.0
    elif schedule == "interleaved":
        per_t, per_f = p / vpp, 0.0
    else:
        if not 0.0 <= weight_grad_fraction <= 0.5:
            raise SpecError(f"weight_grad_fraction {weight_grad_fraction!r} must lie in [0, 0.5] "
                            "for the affine zb-h1 form", key="weight_grad_fraction")
        per_t, per_f = p * (1 - 2 * weight_grad_fraction), p * 2 * weight_grad_fraction
    return PipelineCoefficients(slots=float(num_microbatches), bubble_per_t=per_t,
                                bubble_per_forward=per_f, p2p_s=zero.p2p_s)


def interleaved_warmup_chunks(*, pp: int, vpp: int, stage: int, num_microbatches: int,
                              group_size: int | None = None) -> int:
    """Forward passes (one model chunk of one micro-batch each) that pipeline rank `stage` runs
    before its first backward under interleaved 1F1B:

        min((pp − stage − 1)·2 + (vpp − 1)·N, m·vpp),

    N = micro-batches run back to back through one virtual stage before the rank moves to its next
    (`group_size`; None = pp). The rank's saved activations peak one forward later, at warm-up + 1
    chunks (capped at m·vpp): its steady 1F1B phase pairs each further forward with a backward.

    N is Megatron-LM's micro-batch group (`frameworks.megatron.FLAG["microbatch_group_size"]`,
    `ModelParallelConfig.microbatch_group_size_per_vp_stage`, default pp, a depth-first schedule;
    it must lie in [pp, m]) and the N of Llama 3's schedule (Dubey et al. 2024, arXiv 2407.21783
    §3.3.2 and Fig. 6: "N is the number of contiguous micro-batches for the same stage's forward or
    backward"; depth-first N = pp, breadth-first N = m; Meta made N tunable). Larger N holds more
    micro-batches: (vpp − 1) more chunks per unit of N.
    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/pipeline_parallel/schedules.py
    `get_pp_rank_microbatches` (l. 953-969), `forward_backward_pipelining_with_interleaving`
    (range check l. 1160-1168); megatron/core/model_parallel_config.py l. 431-446, 567-568.

    Raises:
        SpecError: pp, vpp, m or N below 1, or stage outside [0, pp).
    """
    group = pp if group_size is None else group_size
    if min(pp, vpp, num_microbatches, group) < 1 or not 0 <= stage < pp:
        raise SpecError(f"pp={pp}, vpp={vpp}, m={num_microbatches}, N={group} must be >= 1 and "
                        f"stage={stage} in [0, {pp})", key="microbatch_group_size")
    return min((pp - stage - 1) * 2 + (vpp - 1) * group, num_microbatches * vpp)


def interleaved_chunk_table(*, num_microbatches: int, vpp: int, group_size: int) -> list[int]:
    """Local model chunk of each forward of a rank under interleaved 1F1B, in order: each group of
    N = `group_size` micro-batches runs through chunks 0 .. vpp − 1 in turn (the last group holds
    the m mod N left, when that is not 0). The k-th backward runs chunk
    vpp − 1 − table[k].
    Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/pipeline_parallel/schedules.py
    `get_schedule_table` (l. 989-1016); model_parallel_config.py l. 436-446 (its examples: pp 2,
    vpp 2, N 3, m 5 runs forwards 0 1 2 0 1 2 3 4 3 4)."""
    table: list[int] = []
    for lo in range(0, num_microbatches, group_size):
        hi = num_microbatches if lo + group_size >= num_microbatches else lo + group_size
        table += [c for c in range(vpp) for _ in range(lo, hi)]
    return table


def uneven_interleaved_bubble_s(chunk_times_s: list[float], pp: int) -> float:
    """Bubble of interleaved 1F1B whose model chunks take different times: (pp − 1) × the slowest
    chunk's forward + backward of one micro-batch, s.

    With equal chunks of time t / v this is Narayanan 2021 §2.2.2's (p − 1) t / v. Megatron's
    interleaved schedule (Megatron-LM d98e8a6 `megatron/core/pipeline_parallel/schedules.py`
    `forward_backward_pipelining_with_interleaving`) advances every rank one chunk step at a time
    with blocking sends between neighbours: the warm-up fills the pipeline through pp − 1 chunk
    steps and the cool-down drains it through pp − 1 more, and a step lasts as long as the slowest
    chunk on the path, so the slowest chunk sets the pace of the fill and the drain.

    Args:
        chunk_times_s: per-micro-batch forward + backward of every virtual stage (any order), s.
        pp: pipeline stages.
    """
    return (pp - 1) * max(chunk_times_s, default=0.0)

