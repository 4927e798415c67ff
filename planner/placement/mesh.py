"""The device mesh: parallel degrees, world size, rank order and the group rules, shared by the
training layout (`Layout.mesh`) and the serving instance (`cost.serving.Instance.mesh`).

What is a mesh fact lives here and nowhere else (docs/architecture.md §3):

- the world size is the product of the dense degrees dp x tp x pp x cp; ep and etp live inside
  dp x cp x tp for the routed experts (their group needs ep x etp to divide it), and the
  expert-data-parallel degree is world / (ep x etp x pp);
- HSDP splits dp into dp_shard (ZeRO / FSDP shards) x dp_replicate (replicas);
- ranks are laid out in a rank order, innermost axis first; a scale-up (NVLink) domain holds
  consecutive ranks, so each axis group has a number of GPUs inside one domain
  (`axis_domain_sharing`), which prices its collectives;
- a TP group sits inside one domain when tp divides the domain (or the whole mesh fits in it).

Source: torchtitan `torchtitan/distributed/parallel_dims.py` (`ParallelDims`: degrees, world size
check, dp_replicate x dp_shard); Megatron-LM `megatron/core/parallel_state.py`
(`initialize_model_parallel`: default order "tp-cp-ep-dp-pp", `RankGenerator` groups as strided
slices of the rank order; expert groups: `expert_tensor_model_pipeline_parallel_size = etp x ep x
pp`, `expert_data_parallel_size = world_size // that`, l. 887-895 @d98e8a6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planner.errors import SpecError

DEFAULT_RANK_ORDER = ("tp", "cp", "ep", "dp", "pp")
"""Mesh axes from innermost (consecutive ranks) to outermost.

Source: Megatron-LM `megatron/core/parallel_state.py` default order "tp-cp-ep-dp-pp"; Llama 3 (arXiv
2407.21783) §3.3.2 orders [TP, CP, PP, DP] and says TP is innermost to keep it on NVLink."""

DENSE_AXES = ("tp", "cp", "dp", "pp")
"""The axes whose degrees multiply to the world size."""


_DOMAIN_SHARING: dict = {}
"""(mesh, domain GPUs, rank order) -> `Mesh.domain_sharing`'s mapping (bounded memo)."""


