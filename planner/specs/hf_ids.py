"""Hugging Face model ids -> catalog models: the id a serving command names (`vllm serve Qwen/Qwen3-235B-A22B-FP8`)
as the catalog model it is built on, with the checkpoint's own quantization and context.

An id resolves when it is a catalog model's `hf_id` or one of its `hf_aliases` (checkpoints whose config.json
has the same fields, such as meta-llama/Llama-3.1-70B-Instruct), compared without case as the Hub does; or
when it is such an id followed by a release suffix of its publisher's naming (`RELEASES`: a post-trained
release whose config.json changes only the fields listed) and / or a quantization suffix (`QUANTIZATIONS`:
the `quantization_config` the publisher's quantized release carries), in that order
(Qwen/Qwen3-235B-A22B-Instruct-2507-FP8); or a quantizing publisher's release of such an id (`QUANTIZERS`:
nvidia/Llama-3.1-8B-Instruct-FP8). The result is the catalog model with those config.json fields
replaced, named after the id (`qwen3-235b-a22b-instruct-2507-fp8`), its `hf_id` the id as given (an alias
keeps the catalog name, with the alias as its `hf_id`: what `serve-plan --emit` serves, `serving_id`). The
suffixes are read only for the publishers whose naming they follow; any other id stays unknown (a local
directory with the checkpoint's config.json is exact for every model).
"""

from __future__ import annotations

import re
from dataclasses import replace

import yaml

from planner.specs.model import CATALOG_DIR, ModelSpec, from_config, load_model

