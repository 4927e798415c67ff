"""`planner plan --emit deepspeed`: a plan file as a DeepSpeed JSON config (`deepspeed.initialize(config=...)`).

Keys written -- exactly those `planner.check.deepspeed` reads back; names, defaults and sources in
`planner.frameworks.deepspeed` (the table the reader shares):
- the global batch, micro-batch and gradient accumulation steps (num_microbatches), all three
  written so that `DeepSpeedConfig._batch_assertion` (train = micro x gas x dp) holds as written;
- the ZeRO stage, and the optimizer / parameter offload device "cpu" when the plan's
  `parallelism.offload` lists the optimizer / the parameters;
- the bf16 or fp16 section's `enabled`;
- the optimizer type: "AdamW" (in `DEEPSPEED_OPTIMIZERS`, `deepspeed/runtime/config.py`) or "SGD"
  (looked up as `getattr(torch.optim, name)`, `runtime/engine.py` `_configure_basic_optimizer`), and its
  `params` (`_optimizer_params`): the model family's published betas, epsilon and weight decay
  (`planner.emit.megatron.RECIPES`, the table the Megatron emitter writes), else the values DeepSpeed runs
  with the section absent (`frameworks.deepspeed.OPTIMIZER_DEFAULTS`); the learning rate: the model's published
  peak (`planner.emit.megatron.LEARNING_RATES`, which the Megatron emitter writes), else the Megatron emitter's
  placeholder (`planner.emit.megatron.PLACEHOLDERS` LR, not DeepSpeed's 1e-3), either named on stderr with its
  source or as a PLACEHOLDER (`Emitted.placeholders`: JSON has no comments);
- the gradient clip (KEY['grad_clip']): the family's published clip (RECIPES clip_grad), else
  DeepSpeed's default 1.0;
- the ZeRO buckets the cost model charges, so that the JSON runs what was costed (`_put_buckets`): the plan's
  `parallelism.buckets` (`Layout.buckets`) where it gives them, else DeepSpeed's defaults
  (`frameworks.deepspeed.DEFAULT`, the values `cost.memory` charges then): the gradient reduce bucket
  (KEY['reduce_bucket']) at every stage >= 1; at ZeRO-3 the live-parameter window (KEY['zero3_live_parameters'])
  and the persistence threshold (KEY['zero3_persistence']); at ZeRO-1/2 the all-gather bucket
  (KEY['allgather_bucket'], not a memory term of the cost model).
- the AutoTP size = tp when tp > 1 (`engine.py` `_configure_tensor_parallel_states` builds the
  (world // tp, tp) mesh, so dp = gpus / tp, and notes AutoTP + ZeRO-3 is supported for training).

What a DeepSpeed JSON cannot state, decided item by item:
- pp > 1 / vpp > 1: pipeline stages are built in code (`deepspeed.pipe.PipelineModule(num_stages=...)`;
  the JSON's `pipeline` section holds only options), and the config reader fixes pp = 1 -> SpecError,
  pin `--fix pp=1`.
- cp > 1: Ulysses (its size key, groups passed in code) is not read back -> SpecError, `--fix cp=1`.
- ep > 1 or etp > 1: AutoEP is not read back -> SpecError, `--fix ep=1` / `--fix etp=1`.
- sequence_parallel at tp > 1: AutoTP has no Megatron sequence parallelism, and running without it
  keeps tp x more norm/dropout activations than the plan -> SpecError, `--fix sequence_parallel=false`.
  At tp = 1 the flag has no effect (nothing to split over): dropped with a deviation line.
- precision fp8 (Transformer Engine, model code) -> SpecError, `--precision bf16`;
  optimizer adam8bit (no DeepSpeed or torch.optim name) -> SpecError, `--optimizer adamw`.
- a plan searched under another framework's conventions (request.framework) -> SpecError: the
  memory it was costed for is not DeepSpeed's.
- recompute: activation checkpointing is switched on by the model code (`deepspeed.checkpointing.
  checkpoint`, HF `gradient_checkpointing_enable`), not by the JSON. The JSON is emitted and one
  deviation line says to wrap every layer when the plan recomputes any: DeepSpeed checkpoints
  whole layers, and one mode for all is what HF's switch and `planner check --recompute full`
  state (more recompute than a partial plan, never more memory). `planner check` of the JSON
  assumes no recompute unless given `--recompute` (`deepspeed_recompute_assumed`).
The model, cluster, GPU count and sequence length are not DeepSpeed keys: they travel as the
reader's --model/--cluster/--gpus/--seq-len.
"""

