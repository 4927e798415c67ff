"""Per-stage recompute mixes as `planner plan` prints them and `planner explain
--recompute-per-stage` reads them: `17n/2f,20n,21n,20n` = stage 0 has 17 layers without recompute
and 2 fully recomputed, stage 1 20 without, ... (n none, s selective, f full: Megatron-LM's
recompute granularities, `frameworks.megatron`). One place parses and prints the notation."""

from __future__ import annotations

from planner.errors import SpecError
from planner.placement.layout import RECOMPUTE_MODES

LETTERS = {"n": "none", "s": "selective", "f": "full"}
"""Letter -> recompute mode."""


def format_stage(counts: dict[str, int]) -> str:
    """{none: 17, full: 2} -> "17n/2f" (modes with layers, in the dict's order; "-" for none)."""
    return "/".join(f"{n}{mode[0]}" for mode, n in counts.items() if n) or "-"


def format_stages(stages) -> str:
    """[{none: 17, full: 2}, {none: 20}] -> "17n/2f, 20n"."""
    return ", ".join(format_stage(c) for c in stages)


def parse(text: str, pp: int, key: str = "--recompute-per-stage") -> tuple[dict[str, int], ...]:
    """`17n/2f,20n,...` -> ({none: 17, full: 2}, {none: 20}, ...), one entry per stage.

    Raises:
        SpecError: an entry that is not counts with n, s or f joined by /, a mode twice in one
            stage, or a stage count other than `pp` (named by `key`).
    """
    stages = []
    for part in text.split(","):
        counts: dict[str, int] = {}
        for token in part.strip().split("/"):
            number, letter = token.strip()[:-1], token.strip()[-1:]
            if letter not in LETTERS or not number.isdigit() or LETTERS[letter] in counts:
                raise SpecError(f"value {text!r}: stage entries are counts with n, s or f (none, "
                                f"selective, full) joined by /, e.g. 17n/2f,20n", key=key)
            counts[LETTERS[letter]] = int(number)
        stages.append(counts)
    if len(stages) != pp:
        raise SpecError(f"value {text!r} gives {len(stages)} stages; pp={pp}", key=key)
    return tuple(stages)


def majority(stages) -> str:
    """The mode most layers use over `stages` ({mode: layers} each), ties to the first of none,
    selective, full: the `Layout.recompute` of a per-stage mix (the counts travel separately)."""
    totals = {m: sum(c.get(m, 0) for c in stages) for m in RECOMPUTE_MODES}
    return max(RECOMPUTE_MODES, key=lambda m: (totals[m], -RECOMPUTE_MODES.index(m)))


def format_layers(modes, groups) -> str:
    """Per-layer modes in layer order, one letter per layer, `groups` (the layer counts of each
    virtual stage, in layer order) separated by |: ("full", "none", "none", "full"), (1, 2, 1)
    -> "f|nn|f". What a plan file writes where per-stage counts do not say which layers of a
    stage are recomputed (`plan.parallelism.recompute_layers`)."""
    out, start = [], 0
    for n in groups:
        out.append("".join(m[0] for m in modes[start:start + n]))
        start += n
    return "|".join(out)


def parse_layers(text: object, num_layers: int, groups, key: str) -> tuple[str, ...]:
    """`format_layers`'s string -> the mode of each layer (len `num_layers`).

    Raises:
        SpecError (named by `key`): not a string of n, s, f and |, a letter count other than
            `num_layers`, or | groups whose sizes are not `groups` (the virtual stages' layers).
    """
    if not isinstance(text, str) or set(text) - set(LETTERS) - {"|"}:
        raise SpecError(f"value {text!r} must be one letter per decoder layer, n, s or f (none, "
                        f"selective, full), virtual stages separated by |, e.g. f|nn|nf", key=key)
    letters = text.replace("|", "")
    if len(letters) != num_layers:
        raise SpecError(f"value {text!r} gives {len(letters)} layers; the model has {num_layers}",
                        key=key)
    if "|" in text and tuple(len(g) for g in text.split("|")) != tuple(groups):
        raise SpecError(f"value {text!r}: groups of {[len(g) for g in text.split('|')]} layers; the "
                        f"virtual stages hold {list(groups)}", key=key)
    return tuple(LETTERS[c] for c in letters)


def full_layers(par: dict) -> int:
    """Layers a plan's parallelism recomputes in full: all of them under a uniform `full`, the sum
    of the per-stage `full` counts under a per-stage mix."""
    mix = par["recompute"]
    if isinstance(mix, str):
        return sum(par["pipeline_layers"]) if mix == "full" and par.get("pipeline_layers") else 0
    return sum(stage.get("full", 0) for stage in mix)
