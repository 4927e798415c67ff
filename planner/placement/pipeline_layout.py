"""Pipeline split at the virtual-stage level: which layers each of the pp x vpp model chunks holds.

A layout is a tuple of pp * vpp strings, one per virtual stage in Megatron's order (chunk c runs on
pipeline rank c % pp as its local chunk c // pp), each a sequence of layer symbols:

| symbol | layer | Megatron `LayerType` |
|---|---|---|
| E | input embedding | embedding |
| t | decoder (transformer) layer | decoder |
| m | multi-token-prediction layer | mtp |
| L | output layer and loss | loss |

Written as Megatron's pipeline-model-parallel layout string (`frameworks.megatron` pipeline_layout): virtual stages separated by `|`,
`(...)*n` and `x*n` repeat, commas are cosmetic, e.g. "Et|(tt|)*30mL" is 32 virtual stages (one
decoder layer with the embedding, 30 of two, MTP and loss on the last).

Source: Megatron-LM d98e8a6 `megatron/core/transformer/pipeline_parallel_layer_layout.py`
(`parse_str_to_list`: the grammar; `__init__`: stage count divisible by pp, chunk c on rank c % pp;
`validate_layer_layout`: the embedding first and the loss last, each exactly once, decoder count =
num_layers, MTP after every decoder layer, all in the last virtual stage of one rank) and
`megatron/core/transformer/transformer_block.py` `get_num_layers_to_build` (the
account-for-embedding / account-for-loss split (`frameworks.megatron`): the
embedding and the loss each take one layer slot, (num_layers + e + l) / pp per rank, / vpp per
chunk, the embedding's slot on chunk 0 of rank 0, the loss's on the last chunk of the last rank;
`megatron/training/arguments.py` and `transformer_config.py` assert the two divisions).
"""

from __future__ import annotations

import functools
import re

from planner.errors import SpecError

SYMBOLS = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
KEY = "pipeline_layout"