from __future__ import annotations

import json

from planner.emit import Emitted
from planner.errors import SpecError
from planner.frameworks import deepspeed as ds
from planner.frameworks.deepspeed import KEY as K
from planner.specs.model import load_model

SUFFIX = ".json"
"""What `planner check` reads as a DeepSpeed config (planner/check/__init__.py `read_target`)."""

_KNOWN = frozenset({"dp", "tp", "pp", "cp", "ep", "etp", "zero_stage", "sequence_parallel",
                    "micro_batch_size", "global_batch_size", "num_microbatches", "vpp",
                    "recompute", "pipeline_layers", "offload", "overlap", "cp_comm_type", "buckets"})
"""`plan.parallelism` keys this writer maps (planner/plan.py `plan_entry`, plus `offload`)."""
NOT_IN_JSON = ds.NOT_IN_JSON
"""Degree (> 1) -> why a DeepSpeed JSON cannot run it (`_refuse`, `refuse_pins`): the framework
table `frameworks.deepspeed.NOT_IN_JSON`, whose pins (`LAUNCH_PINS`) the search runs under."""


def refuse_pins(fixed: dict) -> None:
    """SpecError (key --fix) for a user's `--fix` pin that no DeepSpeed JSON can run, before any
    search: a contradiction of `--fix` and `--emit deepspeed` (the same conditions `_refuse`
    applies to a plan: a degree of NOT_IN_JSON above 1, selective recompute, sequence parallelism
    at a pinned tp > 1)."""
    for key, reason in NOT_IN_JSON.items():
        if fixed.get(key, 1) > 1:
            raise SpecError(f"{key}={fixed[key]} contradicts --emit deepspeed: {reason}; give --fix {key}=1 "
                            f"or another --emit", key="--fix")
    if fixed.get("recompute") == "selective":
        raise SpecError(f"recompute=selective contradicts --emit deepspeed: DeepSpeed checkpoints whole layers "
                        f"({ds.CHECKPOINT_CALL}); give --fix recompute=full or none", key="--fix")
    if fixed.get("sequence_parallel") and fixed.get("tp", 1) > 1:
        raise SpecError(f"sequence_parallel=true with tp={fixed['tp']} contradicts --emit deepspeed: DeepSpeed "
                        f"AutoTP has no sequence parallelism; give --fix sequence_parallel=false", key="--fix")


