"""`planner plan --emit FRAMEWORK`: the best plan as the framework's own launch configuration.

A writer turns a plan file (`planner.plan.plan_file`, DESIGN.md §5: model, cluster, gpus, request,
plan.parallelism with the pipeline split and per-stage recompute counts) into the text a user
launches with, in the framework's real argument / key names:

- `megatron`: a bash script running `torchrun ... pretrain_gpt.py` with Megatron-LM flags;
- `deepspeed`: a DeepSpeed JSON config;
- `torchtitan`: a torchtitan launch for current releases (torchrun `-m torchtitan.train --module M
  --config C` with the plan's settings as dotted overrides);
- `torchtitan-toml`: a torchtitan TOML job config (releases up to 238fa99).

What a framework cannot express exactly (in a plan file, a per-stage recompute mix Megatron's one
recompute layer count cannot say; `planner plan` ranks only settings the framework launches) is
emitted as the nearest configuration whose every stage still fits the plan's
memory budget (more recompute), and each
such change is listed in `Emitted.deviations` with its numbers; nothing is changed silently. The
readers of `planner check` read every emitted file back (tests/test_emit_*.py): the round trip
gives the plan's layout, up to the listed deviations.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planner.errors import InfeasibleError, SpecError

FRAMEWORKS = ("megatron", "deepspeed", "torchtitan", "torchtitan-toml")
"""What `--emit` writes: a framework's current launch form, or an older one."""
MODEL_LINE = "# planner: model="
"""Start of the comment line by which an emitted script names the model it was planned for (the plan
file's model reference follows, e.g. `# planner: model=deepseek-v3`); `planner check` reads it when no
--model is given, and the script's own architecture flags win where they disagree with it (a warning)."""
FRAMEWORK_OF = {"torchtitan-toml": "torchtitan"}
"""`--emit` target -> the framework whose conventions the plan is searched under (itself unless
listed)."""


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
    placeholders: tuple[str, ...] = ()
    """Values written that the plan does not know (e.g. the learning rate of a JSON, which has no
    comments to mark them), one line each naming the key and what to set; printed as notes."""
    recompute_in_code: tuple[dict[str, int], ...] | None = None
    """[stage] {mode: layers} of recompute the configuration cannot carry and the model code
    applies (DeepSpeed checkpoints from code); `planner check` of the file assumes none, so
    `plan --emit` checks it with these counts. None: the configuration carries its recompute."""


def search_pins(framework: str) -> dict:
    """`--fix` pins under which every plan the search finds is one `framework` can launch (e.g. a
    DeepSpeed JSON has no pipeline or context parallelism); a user's own pins take precedence."""
    from planner.frameworks import LAUNCH_PINS

    return dict(LAUNCH_PINS.get(framework, {}))


def refuse_optimizer(framework: str, optimizer: str) -> None:
    """SpecError (exit 2) for an `--optimizer` `--emit framework` has no name for, before any search
    (fresh-user review 7: `--optimizer adam8bit --emit megatron` searched, then exited 1). The names
    are each framework's table: Megatron-LM `frameworks.megatron.OPTIMIZERS`, torchtitan
    `frameworks.torchtitan.OPTIMIZERS`, DeepSpeed `frameworks.deepspeed.OPTIMIZER_TYPES`."""
    from planner.frameworks import deepspeed, megatron, torchtitan

    names = {"megatron": megatron.OPTIMIZERS, "deepspeed": deepspeed.OPTIMIZER_TYPES}.get(
        framework, torchtitan.OPTIMIZERS)
    if optimizer not in names:
        raise SpecError(f"value {optimizer!r} contradicts --emit {framework}: it has no name for it; allowed: "
                        f"{', '.join(names)}", key="--optimizer")


def refuse_pins(framework: str, fixed: dict) -> None:
    """SpecError (exit 2) for a user's `--fix` pin that contradicts `--emit framework`: one no
    configuration of that framework can run (DeepSpeed: `emit.deepspeed.refuse_pins`)."""
    if framework == "deepspeed":
        from planner.emit.deepspeed import refuse_pins as refuse
        refuse(fixed)


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
        from planner.emit import torchtitan
        return torchtitan.write_command(doc)
    elif framework == "torchtitan-toml":
        from planner.emit import torchtitan as writer
    else:
        raise SpecError(f"value {framework!r} not allowed; allowed: {', '.join(FRAMEWORKS)}",
                        key="--emit")
    return writer.write(doc)


