"""The Megatron-LM module sets `planner plan` searches: which modules selective recompute re-runs
(its recompute module list, `Layout.recompute_modules`) and which modules' saved activations wait
in host memory (its fine-grained activation offloading module list, `Layout.offload_modules`;
the flags: `frameworks.megatron.FLAG`).

Megatron-LM takes one module list of each for the whole model, so a pair of lists is a property of
a candidate layout, not of a layer: every candidate the mesh enumeration yields (Megatron's
defaults: core_attn, no offload) is searched with each pair of `MODULE_SETS` too, and the stage
program then chooses selective (with the pair's list) on every layer, or none / full per layer
(Megatron-LM's one recompute granularity: `plan._modes_of`), as for any layout.
The pairs are those NVIDIA's tuned Megatron-Bridge recipes run (a search over every subset would
multiply the candidates; the recipes are the combinations known to pay), restricted to what the
model and the request can run:

- a pair applies only when every module in it, as the recipe writes it, holds a saved tensor of
  the model (`applies`, before a pinned mode or list replaces a half: `_recipe_runs`:
  mla_up_proj needs multi-latent attention, moe_act a MoE layer, mlp a dense MLP, layernorm a
  norm that is a module of its own, expert_fc1 routed experts: `cost.activations`'s tags);
- Megatron-LM's start-up rules on the lists (`placement.rules.recompute_module_violations`: fp8
  with delayed scaling refuses moe_act and layernorm recompute);
- a list the request gave (`planner plan --recompute-modules / --offload-modules`) is kept: pairs with another
  are not searched; recompute lists only where the program may use selective recompute, offload
  only where it may keep activations (not with full recompute pinned: a fully recomputed layer
  keeps only its input, which no module's scope holds).

Source: NVIDIA-NeMo/Megatron-Bridge@067f987 src/megatron/bridge/perf_recipes/ (per pair below) and
Megatron-LM's default core_attn (NVIDIA/Megatron-LM@d98e8a6 transformer_config.py l. 1940).
"""

from __future__ import annotations

from functools import lru_cache

from planner.cost.activations import saved_tensors
from planner.placement.layout import Layout
from planner.placement.rules import recompute_module_violations
from planner.specs.model import ModelSpec

MODULE_SETS = (
    (("mlp",), None),                                   # deepseek/gb200/deepseek_v3.py l. 97
    (("mla_up_proj",), None),                           # deepseek/b200/deepseek_v3.py l. 43
    (("mla_up_proj", "mlp"), None),                     # deepseek/h100/deepseek_v3.py l. 43 (E10)
    (("moe_act",), None),                               # deepseek/gb300/deepseek_v3.py l. 46
    (("layernorm", "moe_act"), None),                   # qwen/h100/qwen3_moe.py l. 522
    (("layernorm", "mla_up_proj", "moe_act"), ("core_attn", "attn_proj")),  # deepseek/common.py l. 114-116
    (("mla_up_proj",), ("expert_fc1",)),                # deepseek/gb200/deepseek_v3.py l. 280-282
    (("layernorm", "moe_act"), ("expert_fc1",)),        # nemotronh/h100/nemotronh.py l. 239-241
)
"""(recompute_modules, offload_modules) pairs searched beside Megatron's defaults (core_attn, no
offload), each as a Megatron-Bridge perf recipe sets it (file under perf_recipes/, line);
None = offloading off."""


@lru_cache(maxsize=256)
def model_modules(model: ModelSpec) -> tuple[frozenset[str], frozenset[str]]:
    """(recompute modules, offload modules) that tag at least one saved tensor of some layer of
    `model` (`cost.activations.saved_tensors`: what each module's checkpoint drops, in whose scope
    each tensor is saved)."""
    recompute, offload = set(), set()
    for index in _layer_representatives(model):
        for tensor in saved_tensors(model, index, seq_len=1):
            recompute.update(tensor.modules)
            if tensor.offload:
                offload.add(tensor.offload)
    return frozenset(recompute), frozenset(offload)


def _layer_representatives(model: ModelSpec) -> tuple[int, ...]:
    """One layer of each kind (dense, MoE)."""
    if not model.is_moe:
        return (0,)
    moe = model.moe_layers
    return tuple(dict.fromkeys((moe.index(True), *((moe.index(False),) if False in moe else ()))))


def applies(model: ModelSpec, recompute_modules: tuple[str, ...] | None,
            offload_modules: tuple[str, ...] | None) -> bool:
    """Whether every module named holds a saved tensor of `model` (`model_modules`)."""
    recompute, offload = model_modules(model)
    return set(recompute_modules or ()) <= recompute and set(offload_modules or ()) <= offload


def searched_sets(model: ModelSpec, layout: Layout, modes: tuple[str, ...], *,
                  recompute_pinned: bool, offload_pinned: bool
                  ) -> tuple[tuple[tuple[str, ...] | None, tuple[str, ...] | None], ...]:
    """The (recompute_modules, offload_modules) pairs other than `layout`'s own that a candidate
    like `layout` (Megatron-LM; its module lists as the request gave them) is also searched with
    (module docstring); empty for other frameworks. The pairs read only what every candidate of
    one request shares (model, framework, precision, fp8 recipe, the pins), so they are found once
    per request and each candidate's variants are `layout.replace(...)` of them.

    Args:
        model: the model (which modules exist).
        layout: a candidate of the mesh enumeration (or the request's base Layout).
        modes: the recompute modes the stage program may use.
        recompute_pinned: the request gave `--recompute-modules` (not searched).
        offload_pinned: the request gave `--offload-modules` (not searched).
    """
    if layout.framework != "megatron":
        return ()
    out = []
    for pair in MODULE_SETS:
        if not _recipe_runs(model, layout, *pair):
            continue
        recompute, offload = pair
        if recompute_pinned or "selective" not in modes:
            recompute = layout.recompute_modules
        if offload_pinned or modes == ("full",):
            offload = layout.offload_modules
        if ((recompute, offload) in ((layout.recompute_modules, layout.offload_modules), *out)
                or not _recipe_runs(model, layout, recompute, offload)):
            continue
        out.append((recompute, offload))
    return tuple(out)


def _recipe_runs(model: ModelSpec, layout: Layout, recompute: tuple[str, ...] | None,
                 offload: tuple[str, ...] | None) -> bool:
    """Whether the pair applies to `model` (`applies`) and Megatron-LM starts with it
    (`recompute_module_violations`, selective granularity).

    `searched_sets` asks this of the recipe's pair as written before a pinned mode or list
    replaces a half of it, so that a search with the recompute mode pinned (e.g. the uniform
    alternatives `plan --emit` weighs) searches a subset of the unpinned search's space: a pair
    whose recompute half names a module the model lacks (deepseek's layernorm, mla_up_proj,
    moe_act with core_attn, attn_proj offloaded, on Llama) is not searched with that half dropped
    (senior review 8 finding 4: with recompute pinned to none the offload half alone was searched,
    and `--emit megatron` launched a plan 0.6% faster than the unpinned search's proven optimum)."""
    if not applies(model, recompute, offload):
        return False
    variant = layout.replace(recompute="selective", recompute_modules=recompute,
                             offload_modules=offload)
    return not any(v.severity == "error" for v in recompute_module_violations(model, variant))
