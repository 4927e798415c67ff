"""Writers of torchtitan launches: the command line of current releases (`planner plan --emit
torchtitan`, `write_command`, at the end of this module) and the TOML job config of older ones
(`--emit torchtitan-toml`, `write`); both from the same settings.

Key names, sections and sources: `planner.frameworks.torchtitan` (the table the reader shares;
pytorch/torchtitan 238fa99, the last commit with TOML job configs). Only the current spellings are
written ([parallelism], the local batch, the "quantize.linear.float8" converter of 8a2686c).

Mapping from the plan (`plan.parallelism`, DESIGN.md placement semantics):
- ZeRO: torchtitan shards with FSDP2 over the shard degree (x cp), `ParallelDims.fsdp_enabled`.
  zero_stage 3 -> replicate 1, shard dp (HSDP: replicate dp / dp_shard when the plan names a shard
  group); zero_stage 2 -> the same with the reshard policy "never" (parameters stay gathered from
  forward to backward: ZeRO-2, `torchtitan/distributed/fsdp.py`
  `get_fsdp_reshard_after_forward_policy`); zero_stage 0 -> DDP (replicate dp) where torchtitan
  runs it: not with tp or pp (`parallelize.py`: "DDP has not supported > 1D parallelism") and not
  with cp (cp turns FSDP on). zero_stage 1 has no torchtitan form (nothing shards the optimizer
  alone). Where torchtitan cannot do the plan's stage, FSDP (ZeRO-3: less memory per GPU) is
  written and the change listed.
- TP: the tensor-parallel degree; torchtitan's TP always shards norm activations over the sequence
  (`apply_tp` SequenceParallel), so sequence parallelism is on whenever tp > 1.
- EP: the expert and expert-tensor parallel degrees (etp = 1 or tp, and ep borrows cp and part of
  dp_shard (x tp when etp = 1): `parallel_dims.py` `ParallelDims._validate`).
- Batch: the local batch = micro-batch when pp = 1 (the rest is gradient accumulation:
  global batch / (local x dp) steps, `train.py`); with pp > 1 one pipeline run takes the whole
  local batch, global / dp sequences, in pipeline micro-batch pieces (`pipeline_parallel.py`
  `build_pipeline_schedule`: n_microbatches = local // microbatch_size).
- Pipeline: the degree; schedule 1F1B (vpp 1) or Interleaved1F1B (vpp stages per rank: the layers
  per stage where its stage count ceil((L + 2) / n) is pp x vpp, `pipeline_llm`). torchtitan's own
  split (`generate_llm_fqn_per_model_part`: L + 1 + 1 effective layers spread evenly, the embedding
  and the output each weighing one layer) is kept when it is the plan's; otherwise the module
  names per model part list each virtual stage's modules (tok_embeddings, layers.N, norm, output:
  the Llama-style names of torchtitan's models; on the command line of current releases the
  override `tt.CLI_PARTS` with one word per part and b5bcd76's output modules norm, lm_head);
  virtual stage s runs on rank s mod pp (`pipeline_module_split`, loop style).
- Recompute (`activation_checkpoint.py`): none | full | selective with option "op" (= the planner's
  selective) or N (layer SAC: every N-th block of a rank fully checkpointed). Layer SAC is one rule
  for the whole model; a per-stage mix is written as the option that keeps no more activations
  than the plan on any stage, changing the fewest layers.
- Precision: mixed-precision parameters "bfloat16"; fp8 adds the float8 linear converter to
  [model] converters and the recipe the plan costed (`tt.KEY["fp8_recipe"]`; the command line
  runs its config function's, rowwise for llama3_405b at b5bcd76, and refuses another).
  Optimizer: [optimizer] name AdamW (`components/optimizer.py` builds Adam and AdamW only).
- Model: llama-3.1-8b / -70b / -405b -> [model] name "llama3", flavor 8B / 70B / 405B
  (`models/llama3/__init__.py` llama3_args); for other models name/flavor are left to the user.
"""

from __future__ import annotations

import math

import json