def write(doc: dict) -> Emitted:
    """The DeepSpeed JSON config of plan file `doc` (module docstring for the keys and refusals).

    Raises:
        SpecError: a plan a DeepSpeed JSON cannot run (key --emit; names the --fix that makes it
            runnable), or a plan file whose batch numbers disagree.
    """
    par, request = doc["plan"]["parallelism"], doc["request"]
    _refuse(par, request)
    gas = _accumulation(par, doc["gpus"])
    config: dict = {}
    for knob, value in (("global_batch_size", par["global_batch_size"]),
                        ("micro_batch_size", par["micro_batch_size"]), ("num_microbatches", gas),
                        ("zero_stage", par["zero_stage"]),
                        (request["precision"], True),
                        ("optimizer", ds.OPTIMIZER_TYPES[request["optimizer"]]),
                        *((("tp", par["tp"]),) if par["tp"] > 1 else ())):
        _put(config, K[knob], value)
    model = load_model(doc["model"])
    _put(config, K["optimizer_params"], _optimizer_params(model, request["optimizer"]))
    _put(config, K["grad_clip"], _clip(model))
    _put_buckets(config, par["zero_stage"], par.get("buckets") or {})
    if request.get("grad_reduce_dtype") not in (None, request["precision"]):
        _put(config, K["grad_reduce_dtype"], request["grad_reduce_dtype"])
    for state in sorted(par.get("offload", ())):
        _put(config, K[ds.OFFLOAD[state]], "cpu")
    deviations = _recompute_deviation(par, model.num_hidden_layers, doc)
    deviations += _put_overlaps(config, par.get("overlap") or {}, par["zero_stage"],
                                (par.get("buckets") or {}).get("zero3_prefetch"))
    if par["sequence_parallel"] and par["tp"] == 1:
        deviations.insert(0, "sequence_parallel=true not written: at tp=1 there is nothing to "
                             "split the sequence over (no effect on memory or time)")
    return Emitted(framework="deepspeed", text=json.dumps(config, indent=2) + "\n",
                   suffix=SUFFIX, deviations=tuple(deviations), placeholders=(_lr_note(model),),
                   recompute_in_code=code_recompute(doc))


_RECIPE_PARAMS = {"weight_decay": "weight_decay", "adam_eps": "eps"}
"""Recipe knob (`planner.emit.megatron.RECIPES`) -> the AdamW `optimizer.params` key it sets (betas from
adam_beta1 / adam_beta2)."""


def _recipe_values(model) -> dict[str, str]:
    from planner.emit.megatron import recipe

    found = recipe(model)
    return dict(found.values) if found else {}


def _lr(model) -> str:
    """The peak learning rate: the model's published one (`megatron.LEARNING_RATES`), else the placeholder the
    Megatron emitter writes (`megatron.PLACEHOLDERS` LR)."""
    from planner.emit.megatron import PLACEHOLDERS, learning_rate

    rate = learning_rate(model)
    return rate.lr if rate else next(default for var, default, _ in PLACEHOLDERS if var == "LR")


def _lr_note(model) -> str:
    """The stderr line (`Emitted.placeholders`: JSON has no comments) saying where the JSON's learning rate comes
    from: the model's published peak with its source, or a placeholder to set; either way the JSON writes no
    scheduler section, so the rate is constant unless the training script builds a schedule."""
    from planner.emit.megatron import learning_rate

    rate, key = learning_rate(model), f"{K['optimizer_params']}.lr"
    if rate is None:
        return (f"PLACEHOLDER: {key} is {float(_lr(model)):g}, the plan does not know the "
                f"learning rate (--emit megatron writes the same placeholder; DeepSpeed's own default is "
                f"{ds.OPTIMIZER_DEFAULTS['adamw']['lr']:g}): set your peak learning rate before launching")
    return (f"{key} is {model.name}'s published peak learning rate {float(rate.lr):g} ({rate.source}); the JSON "
            f"writes no scheduler, so DeepSpeed holds it constant unless the training script builds the warm-up "
            f"and decay (--emit megatron writes them)")


def _optimizer_params(model, optimizer: str) -> dict:
    """`optimizer.params` (module docstring): OPTIMIZER_DEFAULTS with the family's published AdamW values and
    the model's published learning rate, else the placeholder one."""
    params = {**ds.OPTIMIZER_DEFAULTS[optimizer], "lr": float(_lr(model))}
    values = _recipe_values(model)
    if optimizer == "adamw":
        params["betas"] = [float(values.get(f"adam_beta{i + 1}", b)) for i, b in enumerate(params["betas"])]
        params.update({key: float(values[knob]) for knob, key in _RECIPE_PARAMS.items() if knob in values})
    return params


