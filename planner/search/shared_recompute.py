"""Full recompute as Megatron-LM launches it: one `recompute_num_layers` N for every model chunk.

Megatron-LM's full recompute with the block recompute method checkpoints the first N decoder layers
of every model chunk (one TransformerBlock per virtual stage; `num_layers_per_pipeline_rank` is the
chunk's own layer count) and runs the rest without recompute; `uniform` recomputes every layer
(in units of N layers, which with N = 1 is block with N >= every chunk's size). N is one value for
the whole model. Source: NVIDIA/Megatron-LM@d98e8a6 megatron/core/recompute.py l. 156-181
(`_checkpointed_forward`'s uniform and block loops over the chunk's layers),
megatron/core/transformer/transformer_config.py l. 543-555 (recompute_method, recompute_num_layers:
"the number of transformer layers to recompute within each pipeline stage"), l. 1919-1924 (N given
with full). So the launchable plans of a candidate whose layers may be none or full are: N = 0
(no recompute) .. N = its longest chunk (every layer), each with the split the program chooses.

`block_splits` finds, for each N, the least step over every contiguous split of the stage program
(`ilp.IntStageProblem`, one chunk per stage: no interleaving), the stage costs and memory of the
program itself with stage s holding layers a..b-1 recomputing layers a..min(a + N, b) - 1: the
min-max dynamic program over split points V_s(b) = min_a max(V_{s-1}(a), H_s(a, b)) (Bellman 1957)
with H_s the program's exact stage total of that assignment where it fits (its memory regime,
working-set credit and activation-free phases as `ilp.stage_memory` charges them) and infinite
where it does not. The optimum over the launchable space is the least of these over N
(`best_block_plans` gives them all, least first): exhaustive, since a split and N fix every
layer's mode. Every N is solved at once (arrays [N, a, b]).
"""

from __future__ import annotations

import numpy as np

from planner.search.ilp import _INFEASIBLE, IntStageProblem, _relaxed


def block_counts(ip: IntStageProblem, starts: np.ndarray, stops: np.ndarray,
                 n_full: int) -> np.ndarray:
    """[pair, kind, mode] layer counts of stages holding layers starts[i]..stops[i]-1 with their
    first `n_full` layers fully recomputed and the rest not."""
    prefix = ip.kind_prefix
    mid = np.minimum(starts + n_full, stops)
    counts = np.zeros((*mid.shape, ip.num_kinds, len(ip.modes)), dtype=np.int64)
    counts[..., ip.modes.index("full")] = prefix[mid] - prefix[starts]
    counts[..., ip.modes.index("none")] = prefix[stops] - prefix[mid]
    return counts


def _stage_tables(ip: IntStageProblem, s: int, a: np.ndarray, b: np.ndarray,
                  full: np.ndarray) -> np.ndarray:
    """[N, pair] the program's stage-s total (`ilp.stage_cost`) of layers a..b-1 with the first
    `full` [N, 1] of them fully recomputed, _INFEASIBLE where stage s does not fit them
    (`ilp.stage_memory` > capacity), ns. Each piece and the memory are affine in the per-kind
    counts, so each is a difference of prefix sums over the layers in one mode (`kind_prefix`
    times the mode's column): no count tables are built."""
    prefix, f, o = ip.kind_prefix, ip.modes.index("full"), ip.modes.index("none")
    mid = np.minimum(a + full, b)

    def run(per_mode: np.ndarray) -> np.ndarray:  # [kind, mode] per layer -> value of the runs
        pf, pn = prefix @ per_mode[:, f], prefix @ per_mode[:, o]
        return pf[mid] - pf[a] + pn[b] - pn[mid]

    total = np.zeros(mid.shape, dtype=np.int64)
    for group in ip.piece_arrays:
        total += np.max([const[s] + run(coef) for const, coef in group], axis=0)
    backward = (ip.stage_fixed_memory_bytes[s] - ip.credit(s, mid - a)
                + run(ip.layer_memory_arrays[s]))
    fits = (backward <= ip.capacity_bytes) & ip.phase_fits(s, prefix[b] - prefix[a])
    return np.where(fits, total, _INFEASIBLE)