from planner.emit import Emitted
from planner.errors import SpecError
from planner.frameworks import torchtitan as tt
from planner.frameworks.torchtitan import NAME as N
from planner.specs.model import ModelSpec, load_model

FRAMEWORK = "torchtitan"
SUFFIX = ".toml"
FLAVORS = {model: flavor for (name, flavor), model in tt.CATALOG.items() if name == "llama3"}
"""Catalog model -> [model] flavor of torchtitan's "llama3", the model whose TOML presets the
TOML releases shipped (`planner.frameworks.torchtitan.CATALOG`)."""
_MODES = ("none", "selective", "full")


def write(doc: dict) -> Emitted:
    """The torchtitan TOML job config of plan file `doc` (module docstring; `--emit
    torchtitan-toml`, for releases up to 238fa99).

    Raises:
        SpecError: (key "--emit") a plan torchtitan cannot run at all, with what to pin instead.
    """
    settings, dev = _settings(doc)
    chunks = _loss_chunks(doc)
    if chunks != 1:
        dev.append(f"the plan was costed with torchtitan's chunked loss (loss_chunks={chunks}, "
                   f"ChunkedLossWrapper of the current releases); the TOML releases run the plain "
                   f"cross-entropy, which keeps every logit: `planner check` this file, or plan with "
                   f"--loss-chunks 1 (as `plan --emit torchtitan-toml` does)")
    return Emitted(framework=FRAMEWORK, text=_render(settings, dev), suffix=SUFFIX,
                   deviations=tuple(dev), placeholders=(_toml_lr_note(load_model(doc["model"])),))


TOML_LR_DEFAULTS = "lr 8e-4, 200 warm-up steps, linear decay to 0"
"""What a TOML release runs with no learning-rate keys. Source: pytorch/torchtitan@238fa99
`torchtitan/config/job_config.py` l. 138 (Optimizer lr), l. 170, 192, 200 (LRScheduler warmup_steps,
decay_type, min_lr_factor)."""


def _toml_lr_note(model: ModelSpec) -> str:
    """The stderr line (`Emitted.placeholders`) saying the TOML writes no learning rate, what torchtitan then runs,
    and the model's published peak where one is recorded (`emit.megatron.LEARNING_RATES`; the command-line
    form runs its preset's, which for the Llama 3 and DeepSeek-V3 presets is the published one)."""
    _, known = _published_lr(model)
    return (f"PLACEHOLDER: the TOML writes no learning rate or schedule, so torchtitan runs its defaults "
            f"({TOML_LR_DEFAULTS}); {known}: set yours before launching")


def _published_lr(model: ModelSpec):
    """(the model's `emit.megatron.LEARNING_RATES` entry or None, a clause naming it with its source)."""
    from planner.emit.megatron import learning_rate

    rate = learning_rate(model)
    return rate, (f"{model.name}'s published peak is {float(rate.lr):g} ({rate.source})" if rate else
                  f"no published learning rate of {model.name} is recorded")


def _cli_lr_note(model: ModelSpec, preset_key: tuple[str, str]) -> str:
    """The line (a comment of the launch and a stderr note, `Emitted.placeholders`) saying which learning
    rate and schedule the launch runs: its config function's (`tt.PRESET_LR` over `tt.LR_SCHEDULER_DEFAULT`),
    which the command line cannot change (the rate is a param-group setting of the function), against the
    model's published peak and floor (`emit.megatron.LEARNING_RATES`); marked PLACEHOLDER where the peak is
    not the published one or none is recorded (review-fresh11 #7: the launch said nothing of it)."""
    set_by = tt.PRESET_LR[preset_key]
    schedule = {**tt.LR_SCHEDULER_DEFAULT, **set_by}
    lr, config = float(set_by["lr"]), preset_key[1]
    decay = ("" if schedule["decay_ratio"] is None else
             f" over the last {schedule['decay_ratio']:.0%} of the steps, held before,")
    runs = (f"{config} runs AdamW at lr {lr:g} with {schedule['warmup_steps']} warm-up steps and a "
            f"{schedule['decay_type']} decay{decay} to {lr * schedule['min_lr_factor']:g} at --training.steps "
            f"(pytorch/torchtitan {tt.CLI_COMMIT} models/{preset_key[0]}/config_registry.py {config}, "
            f"components/optimizer/lr_scheduler.py defaults); the rate "
            f"is the config function's (its optimizer param groups), not a command-line field, the schedule's "
            f"are --{tt.LR_SCHEDULER}.{{{','.join(f for f in tt.LR_SCHEDULER_DEFAULT)}}}")
    rate, known = _published_lr(model)
    if rate is None or float(rate.lr) != lr:
        return f"PLACEHOLDER: {runs}; {known}: set yours in a config function before launching"
    floor = "" if rate.min_lr is None or math.isclose(float(rate.min_lr), lr * schedule["min_lr_factor"]) else (
        f"; the published decay ends at {float(rate.min_lr):g}: --{tt.LR_SCHEDULER}.min_lr_factor "
        f"{float(rate.min_lr) / lr:g}")
    return f"learning rate: {runs}; {known}, the same{floor}"