@dataclass(frozen=True, kw_only=True)
class Launch:
    """An emitted configuration, `planner check` of it, and the plan it came from."""

    emitted: Emitted
    """The configuration."""
    verdict: dict
    """`planner.check.evaluate` of the configuration read back by the framework's reader."""
    source: dict
    """The `planner.plan.plan` result whose best plan was emitted."""
    index: int = 0
    """Which of `source`'s plans (0 = its best)."""
    instead_of: Launch | None = None
    """The search's best plan as the framework can launch it, when a faster alternative was
    emitted in its place (`best_launch`); None when the search's best plan was emitted."""

    @property
    def step_s(self) -> float:
        """Step time of the configuration as emitted, s (inf when the check found no valid step)."""
        times = self.verdict.get("time_s")
        return times["step"] if times else float("inf")


def checked(doc: dict, framework: str) -> tuple[Emitted, dict]:
    """`emit` the plan file `doc`, read the text back with the framework's reader (`planner check`)
    and evaluate it with the plan's own reserve and headroom (no framework config carries them) and
    the recompute the model code applies where the configuration cannot carry it.

    Raises:
        SpecError: as `emit`, or the reader's (a writer / reader mismatch: a defect).
    """
    from planner import check as check_api

    emitted = emit(doc, framework)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"launch{emitted.suffix}"
        path.write_text(emitted.text, encoding="utf-8")
        target = check_api.read_target(path, model=doc["model"], cluster=doc["cluster"],
                                       gpus=doc["gpus"], seq_len=doc["request"]["seq_len"])
    target = dataclasses.replace(target, reserve_bytes=doc["request"]["reserve_bytes"],
                                 at_risk_margin=doc["request"]["headroom"])
    if emitted.recompute_in_code is not None:
        target = dataclasses.replace(target, recompute_per_stage=emitted.recompute_in_code)
    return emitted, check_api.evaluate(target)


def best_launch(result: dict, framework: str, doc_of: Callable[[dict, int], dict]) -> Launch:
    """The fastest configuration `framework` can launch among the search's plans (its best and
    runners-up). The search ranks only recompute settings the framework launches
    (`planner.plan._granularity_copies`), so its best plan is emitted as planned unless the
    writer refuses it or `planner check` fails it; then the runners-up are weighed, ranked by
    passing `planner check`, then by the emitted configuration's step time as `planner check`
    computes it.

    Raises:
        InfeasibleError: no plan weighed can be launched by the framework (exit 1: the request is
            valid; what was asked has no launchable plan).

    Args:
        result: the search's `plan()` result.
        doc_of: (a `plan()` result, plan index) -> its plan file (`planner.plan.plan_file`).
    """
    first, refused = _launch(result, 0, framework, doc_of)
    if first is not None and not first.emitted.deviations:
        return first
    runners_up = [_launch(result, i, framework, doc_of)[0] for i in range(1, len(result["plans"]))]
    options = [o for o in [first, *runners_up] if o is not None]
    if not options:
        tail = (f"; and no runner-up of the search can be launched by {framework} either"
                if runners_up else "")
        raise InfeasibleError(f"{_reason(refused)}{tail}")
    chosen = min(options, key=lambda o: (o.verdict["verdict"] != "pass", o.step_s))
    if chosen is first:
        return chosen
    if framework == "megatron":  # its header names the plan it is not (senior review 8 finding 4)
        from planner.emit.megatron import with_search_note
        best = result["plans"][0]["time_s"]["step"]
        as_launched = ("cannot be launched by Megatron-LM" if first is None else
                       f"runs {first.step_s:.3f} s/step with the {len(first.emitted.deviations)} "
                       f"change(s) Megatron-LM needs")
        chosen = dataclasses.replace(chosen, emitted=with_search_note(chosen.emitted, (
            f"NOT the search's best plan: that one ({best:.3f} s/step as planned) {as_launched}; "
            f"this launch, {chosen.step_s:.3f} s/step, is the fastest of the search's plans.")))
    return dataclasses.replace(chosen, instead_of=first)


def _launch(result: dict, index: int, framework: str, doc_of) -> tuple[Launch | None, SpecError | None]:
    """(Launch of plan `index` of `result`, None) or (None, the writer's refusal)."""
    try:
        emitted, verdict = checked(doc_of(result, index), framework)
    except SpecError as exc:
        return None, exc
    return Launch(emitted=emitted, verdict=verdict, source=result, index=index), None


def _reason(exc: SpecError) -> str:
    """The writer's refusal without its `--emit: ` prefix."""
    text = str(exc)
    return text.split(": ", 1)[1] if text.startswith("--emit: ") else text
