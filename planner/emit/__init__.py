"""`planner plan --emit FRAMEWORK`: the best plan as the framework's own launch configuration.

A writer turns a plan file (`planner.plan.plan_file`, DESIGN.md §5: model, cluster, gpus, request,
plan.parallelism with the pipeline split and per-stage recompute counts) into the text a user
launches with, in the framework's real argument / key names:

- `megatron`: a bash script running `torchrun ... pretrain_gpt.py` with Megatron-LM flags;
- `deepspeed`: a DeepSpeed JSON config;
- `torchtitan`: a torchtitan TOML job config.

What a framework cannot express exactly (a per-stage recompute mix Megatron's `--recompute-num-layers`
cannot say, a split its flags cannot give) is emitted as the nearest configuration that needs no
more memory on any stage than the plan, and each such change is listed in `Emitted.deviations` with
its numbers; nothing is changed silently. The readers of `planner check` read every emitted file
back (tests/test_emit_*.py): the round trip gives the plan's layout, up to the listed deviations.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.errors import SpecError

FRAMEWORKS = ("megatron", "deepspeed", "torchtitan")
"""Frameworks `--emit` writes for."""


@dataclass(frozen=True, kw_only=True)
class Emitted:
    """A launch configuration for one plan."""

    framework: str
    """megatron | deepspeed | torchtitan."""
    text: str
    """The configuration itself (script, JSON or TOML), ready to save."""
    suffix: str
    """File suffix the readers of `planner check` recognise: .sh, .json or .toml."""
    deviations: tuple[str, ...] = ()
    """Where the configuration differs from the plan and why, with numbers (empty: exact)."""
    recompute_in_code: tuple[dict[str, int], ...] | None = None
    """[stage] {mode: layers} of recompute the configuration cannot carry and the model code
    applies (DeepSpeed checkpoints from code); `planner check` of the file assumes none, so
    `plan --emit` checks it with these counts. None: the configuration carries its recompute."""


def search_pins(framework: str) -> dict:
    """`--fix` pins under which every plan the search finds is one `framework` can launch (e.g. a
    DeepSpeed JSON has no pipeline or context parallelism); a user's own pins take precedence."""
    if framework == "deepspeed":
        from planner.emit.deepspeed import SEARCH_PINS
        return dict(SEARCH_PINS)
    return {}


def emit(doc: dict, framework: str) -> Emitted:
    """The launch configuration of plan file `doc` for `framework`.

    Raises:
        SpecError: an unknown framework, or a plan the framework cannot run at all (exit 2).
    """
    if framework == "megatron":
        from planner.emit import megatron as writer
    elif framework == "deepspeed":
        from planner.emit import deepspeed as writer
    elif framework == "torchtitan":
        from planner.emit import torchtitan as writer
    else:
        raise SpecError(f"value {framework!r} not allowed; allowed: {', '.join(FRAMEWORKS)}",
                        key="--emit")
    return writer.write(doc)