QWEN_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
"""quantization_config of Qwen's `-FP8` releases. Source: the Qwen3 model cards, 'Note on FP8': 'we have provided
fp8-quantized model checkpoint for Qwen3, whose name ends with -FP8. The quantization method is fine-grained fp8
quantization with block size of 128' (copy: akash-network/awesome-akash@344abdb1
Qwen3-235B-A22B-Instruct-2507-FP8/README.md) -- the planner's fp8-block (`specs.model.QUANT_METHODS`)."""
QWEN_INT4 = {"bits": 4, "group_size": 128}
"""Bits and group size of Qwen's `-AWQ` and `-GPTQ-Int4` releases: 4-bit weights ('Int4'; AWQ checkpoints are
4-bit) in groups of 128, AutoAWQ's and AutoGPTQ's default group size [model-card convention: the planner's int4,
`specs.model.INT4_METHODS`; a checkpoint with another group size is read exactly from its config.json]."""
INT4_AWQ = {"quant_method": "awq", "zero_point": True, **QWEN_INT4}
INT4_GPTQ = {"quant_method": "gptq", **QWEN_INT4}
QUANTIZATIONS = {
    "Qwen": {"-FP8": QWEN_FP8, "-AWQ": INT4_AWQ, "-GPTQ-Int4": INT4_GPTQ},
}
"""Publisher (the id's owner, compared without case) -> quantization suffix -> the quantization_config its release carries."""
FP8_TENSOR = {"quant_method": "fp8"}
"""The planner's per-tensor `fp8` (`cost.serving.WEIGHT_FORMATS`: 8-bit weights, scales negligible) as a
quantization_config: what a quantizing publisher's 8-bit-float release is read as (`QUANTIZERS`)."""
QUANTIZERS = {
    "nvidia": (("meta-llama",), {"-FP8": FP8_TENSOR}),
    "RedHatAI": (("meta-llama", "mistralai", "Qwen"), {"-FP8": FP8_TENSOR, "-FP8-dynamic": FP8_TENSOR}),
    "neuralmagic": (("meta-llama", "mistralai", "Qwen"), {"-FP8": FP8_TENSOR, "-FP8-dynamic": FP8_TENSOR}),
    "hugging-quants": (("meta-llama",), {"-AWQ-INT4": INT4_AWQ, "-GPTQ-INT4": INT4_GPTQ}),
    "TheBloke": (("mistralai",), {"-AWQ": INT4_AWQ}),
}
"""Quantizing publisher (another owner than the base model's) -> (the owners its base ids may have, quantization
suffix -> the planner's reading of its release's format as a quantization_config): `nvidia/Llama-3.1-405B-Instruct-FP8`
is `meta-llama/Llama-3.1-405B-Instruct` quantized, `RedHatAI/Mixtral-8x7B-Instruct-v0.1-FP8` is
`mistralai/Mixtral-8x7B-Instruct-v0.1` quantized. An id resolves only when the base id is a catalog hf_id or
hf_alias: the release keeps the base model's config.json fields but its quantization_config.

NVIDIA's `-FP8` Llama 3.1 releases are TensorRT Model Optimizer
FP8: 'the weights and activations of the linear operators within transformers blocks are quantized' to FP8 with
one scale per tensor, 'reducing the number of bits per parameter from 16 to 8' (model card of
nvidia/Llama-3.1-405B-Instruct-FP8, https://huggingface.co/nvidia/Llama-3.1-405B-Instruct-FP8/resolve/main/README.md,
base_model meta-llama/Llama-3.1-405B-Instruct; nvidia/Llama-3.1-8B-Instruct-FP8 is the checkpoint of the serving
measurements, tests/data/reference/serving_measurements.csv). Their config.json names quant_method `modelopt`;
what vLLM loads (`ModelOptFp8LinearMethod`: fp8 weights, one fp32 weight scale per tensor) is the planner's
per-tensor `fp8` (`cost.serving.WEIGHT_FORMATS`), which is what is written here.

RedHatAI (formerly neuralmagic; both names serve the same repositories) `-FP8` / `-FP8-dynamic` of Llama,
Mistral and Qwen models: llm-compressor
checkpoints (config.json quant_method `compressed-tensors`, float-quantized 8-bit weights, LM head left in 16 bits);
`-FP8-dynamic` is llm-compressor's FP8_DYNAMIC scheme, 'static, per-channel quantization on the weights, dynamic,
per-token quantization on the activations', the suffix its example saves under (vllm-project/llm-compressor@0c1928e
examples/quantization_w8a8_fp8/README.md); `-FP8` the earlier static per-tensor form [model-card convention]. One
byte per weight either way; a per-channel scale adds one fp32 per output row (0.05% of a 8,192-wide row): read as
the planner's per-tensor `fp8`. hugging-quants `-AWQ-INT4` / `-GPTQ-INT4` (Meta-Llama-3.1-*-Instruct) and
TheBloke's `-AWQ` (Mixtral) are 4-bit weights in groups of 128 with zero points, AutoAWQ's / AutoGPTQ's defaults
(`QWEN_INT4`) [model-card convention]; TheBloke's GPTQ repositories are not read: their main branches differ in
group size per model. A checkpoint whose format differs is read exactly from its config.json (a local folder)."""
_META_FP8 = (
    "Meta's own FP8 release (config.json quant_method fbgemm_fp8) keeps the self-attention weights and the first "
    "and last layers in bf16 and stores the other layers' feed-forward weights in FP8 with one scale per row "
    "(Llama 3 paper, arXiv:2407.21783, section 6.2 'FP8 quantization'): one checkpoint in two weight formats, "
    "which the planner, costing one format per checkpoint, does not model", "nvidia/Llama-3.1-405B-Instruct-FP8")
UNMODELLED = {"meta-llama/Llama-3.1-405B-Instruct": {"-FP8": _META_FP8},
              "meta-llama/Meta-Llama-3.1-405B-Instruct": {"-FP8": _META_FP8}}