def _clip(model) -> float:
    """The gradient clip: the family's published clip_grad, else DeepSpeed's default."""
    return float(_recipe_values(model).get("clip_grad", ds.DEFAULT["grad_clip"]))


def _put_buckets(config: dict, stage: int, buckets: dict) -> None:
    """The ZeRO bucket and threshold sizes of `stage` the memory model costs (`ds.BUCKETS`): the plan's
    `buckets` where it gives them, else DeepSpeed's defaults; ZeRO-1/2 the reduce and all-gather
    buckets, ZeRO-3 the reduce bucket, the live-parameter cap and the persistence threshold (the
    prefetch bucket is the overlap switch, `_put_overlaps`); none at stage 0 (no ZeRO optimizer)."""
    if stage == 0:
        return
    knobs = ("reduce_bucket",) + (("zero3_live_parameters", "zero3_persistence") if stage == 3
                                  else ("allgather_bucket",))
    for knob in knobs:
        _put(config, K[knob], buckets.get(knob, ds.DEFAULT[knob]))


def _put_overlaps(config: dict, overlaps: dict, stage: int, prefetch: int | None = None) -> list[str]:
    """Write the plan's overlap knobs DeepSpeed has keys for (`ds.overlap_switches`): the
    gradient-reduce overlap as the ZeRO comm-overlap switch, the ZeRO-3 parameter prefetch as its
    bucket size (`prefetch`, the plan's, else DeepSpeed's default when on; 0 when off); a deviation line for each knob the plan
    sets that DeepSpeed cannot switch."""
    out = []
    for knob, on in overlaps.items():
        if knob not in ds.overlap_switches(stage):
            if on != ds.overlap_defaults(stage)[knob]:
                out.append(f"{knob}={str(on).lower()} not written: DeepSpeed has no key for it at "
                           f"ZeRO-{stage} (it runs {str(ds.overlap_defaults(stage)[knob]).lower()})")
        elif knob == "overlap_grad_reduce":
            _put(config, K[knob], on)
        else:
            _put(config, K["zero3_prefetch"], (prefetch or ds.DEFAULT["zero3_prefetch"]) if on else 0)
    return out


def code_recompute(doc: dict) -> tuple[dict[str, int], ...] | None:
    """[stage] {mode: layers} the model code must checkpoint, as the deviation line says (a
    selectively recomputed layer wrapped in full) for a plan `write` accepts; None when the plan
    recomputes nothing. For a gate `Target` read back from the JSON, which cannot carry recompute
    (`planner check` of the JSON alone assumes none): `dataclasses.replace(target,
    recompute_per_stage=...)`."""
    par = doc["plan"]["parallelism"]
    layers = load_model(doc["model"]).num_hidden_layers
    counts = _stage_counts(par, layers)
    if counts.get("full", 0) + counts.get("selective", 0) == 0:
        return None
    return ({"full": layers},)  # every layer: one mode for all, as `check --recompute` states


def _stage_counts(par: dict, layers: int) -> dict[str, int]:
    """The plan's recompute counts of its one stage (pp = 1)."""
    mode = par["recompute"]
    return {mode: layers} if isinstance(mode, str) else dict(par["recompute"][0])