def _loss_chunks(doc: dict) -> int:
    """The loss chunks the plan was costed with: the request's `loss_chunks`, or torchtitan's
    default (`placement.precision.LOSS_CHUNKS`)."""
    from planner.placement.precision import LOSS_CHUNKS
    chunks = doc["request"].get("loss_chunks")
    return LOSS_CHUNKS[FRAMEWORK] if chunks is None else chunks


def _settings(doc: dict, *, toml: bool = True) -> tuple[dict, list[str]]:
    """({setting: value} of `tt.KEYS`, deviations) of plan file `doc` (module docstring); `toml`:
    for the TOML job config, whose [model] name / flavor this writes (a command line names the
    model by its config function instead)."""
    spec = load_model(doc["model"])
    par, req = doc["plan"]["parallelism"], doc["request"]
    dev: list[str] = []
    _check_runnable(par, req)
    split = _rank_layers(spec, par)
    data = _data_parallel(par, dev)
    settings = {
        "description": f"{spec.name} on {doc['gpus']} x {doc['cluster']} "
                       f"(planner plan --emit torchtitan)",
        **_model(doc, spec, req, dev if toml else []),
        "optimizer": tt.OPTIMIZERS[req["optimizer"]],
        **_training(par, req),
        **data, **_tensor(par, dev), **_experts(par, data["shard"]), **_pipeline(spec, par, split),
        **_recompute(par["recompute"], split, dev),
    }
    if req.get("framework", FRAMEWORK) != FRAMEWORK:
        dev.append(f"the plan was costed with {req['framework']} conventions; torchtitan's differ "
                   f"(eager-module activations, fp32 sharded parameters, FSDP2 residency): run "
                   f"`planner check` on this file, or plan with --framework torchtitan")
    return settings, dev


def _fail(message: str) -> SpecError:
    return SpecError(message, key="--emit")