"""Catalog id -> suffix of its publisher's release in a weight format the planner does not model -> (why, message
text; an id of the same model in a format the planner reads, or None): the reason the id does not
resolve, instead of a config.json route that is refused too (`specs.model.require_modelled_checkpoint`). Meta
published FP8 weights of the 405B only."""
RELEASES = {
    "Qwen": {"-Instruct-2507": {"max_position_embeddings": 262144},
             "-Thinking-2507": {"max_position_embeddings": 262144}},
}
"""Publisher -> release suffix -> the config.json fields that differ from the base id's. Qwen3's 2507 releases
(Qwen3-235B-A22B-*-2507, Qwen3-30B-A3B-*-2507) keep the architecture (94 layers, 64 / 4 heads, 128 experts,
8 activated for the 235B) and have a 'Context Length: 262,144 natively' against the base's 40,960 (model card,
copy: akash-network/awesome-akash@344abdb1 Qwen3-235B-A22B-Instruct-2507-FP8/README.md, whose launch examples
pass --max-model-len 262144)."""


GIVEN = "hf_id_given"
"""`ModelSpec.extra` key set (True) on a model looked up by its Hugging Face id: that id is what is served."""


def _catalog() -> dict[str, str]:
    """Every catalog hf_id and hf_alias, lower case -> the catalog name."""
    out = {}
    for path in sorted(CATALOG_DIR.glob("*.yaml")):
        entry = yaml.safe_load(path.read_text())
        for hf in (entry.get("hf_id"), *(entry.get("hf_aliases") or ())):
            if hf:
                out[str(hf).lower()] = path.stem
    return out


def _strip(ref: str, suffixes: dict) -> tuple[str, str | None]:
    """(ref without the suffix of `suffixes` it ends with, compared without case; that suffix or None)."""
    for suffix in suffixes:
        if ref.lower().endswith(suffix.lower()):
            return ref[:-len(suffix)], suffix
    return ref, None


def serving_id(spec: ModelSpec) -> str | None:
    """The Hugging Face id `serve-plan --emit` names for a model: its own hf_id when it was given as an id
    (`lookup` keeps it: an alias, a suffixed release), else for a catalog model the first of its `hf_aliases`
    that is the publisher's post-trained `-Instruct` release (the same config.json, so the plan holds for it),
    else its hf_id; None for a model without one (a local checkpoint: its path is served).

    Why -Instruct: a served endpoint answers chat requests, which the post-trained release is made for, and the
    serving measurements here were taken on it where one exists (tests/data/reference/serving_measurements.csv
    model_path: meta-llama/Llama-3.1-8B-Instruct 154 rows, nvidia/Llama-3.1-8B-Instruct-FP8 13; Qwen/Qwen3-32B 259
    and Qwen/Qwen3-235B-A22B-FP8 141 are Qwen3's post-trained releases, which carry no suffix; the
    meta-llama/Llama-3.1-70B rows, 120, ran the base weights, the same shapes). Serve another checkpoint by
    giving its id as the model (`-m meta-llama/Llama-3.1-70B`, `-m Qwen/Qwen3-235B-A22B-FP8`) or a local path."""
    own = spec.extra.get("hf_id")
    catalog = CATALOG_DIR / f"{spec.name}.yaml"
    if own is None or GIVEN in spec.extra or not catalog.is_file():
        return own
    entry = yaml.safe_load(catalog.read_text())
    return next((a for a in entry.get("hf_aliases") or () if str(a).endswith("-Instruct")), own)


def lookup(ref: str) -> ModelSpec | None:
    """The catalog model a Hugging Face id names (module docstring), or None.

    Raises:
        SpecError: a quantization the suffix implies that the planner does not model (from `from_config`)."""
    found = _resolve(ref)
    if found is None:
        return None
    name, raw, exact = found
    if exact:
        spec = load_model(name)
        return replace(spec, extra={**spec.extra, "hf_id": ref, GIVEN: True})
    spec = from_config(raw, name=ref.rsplit("/", 1)[-1].lower(), file=str(CATALOG_DIR / f"{name}.yaml"))
    return replace(spec, extra={**spec.extra, GIVEN: True})