def _relaxed_lows(ip: IntStageProblem) -> np.ndarray:
    """[stage, n] a lower bound on stage s's total holding any n layers in any modes: every
    piece at its least per-layer coefficient (`ilp._relaxed`, as `ilp.exact_split` bounds)."""
    ns = np.arange(ip.num_layers + 1, dtype=np.int64)
    groups, _ = _relaxed(ip)
    return sum(np.max(np.stack([const[:, None] + ns[None, :] * int(q.min()) for const, q in group]),
                      axis=0) for group in groups)


def block_splits(ip: IntStageProblem, n_full: np.ndarray, *, widths=None, upper: int = _INFEASIBLE):
    """For each count N of `n_full` at once: (value, stage ends, [stage][kind][mode] counts) of
    the least step over the program's splits (pinned, or `widths` given: that one) with the first
    N layers of every stage fully recomputed, ns, or None when no split fits (module docstring).
    A stage of n layers whose relaxed least total (`ilp._relaxed`: every piece at its least
    coefficient) exceeds `upper`, the value of a known plan, is left out: no plan with it is
    better."""
    S, L = ip.num_stages, ip.num_layers
    ns = np.arange(L + 1, dtype=np.int64)
    starts, stops = np.meshgrid(ns, ns, indexing="ij")
    width = stops - starts
    widths = ip.layers_per_stage if widths is None else widths
    lows = _relaxed_lows(ip) if upper < _INFEASIBLE else None
    full = np.asarray(n_full, dtype=np.int64)[:, None]
    value = np.full((len(full), L + 1), _INFEASIBLE, dtype=np.int64)
    value[:, 0] = -_INFEASIBLE
    rows, chain = np.arange(len(full))[:, None], []
    for s in range(S):
        ok = (width >= 1) & (starts >= s) & (stops <= L - S + s + 1)
        if widths is not None:
            ok &= width == widths[s]
        if lows is not None:
            ok &= lows[s][np.clip(width, 0, L)] <= upper
        H = np.full((len(full), L + 1, L + 1), _INFEASIBLE, dtype=np.int64)
        H[:, ok] = _stage_tables(ip, s, starts[ok][None, :], stops[ok][None, :], full)
        cand = np.maximum(value[:, :, None], H)  # [N, a, b]
        best_a = np.argmin(cand, axis=1)  # [N, b]; ties to the least a
        value = cand[rows, best_a, ns[None, :]]
        chain.append(best_a)
    out = []
    for j, n in enumerate(full[:, 0].tolist()):
        if value[j, L] >= _INFEASIBLE:
            out.append(None)
            continue
        ends, b = [], L
        for s in reversed(range(S)):
            ends.append(b)
            b = int(chain[s][j, b])
        ends = tuple(reversed(ends))
        counts = block_counts(ip, np.array((0, *ends[:-1])), np.array(ends), n)
        out.append((int(value[j, L]), ends, tuple(tuple(tuple(int(x) for x in row) for row in stage)
                                                  for stage in counts)))
    return out


def best_block_plans(ip: IntStageProblem):
    """[(value, N, ends, counts)] of `block_splits` for every N = 0 .. the longest stage a split
    can give, least value first (ties: smaller N, less recompute); an N past its plan's longest
    stage is the plan of a smaller N (every layer of that split full) and is left out.

    Speed, not a restriction: every N on the per-stage program's optimal split (`ip.optimum`,
    usually known from the search's refined bound) gives a launchable plan whose value bounds the
    search (`block_splits` upper); stages it proves too long or short are skipped and N stops at
    the longest stage left."""
    longest = (max(ip.layers_per_stage) if ip.layers_per_stage is not None
               else ip.num_layers - ip.num_stages + 1)
    upper = _INFEASIBLE
    optimum = ip.optimum if ip.layers_per_stage is None else None
    if optimum is not None and optimum[1] is not None:
        widths = np.diff((0, *optimum[1]))
        known = [got[0] for got in block_splits(ip, np.arange(widths.max() + 1), widths=widths)
                 if got is not None]
        upper = min(known, default=_INFEASIBLE)
        if upper < _INFEASIBLE:
            kept = np.flatnonzero((_relaxed_lows(ip) <= upper).any(axis=0))
            longest = min(longest, int(kept.max()) if len(kept) else 0)
    plans = []
    for n, got in enumerate(block_splits(ip, np.arange(longest + 1), upper=upper)):
        if got is None:
            continue
        value, ends, counts = got
        if n > 0 and n > np.diff((0, *ends)).max():
            continue
        plans.append((value, n, ends, counts))
    return sorted(plans, key=lambda p: (p[0], p[1]))