def parse(text: str, pp: int) -> tuple[str, ...]:
    """The virtual stages of a Megatron pipeline-model-parallel layout string.

    Args:
        text: the layout string (Megatron's grammar, see the module docstring).
        pp: pipeline-parallel degree; the stage count must be a multiple of it.

    Returns:
        pp * vpp strings of layer symbols, one per virtual stage (may be empty).

    Raises:
        SpecError: an unknown symbol, a stage count not a multiple of pp, or a layout Megatron's
            `validate_layer_layout` refuses whatever the model (embedding / loss not first / last
            or not once, MTP before a decoder layer or outside one rank's last chunk).
    """
    flat = text.replace(",", "").replace(" ", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        flat = re.sub(pattern, lambda g: g.group(1) * int(g.group(2)), flat)
    stages = tuple(flat.split("|"))
    problems = _syntax_problems(flat)
    if problems:
        raise SpecError(f"value {text!r}: {'; '.join(problems)}; allowed: "
                        + ", ".join(f"{k} {v}" for k, v in SYMBOLS.items()) + ", | between stages, "
                        "(...)*n and t*n to repeat", key=KEY)
    if len(stages) % pp:
        raise SpecError(f"value {text!r} has {len(stages)} virtual stages, not a multiple of "
                        f"pp={pp}", key=KEY)
    problem = structure_problem(stages, pp)
    if problem:
        raise SpecError(f"value {text!r}: {problem}", key=KEY)
    return stages


def _syntax_problems(flat: str) -> list[str]:
    """What is wrong in a layout string after its repeats are expanded (`parse`): a repeat left (its `(`, `)` or
    `*` remain) because it has no count n, and the characters that are no layer symbol nor syntax."""
    out = []
    if any(c in flat for c in "()*"):
        no_count = re.findall(r"(?:\([^()]*\)|[^|()*])\*(?!\d)", flat)
        out.append("a repeat needs a count n after its *: " + ", ".join(map(repr, no_count)) + " has none"
                   if no_count else "parentheses and * belong to a repeat (...)*n or t*n")
    unknown = sorted(set(flat) - set(SYMBOLS) - set("|()*"))
    if unknown:
        out.append(f"unknown symbol(s) {''.join(unknown)}")
    return out


def _per_layout(fn):
    """`fn` memoised on its (tuple) layout and other arguments: a search checks and prices the
    same few uneven layouts (up to 4 x 64 virtual stages each) for tens of thousands of
    candidates; a list argument is computed as is."""
    cached = functools.lru_cache(maxsize=4096)(fn)

    @functools.wraps(fn)
    def wrapper(stages, *args):
        return cached(stages, *args) if type(stages) is tuple else fn(stages, *args)

    return wrapper


@_per_layout
def structure_problem(stages: tuple[str, ...], pp: int) -> str | None:
    """What Megatron's `validate_layer_layout` refuses regardless of the model, or None."""
    flat = "".join(stages)
    vpp = len(stages) // pp
    if not flat or flat[0] != "E" or flat.count("E") != 1:
        return "the embedding E must come first, exactly once"
    if flat[-1] != "L" or flat.count("L") != 1:
        return "the loss L must come last, exactly once"
    if "m" in flat and "t" in flat[flat.index("m"):]:
        return "MTP layers m must come after every decoder layer t"
    holders = [c for c, s in enumerate(stages) if "m" in s]
    if any(c // pp != vpp - 1 for c in holders) or len(holders) > 1:
        return "MTP layers m must all be in one virtual stage, the last one of its rank"
    return None


@_per_layout
def to_string(stages: tuple[str, ...]) -> str:
    """The layout as a Megatron pipeline-model-parallel layout string (runs of equal stages as
    `(...|)*n`, runs of three or more equal symbols as `x*n`); `parse` reads it back."""
    runs: list[list] = []
    for s in stages:
        if runs and runs[-1][0] == s:
            runs[-1][1] += 1
        else:
            runs.append([s, 1])
    out = []
    for i, (s, n) in enumerate(runs):
        body = re.sub(r"(.)\1{2,}", lambda g: f"{g.group(1)}*{len(g.group(0))}", s)
        last = i == len(runs) - 1
        if n == 1:
            out.append(body if last else body + "|")
        elif last:
            out.append(f"({body}|)*{n - 1}{body}" if n > 2 else f"{body}|{body}")
        else:
            out.append(f"({body}|)*{n}")
    return "".join(out)


@_per_layout
def decoder_counts(stages: tuple[str, ...]) -> tuple[int, ...]:
    """Decoder layers per virtual stage."""
    return tuple(s.count("t") for s in stages)


@_per_layout
def rank_counts(stages: tuple[str, ...], pp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline rank (the sum of its chunks c, c + pp, ...)."""
    counts = decoder_counts(stages)
    return tuple(sum(counts[r::pp]) for r in range(pp))


@_per_layout
def rank_chunks(stages: tuple[str, ...], pp: int) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """[rank][local chunk] decoder layer indices: layers are numbered in virtual-stage order
    (Megatron `get_layer_offset`), so chunk c holds the layers after those of chunks 0..c-1."""
    counts = decoder_counts(stages)
    starts = [sum(counts[:c]) for c in range(len(counts))]
    return tuple(tuple(tuple(range(starts[c], starts[c] + counts[c]))
                       for c in range(r, len(stages), pp)) for r in range(pp))


@_per_layout
def is_even(stages: tuple[str, ...]) -> bool:
    """Every virtual stage holds the same number of decoder layers."""
    return len(set(decoder_counts(stages))) <= 1


def account_for_split(num_layers: int, pp: int, vpp: int, *, embedding: bool,
                      loss: bool) -> tuple[str, ...]:
    """The layout Megatron's account-for-embedding / account-for-loss options
    build: (num_layers + e + l) / (pp * vpp) slots per virtual stage, the embedding taking one of
    chunk 0's, the loss one of the last chunk's (Megatron `get_num_layers_to_build`).

    Raises:
        SpecError: the divisions Megatron asserts (`arguments.py`, `transformer_config.py`) fail,
            or a chunk is left with fewer than 0 decoder layers; the message names the numbers and
            the nearest knobs that divide.
    """
    slots = num_layers + int(embedding) + int(loss)
    what = "num_layers" + (" + 1 (embedding)" if embedding else "") + (" + 1 (loss)" if loss else "")
    if slots % pp or slots // pp % vpp:
        vpps = [v for v in range(1, slots // pp + 1) if slots % pp == 0 and slots // pp % v == 0]
        fix = f"vpp in {{{', '.join(map(str, vpps))}}}" if vpps else "another pp, or other account-for options"
        raise SpecError(f"{what} = {slots} slots are not divisible into pp x vpp = {pp} x {vpp} "
                        f"equal virtual stages (Megatron asserts it); use {fix}", key=KEY)
    per = slots // (pp * vpp)
    counts = [per] * (pp * vpp)
    counts[0] -= int(embedding)
    counts[-1] -= int(loss)
    if min(counts) < 0:
        raise SpecError(f"{slots} slots over {pp * vpp} virtual stages leave too few for the "
                        f"embedding and loss; use a smaller pp x vpp", key=KEY)
    return with_ends(tuple(counts))


def account_for_options(stages: tuple[str, ...], pp: int) -> tuple[bool, bool] | None:
    """(embedding, loss): the account-for options that build exactly `stages` (with vpp =
    len(stages) / pp), or None when only an explicit layout string does (MTP layers, or chunks
    that no account-for split gives). What a Megatron launch needs: the two flags, or
    the layout string `to_string(stages)`."""
    if "m" in "".join(stages):
        return None
    n, vpp = sum(decoder_counts(stages)), len(stages) // pp
    for embedding, loss in ((False, False), (True, True), (False, True), (True, False)):
        slots = n + embedding + loss
        if slots % (pp * vpp) == 0 and account_for_split(n, pp, vpp, embedding=embedding,
                                                         loss=loss) == stages:
            return embedding, loss
    return None


def from_rank_counts(counts: tuple[int, ...], vpp: int) -> tuple[str, ...]:
    """A layout giving pipeline rank r counts[r] decoder layers over its vpp chunks, the remainder
    on its first chunks (chunk c = rank c % pp, local chunk c // pp)."""
    pp = len(counts)
    return with_ends(tuple(counts[c % pp] // vpp + (1 if c // pp < counts[c % pp] % vpp else 0)
                           for c in range(pp * vpp)))


def with_ends(counts: tuple[int, ...]) -> tuple[str, ...]:
    """The layout of `counts` decoder layers per virtual stage, the embedding first, the loss last."""
    stages = ["t" * n for n in counts]
    stages[0] = "E" + stages[0]
    stages[-1] = stages[-1] + "L"
    return tuple(stages)


def uneven_interleaved(num_layers: int, pp: int, vpp: int) -> tuple[str, ...] | None:
    """The virtual-stage split `planner plan` gives an interleaved layout whose pp x vpp does not
    divide the layers: Megatron's account-for split with the embedding and the loss both accounted
    for, else the loss alone, else the embedding alone (the first Megatron accepts); when none
    divides, `near_even` as an explicit layout string. None when there are fewer slots than
    virtual stages."""
    for embedding, loss in ((True, True), (False, True), (True, False)):
        slots = num_layers + embedding + loss
        if slots % (pp * vpp) == 0 and slots // (pp * vpp) >= 1:
            return account_for_split(num_layers, pp, vpp, embedding=embedding, loss=loss)
    return near_even(num_layers, pp * vpp)


def near_even(num_layers: int, chunks: int) -> tuple[str, ...] | None:
    """num_layers + 2 slots (the embedding's and the loss's, as the account-for options count
    them) over `chunks` virtual stages as evenly as they go, the larger ones in the middle (after
    chunk 0), the embedding taking a slot of chunk 0 and the loss one of the last; None when a
    virtual stage would get no slot."""
    slots = num_layers + 2
    base, extra = divmod(slots, chunks)
    if base < 1:
        return None
    counts = [base + (1 if 1 <= c <= extra else 0) for c in range(chunks)]
    counts[0] -= 1
    counts[-1] -= 1
    return with_ends(tuple(counts))