def _check_runnable(par: dict, req: dict) -> None:
    """Plans torchtitan cannot run whatever the config says."""
    if req["optimizer"] not in tt.OPTIMIZERS:
        raise _fail(f"torchtitan builds Adam / AdamW only (components/optimizer.py), not "
                    f"{req['optimizer']!r}: plan with --optimizer adamw")
    if req["precision"] not in ("bf16", "fp8"):
        raise _fail(f"torchtitan trains with {N['param_dtype']} bfloat16 (fp8 through the float8 "
                    f"converter); {req['precision']!r} has no loss scaling there: plan with "
                    f"--precision bf16 on a GPU that has it")
    if par["pp"] > 1 and par["vpp"] > 1:
        m = par["num_microbatches"]
        rounds = max(1, m // par["pp"])
        if m % rounds:
            raise _fail(f"Interleaved1F1B with {m} micro-batches over pp={par['pp']}: torch's "
                        f"ScheduleInterleaved1F1B needs them a multiple of max(1, m // pp) = "
                        f"{rounds} rounds (schedules.py raises ValueError): pin --fix vpp=1, or a "
                        f"global batch giving a multiple of pp micro-batches")


def _rank_layers(spec: ModelSpec, par: dict) -> list[int]:
    """Decoder layers per pipeline rank: the plan's split, or all layers at pp = 1."""
    layers = par.get("pipeline_layers")
    return list(layers) if layers else [spec.num_hidden_layers]


def _data_parallel(par: dict, dev: list[str]) -> dict:
    """The replicate and shard degrees (+ the ZeRO-2 reshard policy)."""
    dp, tp, pp, cp, zero = (par[k] for k in ("dp", "tp", "pp", "cp", "zero_stage"))
    shard = par.get("dp_shard") or dp
    keys = {"replicate": dp // shard, "shard": shard}
    fsdp = f"FSDP2 (ZeRO-3) over dp_shard {shard} x cp {cp} = {shard * cp} GPUs"
    if zero == 0:
        if dp == 1 and cp == 1:
            return {"replicate": 1, "shard": 1}
        if cp > 1:
            dev.append(f"ZeRO-0 with cp={cp}: torchtitan turns FSDP on over dp_shard x cp "
                       f"(ParallelDims.fsdp_enabled); written as {fsdp}, less memory per GPU")
            return keys
        if tp > 1 or pp > 1:
            dev.append(f"ZeRO-0 (DDP over dp={dp}) with tp={tp} pp={pp}: torchtitan refuses DDP with "
                       f"more than 1-D parallelism (parallelize.py); written as {fsdp}, less "
                       f"memory per GPU")
            return keys
        return {"replicate": dp, "shard": 1}
    if shard * cp == 1:
        dev.append(f"ZeRO-{zero} over a data-parallel group of 1 shards nothing: torchtitan runs "
                   f"without FSDP at dp=1 (same memory)")
        return {"replicate": dp, "shard": 1}
    if zero == 1:
        dev.append(f"ZeRO-1: torchtitan has no optimizer-only sharding; written as {fsdp} "
                   f"(parameters and gradients sharded too: less memory, 1.5x the DP traffic)")
    if zero == 2:
        keys["reshard"] = tt.RESHARD_NEVER
    return keys


def _tensor(par: dict, dev: list[str]) -> dict:
    """The tensor- and context-parallel degrees; SP follows tp in torchtitan."""
    tp, sp = par["tp"], par["sequence_parallel"]
    if tp > 1 and not sp:
        dev.append(f"sequence parallelism on at tp={tp}: torchtitan's TP always shards norm "
                   f"activations over the sequence (apply_tp SequenceParallel); less activation "
                   f"memory than the plan")
    if tp == 1 and sp:
        dev.append("sequence_parallel dropped: it has no effect at tp=1")
    if par["cp"] > 1 and par.get("cp_comm_type", "p2p") != "p2p":
        dev.append(f"cp_comm_type {par['cp_comm_type']} written as ring attention: torchtitan's "
                   f"context parallelism passes K/V around the cp ranks (no all-to-all form)")
    # the plan's TP comm overlap is AsyncTP, which acts only under torch.compile
    asynchronous = bool((par.get("overlap") or {}).get("tp_comm_overlap")) and tp > 1
    compiled = asynchronous or bool(par.get("compile"))
    return {"tp": tp, "cp": par["cp"], **({"async_tp": True} if asynchronous else {}),
            **({"compile": True} if compiled else {})}


def _experts(par: dict, shard: int) -> dict:
    """The expert and expert-tensor parallel degrees, refused where
    `ParallelDims._validate` asserts (etp in {1, tp}; ep borrows all of cp (and tp when etp = 1)
    and part of dp_shard)."""
    ep, etp, tp, cp = par["ep"], par.get("etp", 1), par["tp"], par["cp"]
    if ep == 1:
        if etp != 1:
            raise _fail(f"etp={etp} without expert parallelism: torchtitan's "
                        f"{N['etp']} applies with {N['ep']} > 1; "
                        f"pin --fix etp=1")
        return {}
    if etp not in (1, tp):
        raise _fail(f"etp={etp} with ep={ep}: torchtitan supports etp = tp ({tp}) or 1 "
                    f"(ParallelDims._validate); pin --fix etp=1 or --fix etp={tp}")
    borrowed = cp * (tp if etp == 1 else 1)
    if ep % borrowed or (shard * borrowed) % ep:
        raise _fail(f"ep={ep} with etp={etp}: torchtitan's EP borrows all of cp{' x tp' if etp == 1 else ''}"
                    f" ({borrowed}) and part of dp_shard ({shard}), so ep must be a multiple of "
                    f"{borrowed} dividing {shard * borrowed} (ParallelDims._validate); pin --fix "
                    f"zero_stage=3 or an ep dividing {shard * borrowed}")
    return {"ep": ep, "etp": etp}


def default_split(num_layers: int, stages: int) -> list[int] | None:
    """Decoder layers per virtual stage of torchtitan's `generate_llm_fqn_per_model_part` with
    its default first/last stage weights (1 each): num_layers + 2 effective layers spread evenly,
    the remainder to the first stages, the first stage giving one to tok_embeddings and the last
    one to norm + output; None where a stage would be left with nothing.

    Source: torchtitan `distributed/pipeline_parallel.py` at 238fa99
    (pipeline_parallel_first/last_stage_less_layers default 1, `job_config.py`)."""
    if stages == 1:
        return [num_layers]
    base, extra = divmod(num_layers + 2, stages)
    if base < 1:
        return None
    share = [base + (1 if s < extra else 0) for s in range(stages)]
    share[0] -= 1
    share[-1] -= 1
    return share


def _per_rank(parts: list[int], pp: int) -> list[int]:
    """Layers per rank when virtual stage s runs on rank s mod pp (loop style)."""
    return [sum(parts[r::pp]) for r in range(pp)]


def _pipeline(spec: ModelSpec, par: dict, split: list[int]) -> dict:
    """The pipeline keys: degree, schedule, micro-batch size and the split (module docstring)."""
    pp, vpp, n = par["pp"], par["vpp"], spec.num_hidden_layers
    if pp == 1:
        if vpp > 1:
            raise _fail(f"vpp={vpp} with pp=1: interleaving needs pipeline stages; pin --fix vpp=1")
        return {"pp": 1}
    keys = {"pp": pp, "pp_schedule": "1F1B" if vpp == 1 else "Interleaved1F1B",
            "pp_microbatch_size": par["micro_batch_size"]}
    stages = pp * vpp
    default = default_split(n, stages)
    if default is not None and _per_rank(default, pp) == split:
        if vpp in (1, 2):  # pipeline_llm's default: 1 stage per rank (1F1B), 2 (Interleaved1F1B)
            return keys
        per = next((k for k in range(1, n + 3) if -(-(n + 2) // k) == stages), None)
        if per is not None:
            return {**keys, "pp_layers_per_stage": per}
    return {**keys, "pp_fqns": _fqns(split, pp, vpp)}


def _fqns(split: list[int], pp: int, vpp: int) -> list[list[str]]:
    """Module names of each virtual stage: rank r's layers cut into vpp near-equal chunks (the
    larger first), chunk c of rank r is virtual stage c x pp + r; layers numbered in stage order."""
    chunks = [[n // vpp + (1 if c < n % vpp else 0) for c in range(vpp)] for n in split]
    parts, first = [], 0
    for s in range(pp * vpp):
        size = chunks[s % pp][s // pp]
        parts.append([f"layers.{i}" for i in range(first, first + size)])
        first += size
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def _training(par: dict, req: dict) -> dict:
    """local / global batch, seq_len and the mixed-precision parameter dtype (module docstring)."""
    b, dp, global_batch = par["micro_batch_size"], par["dp"], req["global_batch_size"]
    local = b if par["pp"] == 1 else global_batch // dp
    return {"local_batch": local, "global_batch_size": global_batch,
            "seq_len": req["seq_len"], "param_dtype": "bfloat16"}


def _model(doc: dict, spec: ModelSpec, req: dict, dev: list[str]) -> dict:
    """[model] name / flavor for torchtitan's llama3 presets, and the fp8 converter."""
    keys: dict = {}
    ref = str(doc["model"])
    if ref in FLAVORS and spec == load_model(ref):
        keys = {"model_name": "llama3", "model_flavor": FLAVORS[ref]}
    else:
        dev.append(f"[model] name/flavor left out: the TOML releases of torchtitan (up to "
                   f"238fa99) have no model this planner maps to {spec.name}; set them to your "
                   f"model's registration (planner check reads this file with --model {ref})")
    if req["precision"] == "fp8":
        keys["converters"] = [tt.FP8_CONVERTER]
        keys["fp8_recipe"] = _fp8_recipe(req, tt.FP8_RECIPES["toml"], "--emit torchtitan-toml")
    return keys


def _fp8_recipe(req: dict, allowed: tuple[str, ...], form: str) -> str:
    """The float8 recipe the plan costed (its request's, written down by `plan`; an older plan file
    without one was costed with `tt.FP8_RECIPE_DEFAULT`), if `allowed` takes it.

    Raises:
        SpecError: (key "--emit") a recipe this form cannot run, naming the ones it can."""
    recipe = req.get("fp8_recipe") or tt.FP8_RECIPE_DEFAULT
    if recipe not in allowed:
        raise _fail(f"the plan was costed with fp8 recipe {recipe}, which {form} cannot run (it takes "
                    f"{', '.join(allowed)}): plan with --fp8-recipe {allowed[0]}")
    return recipe


def _recompute(recompute: str | list, split: list[int], dev: list[str]) -> dict:
    """[activation_checkpoint]: the plan's mode, or for per-stage counts the nearest option."""
    if isinstance(recompute, str):
        return _ac(recompute, None)
    plan = [{m: int(c.get(m, 0)) for m in _MODES} for c in recompute]
    mode, every, counts = min(_ac_options(plan, split), key=lambda o: _changes(plan, o[2]))
    rule = (f'{N["ac_option"]} = "{every}" (every {every}th block of each rank fully '
            f'checkpointed)' if every else f'mode "{mode}"' + (' (op SAC)' if mode == "selective" else ''))
    for s, (want, got) in enumerate(zip(plan, counts)):
        if want != got:
            dev.append(f"stage {s}: recompute {_counts(got)} (plan: {_counts(want)}): {rule} is the "
                       f"nearest single rule that keeps no more activations than the plan on any "
                       f"stage; torchtitan has no per-stage activation checkpointing")
    return _ac(mode, every)


def _ac(mode: str, every: int | None) -> dict:
    if mode != "selective":
        return {"ac_mode": mode}
    return {"ac_mode": "selective", "ac_option": tt.OP_SAC if every is None else str(every)}


def _ac_options(plan: list[dict], split: list[int]):
    """(mode, layer-SAC N or None, per-stage counts) of every setting that keeps no more
    activations than the plan on any stage: a layer the plan recomputes fully must be fully
    recomputed; a selective one selectively or fully; a kept one anything."""
    if all(c["full"] == c["selective"] == 0 for c in plan):
        yield "none", None, [{"none": n, "selective": 0, "full": 0} for n in split]
    if all(c["full"] == 0 for c in plan):
        yield "selective", None, [{"none": 0, "selective": n, "full": 0} for n in split]
    yield "full", None, [{"none": 0, "selective": 0, "full": n} for n in split]
    for every in range(2, max(split) + 1):
        counts = [{"none": n - n // every, "selective": 0, "full": n // every} for n in split]
        if all(g["full"] >= c["full"] + c["selective"] for g, c in zip(counts, plan)):
            yield "selective", every, counts


def _changes(plan: list[dict], counts: list[dict]) -> tuple[int, int]:
    """(layers whose mode changes, fully recomputed layers): fewer changes first, then less
    recompute. A change moves a layer toward more recompute (none -> selective -> full)."""
    moved = sum(max(0, c[m] - p[m]) for p, c in zip(plan, counts) for m in ("selective", "full"))
    return moved, sum(c["full"] for c in counts)


def _counts(c: dict) -> str:
    return ", ".join(f"{m} {c[m]}" for m in _MODES)


def _render(settings: dict, deviations: list[str]) -> str:
    """TOML text: {setting: value} under each setting's [section] and key (`planner.frameworks.
    torchtitan`), sections in the order their first setting comes; JSON-encoded strings and arrays
    (valid TOML basic strings and inline arrays), deviations as leading comments."""
    sections: dict[str, dict] = {}
    for setting, value in settings.items():
        sections.setdefault(tt.SECTION[setting], {})[N[setting]] = value
    lines = ["# torchtitan job config written by `planner plan --emit torchtitan`"]
    lines += [f"# deviation: {d}" for d in deviations]
    for name, keys in sections.items():
        lines += ["", f"[{name}]"]
        lines += [f"{key} = {_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def _value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value)


# ---------------------------------------------------------------- current releases (2026)

COMMAND_SUFFIX = ".sh"
TRAIN_MODULE = "torchtitan.train"
"""What torchrun runs (`run_train.sh`: `-m torchtitan.train`)."""
_CLI_OVERRIDES = ("replicate", "shard", "reshard", "tp", "pp", "cp", "ep", "pp_schedule",
                  "pp_layers_per_stage", "param_dtype", "offload")
"""Settings written as `--section.field` overrides (each `tt.KEY` is a field of b5bcd76's
TrainingConfig / ParallelismConfig, `tt.CLI_FIELDS`)."""


def write_command(doc: dict) -> Emitted:
    """The torchtitan launch of plan file `doc` for current releases (`tt.CLI_COMMIT`): torchrun
    running `torchtitan.train --module M --config C` with the torchtitan preset of the plan's model
    (`tt.PRESETS`) and every setting the plan decides as a dotted override (the batch in tokens:
    micro-batch x context per data-parallel rank and forward, global batch x context per step),
    activation checkpointing as its subcommand. The settings are those of the TOML writer (module
    docstring).

    Raises:
        SpecError: (key "--emit") what `write` raises; a model torchtitan ships no preset of; a
            setting only a config function can give (layer-level selective checkpointing, an
            expert tensor-parallel degree, a float8 converter the preset lacks or has), naming the
            alternative. A pipeline split other than torchtitan's own is written as the module
            names of each model part (`tt.CLI_PARTS`).
    """
    settings, dev = _settings(doc, toml=False)
    preset_key = _preset(doc, settings)
    preset = tt.PRESETS[preset_key]
    if settings.get("ac_option", tt.OP_SAC) != tt.OP_SAC:
        raise _fail(f"layer-level selective checkpointing (one block in every {settings['ac_option']}, "
                    f"the nearest rule to the plan's per-stage recompute) is set by a config "
                    f"function, not the command line ({tt.CLI_COMMIT}): pin one mode on every "
                    f"layer, --fix recompute=full (or recompute=selective, op SAC), or write a "
                    f"config function")
    if settings.get("etp", 1) != 1:
        raise _fail("an expert tensor-parallel degree is not a field of b5bcd76's ParallelismConfig: "
                    "pin --fix etp=1")
    if bool(preset.get("float8")) != ("converters" in settings):
        raise _fail(f"{preset_key[1]} {'trains' if preset.get('float8') else 'does not train'} with "
                    f"the float8 converter: plan with --precision "
                    f"{'fp8' if preset.get('float8') else 'bf16'}")
    if "converters" in settings and settings["fp8_recipe"] != preset["float8"]:
        raise _fail(f"{preset_key[1]} trains with fp8 recipe {preset['float8']} (its config function's "
                    f"Float8LinearConverter; the model config is off the command line at {tt.CLI_COMMIT}), "
                    f"the plan was costed with {settings['fp8_recipe']}: plan with --fp8-recipe "
                    f"{preset['float8']}, or write a config function")
    seq = settings["seq_len"]
    micro = settings.get("pp_microbatch_size", settings["local_batch"])
    overrides = {tt.KEY[s]: settings[s] for s in _CLI_OVERRIDES if s in settings}
    overrides[tt.CONTEXT] = seq
    overrides[tt.MICROBATCH_TOKENS] = micro * seq
    if settings["pp"] > 1:
        overrides[tt.PP_MICROBATCHES] = settings["local_batch"] // micro
    if "pp_fqns" in settings:  # a split other than torchtitan's own: module names per part
        overrides[tt.CLI_PARTS] = " ".join(",".join(part) for part in _cli_parts(settings["pp_fqns"]))
    overrides[tt.STEP_TOKENS] = settings["global_batch_size"] * seq
    if settings.get("compile"):
        overrides[tt.CLI_COMPILE] = True
    if settings.get("async_tp"):
        overrides[tt.CLI_ASYNC_TP] = True
    if _loss_chunks(doc) != tt.CLI_LOSS_CHUNKS_DEFAULT:
        overrides[tt.CLI_LOSS_CHUNKS] = _loss_chunks(doc)
    gpus = doc["gpus"]
    per_node = min(gpus, _gpus_per_node(doc))
    nodes = gpus // per_node
    rendezvous = [f'{_torchrun(knob)} "${knob.upper()}"' for knob in ("node_rank", "master_addr",
                                                                     "master_port")]
    launcher = [f"{_torchrun('nproc_per_node')} {per_node}", f"{_torchrun('nnodes')} {nodes}",
                *(rendezvous if nodes > 1 else []),
                f"-m {TRAIN_MODULE}", f"--module {preset_key[0]}", f"--config {preset_key[1]}"]
    body = launcher + [f"--{key} {_cli_value(value)}" for key, value in overrides.items()]
    body.append(f"{tt.AC_SUBCOMMANDS[0]}:{settings['ac_mode']}")
    lines = ["#!/bin/bash",
             f"# torchtitan launch written by `planner plan --emit torchtitan` (pytorch/torchtitan "
             f"{tt.CLI_COMMIT}: config function {preset_key[1]} with the plan's settings as "
             f"command-line overrides)"]
    lines += [f"# deviation: {d}" for d in dev]
    rate_note = _cli_lr_note(load_model(doc["model"]), preset_key)
    lines.append(f"# {rate_note}")
    if nodes > 1:
        lines += ['NODE_RANK="${NODE_RANK:-0}"  # this node, 0..' + str(nodes - 1),
                  'MASTER_ADDR="${MASTER_ADDR:-localhost}"', 'MASTER_PORT="${MASTER_PORT:-29500}"']
    lines += ["torchrun \\"] + [f"    {item} \\" for item in body[:-1]] + [f"    {body[-1]}", ""]
    return Emitted(framework=FRAMEWORK, text="\n".join(lines), suffix=COMMAND_SUFFIX,
                   deviations=tuple(dev), placeholders=(rate_note,))


def _cli_parts(parts: list[list[str]]) -> list[list[str]]:
    """The module names per model part with the output modules of current releases
    (`tt.CLI_OUTPUT_MODULES`) for the TOML releases' norm + output."""
    return [[m for m in part if m not in ("norm", "output")]
            + (list(tt.CLI_OUTPUT_MODULES) if "output" in part else []) for part in parts]


def _preset(doc: dict, settings: dict) -> tuple[str, str]:
    """The (--module, --config) of the first `tt.PRESETS` entry for the plan's catalog model."""
    ref = str(doc["model"])
    spec = load_model(ref)
    for key, preset in tt.PRESETS.items():
        if tt.CATALOG.get(preset["model"]) == ref and spec == load_model(ref):
            return key
    known = sorted({tt.CATALOG[p["model"]] for p in tt.PRESETS.values()})
    why = tt.HF_BACKEND_MOE_REFUSAL if spec.is_moe else tt.HF_BACKEND_DENSE_NOTE.format(
        hf_id=spec.extra.get("hf_id") or "HF_ID")
    raise _fail(f"torchtitan {tt.CLI_COMMIT} ships no config function this planner maps to "
                f"{spec.name} (known: {', '.join(known)}); {why}; write a config function, or "
                f"--emit torchtitan-toml for releases with TOML job configs")


def _torchrun(knob: str) -> str:
    from planner.frameworks.megatron import FLAG  # torchrun's flags live with Megatron's launcher
    return FLAG[knob]


def _gpus_per_node(doc: dict) -> int:
    from planner.specs.cluster import load_cluster
    return load_cluster(doc["cluster"], gpus=doc["gpus"]).gpus_per_node


def _cli_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