def _refuse(par: dict, request: dict) -> None:
    """SpecError (key --emit) for a plan a DeepSpeed JSON cannot run, naming what to pin."""
    unknown = sorted(set(par) - _KNOWN)
    if unknown:
        raise SpecError(f"plan.parallelism key {unknown[0]!r} has no DeepSpeed JSON mapping in this "
                        f"writer; known: {', '.join(sorted(_KNOWN))}", key="--emit")
    if (request.get("fixed") or {}).get("recompute") == "selective":
        raise SpecError("recompute=selective was pinned, but DeepSpeed checkpoints whole layers "
                        f"({ds.CHECKPOINT_CALL}): pin --fix recompute=full or none",
                        key="--emit")
    if request["framework"] != "deepspeed":
        raise SpecError(f"the plan was searched under {request['framework']}'s conventions "
                        f"(request.framework), whose memory differs from DeepSpeed's; plan again "
                        f"with --emit deepspeed (or --framework deepspeed)", key="--emit")
    for key, reason in NOT_IN_JSON.items():
        if par.get(key, 1) > 1:
            raise SpecError(f"{key}={par[key]} cannot be run from a DeepSpeed JSON: {reason}; plan "
                            f"with --fix {key}=1", key="--emit")
    if par["sequence_parallel"] and par["tp"] > 1:
        raise SpecError(f"sequence_parallel with tp={par['tp']}: DeepSpeed AutoTP has no sequence "
                        f"parallelism, and without it each GPU keeps {par['tp']}x the plan's "
                        f"norm/dropout activations; plan with --fix sequence_parallel=false",
                        key="--emit")
    if request["precision"] not in ds.PRECISION_SECTIONS:
        raise SpecError(f"precision {request['precision']}: a DeepSpeed JSON enables bf16 or fp16 "
                        f"only (fp8 is Transformer Engine in model code); plan with --precision "
                        f"bf16", key="--emit")
    if request["optimizer"] not in ds.OPTIMIZER_TYPES:
        raise SpecError(f"optimizer {request['optimizer']}: no DeepSpeed or torch.optim optimizer "
                        f"of that name; plan with --optimizer adamw (or sgd)", key="--emit")
    if "activations" in par.get("offload", ()):
        raise SpecError(f"offloading activations: a DeepSpeed JSON offloads them only for layers "
                        f"the model code checkpoints ({K['recompute_tuning']}.cpu_checkpointing); "
                        f"plan without activation offload", key="--emit")


def _accumulation(par: dict, gpus: int) -> int:
    """The gradient accumulation steps, checked so DeepSpeed's batch assertion and mesh hold."""
    dp, tp, micro, gas = par["dp"], par["tp"], par["micro_batch_size"], par["num_microbatches"]
    if dp * tp != gpus:
        raise SpecError(f"dp={dp} x tp={tp} != gpus {gpus}: DeepSpeed's mesh is (gpus // tp, tp)",
                        key="--emit")
    if micro * gas * dp != par["global_batch_size"]:
        raise SpecError(f"global_batch_size={par['global_batch_size']} != micro_batch_size {micro} "
                        f"x num_microbatches {gas} x dp {dp}: DeepSpeed asserts they are equal",
                        key="--emit")
    return gas


def _put(config: dict, path: str, value) -> None:
    """Set the dotted key `path` of `config` to `value`, creating its sections in order."""
    *sections, key = path.split(".")
    for name in sections:
        config = config.setdefault(name, {})
    config[key] = value


def _recompute_deviation(par: dict, layers: int, doc: dict) -> list[str]:
    """The line telling the user to checkpoint every layer in code (empty: no recompute): the
    JSON cannot carry recompute, `planner check --recompute` takes one mode for all layers, and
    Hugging Face's gradient_checkpointing_enable() wraps them all, so a plan that recomputes some
    layers is emitted recomputing all of them in full (more recompute, never more memory)."""
    counts = _stage_counts(par, layers)
    full, selective = counts.get("full", 0), counts.get("selective", 0)
    if full + selective == 0:
        return []
    planned = f"{full} in full" + (f" and {selective} selectively" if selective else "")
    check = (f"planner check FILE -m {doc['model']} -c {doc['cluster']} --gpus {doc['gpus']} "
             f"--seq-len {doc['request']['seq_len']} --recompute full")
    return [f"recompute is not a DeepSpeed JSON key: wrap every one of the {layers} decoder layers "
            f"in {ds.CHECKPOINT_CALL} in the model code (or call "
            f"gradient_checkpointing_enable() on a Hugging Face model); the plan recomputes "
            f"{planned} of {layers}, DeepSpeed checkpoints whole layers and one mode for all is "
            f"what the check states: `{check}`"]