@dataclass(frozen=True, slots=True)
class Mesh:
    """Degrees of one device mesh (counts); validated by its owner (`Layout`, `Instance`)."""

    dp: int = 1
    """Data-parallel degree (replicas of the dense model)."""
    tp: int = 1
    """Tensor-parallel degree."""
    pp: int = 1
    """Pipeline-parallel degree (stages)."""
    cp: int = 1
    """Context-parallel degree."""
    ep: int = 1
    """Expert-parallel degree (inside dp x cp x tp)."""
    etp: int = 1
    """Expert tensor-parallel degree."""
    dp_shard: int | None = None
    """HSDP shard degree (a divisor of dp); None = all of dp."""

    @property
    def world_size(self) -> int:
        """GPUs of the mesh: dp x tp x pp x cp (ep, etp live inside dp x cp x tp)."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def dp_shard_degree(self) -> int:
        """Degree the ZeRO / FSDP sharding runs over (dp when dp_shard is None)."""
        return self.dp if self.dp_shard is None else self.dp_shard

    @property
    def dp_replicate_degree(self) -> int:
        """HSDP replica groups: dp // dp_shard_degree."""
        return self.dp // self.dp_shard_degree

    @property
    def expert_dp(self) -> int:
        """Expert-data-parallel degree: world / (ep x etp x pp), at least 1 (module Source)."""
        return max(1, self.world_size // (self.ep * self.etp * self.pp))

    @property
    def expert_host(self) -> int:
        """dp x cp x tp: the ranks of one pipeline stage, which the expert group ep x etp divides."""
        return self.dp * self.cp * self.tp

    def expert_group_divides(self) -> bool:
        """Whether ep x etp divides dp x cp x tp (Megatron raises otherwise; module Source)."""
        return self.expert_host % (self.ep * self.etp) == 0

    def group_degrees(self) -> dict[str, dict[str, int]]:
        """Axis degrees of each parameter group's placement, fresh dicts: dense and replicated
        (norms) parameters over dp_replicate x dp_shard x cp x tp x pp; routed experts over ep x
        etp x edp x pp, with HSDP's replicas split out of edp where they divide it (Megatron's
        expert-data-parallel group inside the data-parallel ranks; module Source)."""
        dense = {"dp_replicate": self.dp_replicate_degree, "dp_shard": self.dp_shard_degree,
                 "cp": self.cp, "tp": self.tp, "pp": self.pp, "host": 1}
        edp, rep = self.expert_dp, self.dp_replicate_degree
        expert = {"ep": self.ep, "etp": self.etp, "pp": self.pp, "host": 1}
        if rep > 1 and edp % rep == 0:
            expert |= {"dp_replicate": rep, "edp": edp // rep}
        else:
            expert |= {"edp": edp}
        return {"dense": dense, "replicated": dict(dense), "expert": expert}

    def degrees(self) -> dict[str, int]:
        """{axis: degree} of the dense axes (tp, cp, dp, pp)."""
        return {"tp": self.tp, "cp": self.cp, "dp": self.dp, "pp": self.pp}

    def tp_in_domain(self, domain_gpus: int) -> bool:
        """Whether every TP group lies inside one scale-up domain of `domain_gpus` GPUs: tp is
        innermost, so a group straddles two domains when tp exceeds the domain, or (on a mesh
        larger than one domain) when tp does not divide it.

        Source: Narayanan et al. 2021 (SC21) §3.3 Takeaway #1 (tensor parallelism within a server)."""
        tp = self.tp
        return tp <= domain_gpus and (domain_gpus % tp == 0 or self.world_size <= domain_gpus)

    def spans_domains(self, domain_gpus: int) -> bool:
        """Whether the mesh's GPUs fill more than one scale-up domain of `domain_gpus` GPUs (some
        neighbouring pipeline stages then talk over the scale-out network)."""
        return self.world_size > domain_gpus

    def domain_sharing(self, domain_gpus: int,
                       order: Sequence[str] = DEFAULT_RANK_ORDER) -> dict[str, int]:
        """GPUs of one group of each dense axis (tp, cp, dp, pp) inside one scale-up domain
        (`axis_domain_sharing` over the dense degrees, ep left out of the order: it lives inside).
        The mapping is shared between calls (a search asks for the same few tens of thousands of
        times): read it, do not modify it."""
        key = (self, domain_gpus, tuple(order))
        sharing = _DOMAIN_SHARING.get(key)
        if sharing is None:
            if len(_DOMAIN_SHARING) >= 4096:
                _DOMAIN_SHARING.clear()
            sharing = _DOMAIN_SHARING[key] = axis_domain_sharing(
                self.degrees(), domain_gpus=domain_gpus, order=[a for a in order if a != "ep"])
        return sharing

    def ep_sharing(self, domain_gpus: int, order: Sequence[str] = DEFAULT_RANK_ORDER) -> int:
        """GPUs of an EP group inside one scale-up domain: EP is carved from the dense tp x cp x dp
        ranks after etp (innermost first) (Megatron-LM parallel_state expert groups)."""
        inner = self.etp if "tp" in order[: order.index("ep")] else 1
        if inner >= domain_gpus:
            return 1
        return max(1, min(self.ep, domain_gpus // inner))

    def edp_sharing(self, domain_gpus: int, order: Sequence[str] = DEFAULT_RANK_ORDER) -> int:
        """GPUs of an expert-data-parallel group inside one scale-up domain, in Megatron's expert
        rank order (etp innermost, then ep, edp, pp; no cp: module Source)."""
        eorder = [a for a in order if a != "cp"]
        degrees = {"tp": self.etp, "ep": self.ep, "dp": self.expert_dp, "pp": self.pp}
        return axis_domain_sharing(degrees, domain_gpus=domain_gpus, order=eorder)["dp"]


def axis_domain_sharing(degrees: Mapping[str, int], *, domain_gpus: int,
                        order: Sequence[str] = DEFAULT_RANK_ORDER) -> dict[str, int]:
    """For each axis: how many GPUs of one of its groups share one scale-up domain.

    Ranks are laid out with `order[0]` varying fastest. The group of axis `a` is `n_a` ranks at
    stride `S_a` = product of the degrees of the axes inside it; a domain is `domain_gpus`
    consecutive ranks. So k_a = 1 when S_a >= domain_gpus, else min(n_a, domain_gpus // S_a).

    Source: the rank-to-group construction of Megatron-LM `parallel_state.RankGenerator` (groups are
    strided slices of the rank order); DGX/NVL nodes hold consecutive ranks.

    Args:
        degrees: axis name -> degree; axes not in `order` raise, missing ones count as 1.
        domain_gpus: GPUs per scale-up domain.
        order: axes innermost first.

    Raises:
        SpecError: an axis of `degrees` is not in `order`, or a degree/domain is below 1.
    """
    key = (tuple(degrees.items()), domain_gpus, tuple(order))
    known = _SHARING.get(key)
    if known is not None:
        return dict(known)
    if domain_gpus < 1:
        raise SpecError(f"value {domain_gpus!r} must be >= 1", key="scaleup_domain_gpus")
    for axis, degree in degrees.items():
        if axis not in order:
            raise SpecError(f"axis {axis!r} not in the rank order; allowed: {', '.join(order)}",
                            key="rank_order")
        if degree < 1:
            raise SpecError(f"value {degree!r} must be >= 1", key=axis)
    sharing, stride = {}, 1
    for axis in order:
        n = degrees.get(axis, 1)
        sharing[axis] = 1 if stride >= domain_gpus else max(1, min(n, domain_gpus // stride))
        stride *= n
    if len(_SHARING) >= 4096:
        _SHARING.clear()
    _SHARING[key] = sharing
    return dict(sharing)


_SHARING: dict[tuple, dict[str, int]] = {}
"""(degrees items, domain_gpus, order) -> `axis_domain_sharing` result (a search asks for the same
few meshes thousands of times); callers get a copy."""