def lookup_config(ref: str) -> dict | None:
    """The config mapping `lookup(ref)` builds its model from (the catalog entry's keys, with the id as
    `hf_id` and a suffix's fields replaced), for `planner models show`; None when `ref` names no catalog model."""
    found = _resolve(ref)
    return None if found is None else found[1]


def _publisher(owner: str | None) -> str | None:
    """The publisher key of QUANTIZATIONS / RELEASES / QUANTIZERS an id's owner is, compared without case."""
    return next((p for p in QUANTIZATIONS.keys() | RELEASES.keys() | QUANTIZERS.keys()
                 if owner and p.lower() == owner.lower()), None)


def _owner(ref: str) -> str | None:
    """The owner of an `owner/name` id, or None for anything else."""
    return ref.split("/", 1)[0] if re.fullmatch(r"[\w.-]+/[\w.-]+", ref) else None


def _base_owners(ref: str) -> tuple[str, ...]:
    """The owners `ref`'s base id may have: a quantizing publisher's (`QUANTIZERS`), else its own."""
    owner = _owner(ref)
    publisher = _publisher(owner)
    return QUANTIZERS[publisher][0] if publisher in QUANTIZERS else (owner,) if owner else ()


def catalog_base(ref: str) -> tuple[str, str] | None:
    """(catalog id, catalog name) of the longest catalog hf_id / hf_alias that `ref` extends by a suffix after
    `-`, `_` or `.` (on the base owner of a quantizing publisher), or None: `Qwen/Qwen2.5-72B-Instruct` ->
    (`Qwen/Qwen2.5-72B`, `qwen2.5-72b`), `deepseek-ai/DeepSeek-V3-0324` -> (`deepseek-ai/DeepSeek-V3`,
    `deepseek-v3`). For messages: what `-m NAME` would plan if the release keeps the architecture."""
    if _owner(ref) is None:
        return None
    name, catalog = ref.split("/", 1)[1], _catalog()
    for cut in range(len(name) - 1, 0, -1):
        for owner in _base_owners(ref):
            base = f"{owner}/{name[:cut]}"
            if name[cut] in "-_." and base.lower() in catalog:
                return base, catalog[base.lower()]
    return None


def unknown_suffix(ref: str) -> str | None:
    """Why an id that does not resolve is not read (message text), or None (it resolves, or no catalog id is a
    prefix of it and its publisher's naming is not read): `Qwen/Qwen3-235B-A22B-NVFP4` is the catalog's
    Qwen/Qwen3-235B-A22B with the suffix -NVFP4, which is not one the planner reads; the hint names the
    catalog model that `-m` takes for it, with the fields to compare (`catalog_base`)."""
    publisher = _publisher(_owner(ref))
    if _resolve(ref) is not None:
        return None
    base = catalog_base(ref)
    if publisher is not None:
        quantizations = QUANTIZERS[publisher][1] if publisher in QUANTIZERS else QUANTIZATIONS.get(publisher, {})
        known = ", ".join([*RELEASES.get(publisher, {}), *quantizations])
    if base is None:
        return None if publisher is None else (f"no catalog id of {' or '.join(_base_owners(ref))} that it "
                                               f"extends (suffixes read for {publisher}: {known})")
    suffix = ref.split("/", 1)[1][len(base[0].split("/", 1)[1]):]
    if (unmodelled := unmodelled_release(ref)) is not None:
        why, other = unmodelled
        return (f"{base[0]} is a catalog id, but {ref}: {why}; "
                + (f"-m {other} is the same model with every linear weight in FP8 (per tensor), which the planner "
                   f"reads: its weights a little below this release's; " if other else "")
                + f"`-m {base[1]}` plans 16-bit weights, an upper bound")
    read = f" for {publisher}'s releases (known: {known})" if publisher is not None else ""
    if (quantized := quantized_name(ref)) is not None:  # -m BASE would cost its weights at 16 bits
        return (f"{base[0]} is a catalog id, but the suffix {suffix!r} is not one the planner reads{read}; it names "
                f"a {quantized.upper()} release, whose weights its config.json's quantization_config sets: give -m "
                f"the directory of that config.json (`-m {base[1]}` plans it as {base[0]}, 16-bit weights: compare "
                f"max_position_embeddings and vocab_size with `planner models show {base[1]}`)")
    return (f"{base[0]} is a catalog id, but the suffix {suffix!r} is not one the planner reads{read}; "
            f"`-m {base[1]}` plans it as {base[0]} where the release keeps that architecture: compare its "
            f"config.json's max_position_embeddings, vocab_size and quantization_config with "
            f"`planner models show {base[1]}`")


def unmodelled_release(ref: str) -> tuple[str, str | None] | None:
    """`UNMODELLED`'s entry for the id `ref` (the catalog id it extends, `catalog_base`, and the suffix), or None."""
    base = catalog_base(ref)
    if base is None:
        return None
    suffix = ref.split("/", 1)[1][len(base[0].split("/", 1)[1]):]
    return next((v for b, table in UNMODELLED.items() if b.lower() == base[0].lower()
                 for k, v in table.items() if k.lower() == suffix.lower()), None)


QUANTIZED_NAME_WORDS = frozenset(("fp8", "fp4", "nvfp4", "mxfp4", "awq", "gptq", "int4", "int8", "w4a16", "w8a8",
                                  "w8a16", "4bit", "8bit"))
"""Words of a Hugging Face id's name (split at - and _, compared without case) that name a quantized release, by
the publishers' naming convention: neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8, Qwen/Qwen3-32B-AWQ,
Qwen/Qwen3-8B-GPTQ-Int4, RedHatAI/...-quantized.w8a8 (the name of the checkpoint, whose config.json
quantization_config the engine loads)."""


def quantized_name(ref: str) -> str | None:
    """The last `QUANTIZED_NAME_WORDS` word of a Hugging Face id's name (e.g. "gptq"), or None."""
    words = [w for w in re.split(r"[-_./]", ref.rsplit("/", 1)[-1].lower()) if w in QUANTIZED_NAME_WORDS]
    return words[-1] if words else None


def _resolve(ref: str) -> tuple[str, dict, bool] | None:
    """(catalog name, config mapping for `ref`, whether `ref` is an hf_id / hf_alias itself) or None."""
    catalog = _catalog()
    if ref.lower() in catalog:
        name = catalog[ref.lower()]
        raw = yaml.safe_load((CATALOG_DIR / f"{name}.yaml").read_text())
        raw.pop("hf_aliases", None)
        return name, {**raw, "hf_id": ref}, True
    publisher = _publisher(_owner(ref))
    quantizations, releases = QUANTIZATIONS.get(publisher, {}), RELEASES.get(publisher, {})
    if publisher in QUANTIZERS:
        quantizations = QUANTIZERS[publisher][1]
    for owner in _base_owners(ref):
        base, quant = _strip(f"{owner}/{ref.split('/', 1)[1]}", quantizations)
        base, release = _strip(base, releases)
        if (quant is not None or release is not None) and base.lower() in catalog:
            break
    else:
        return None
    name = catalog[base.lower()]
    raw = yaml.safe_load((CATALOG_DIR / f"{name}.yaml").read_text())
    raw.pop("hf_aliases", None)
    raw.update(releases.get(release, {}), hf_id=ref)
    if quant is not None:
        raw["quantization_config"] = dict(quantizations[quant])
    raw["source"] = (f"{raw.get('source', '')}; as {ref}: " + ", ".join(
        f"{k} {v}" for k, v in [*releases.get(release, {}).items(), *(
            [("quantization_config", quantizations[quant])] if quant else [])]) + " (planner.specs.hf_ids)")
    return name, raw, False
