"""`planner plan --emit megatron` (planner/emit/megatron.py): the script is read back by
planner/check/megatron.py to the plan's layout, up to exactly the deviations it lists.

Expected values: the plans' own numbers (round trip), flags derived by hand from a hand-written
plan (the arithmetic beside each assertion), Megatron's recompute semantics (block: the first N
layers of every model chunk, `megatron/core/recompute.py`).
"""

from __future__ import annotations

import copy
import dataclasses
import shlex

import pytest

from planner.check import evaluate, read_target
from planner.emit import emit
from planner.emit.megatron import expressible
from planner.errors import SpecError
from planner.placement.mtp import mtp_layers
from planner.plan import plan, plan_file, plan_layout
from planner.specs.cluster import load_cluster
from planner.specs.model import load_model

MODES = ("none", "selective", "full")


def _doc(model: str, gpus: int, *, seq_len=4096, gbs=256, **fixed) -> dict:
    data = plan(load_model(model), load_cluster("dgx-h100", gpus=gpus), seq_len=seq_len,
                global_batch_size=gbs, fixed=fixed)
    return plan_file(data)


def _hand(*, model="llama-3.1-8b", gpus=16, tp=2, pp=2, cp=1, dp=4, ep=1, etp=1, zero=1, sp=True,
          mbs=1, gbs=128, vpp=1, recompute="selective", split=(16, 16), seq_len=4096,
          precision="bf16", optimizer="adamw", framework="megatron", headroom=0.1) -> dict:
    """A hand-written plan file (the keys `plan_file` writes)."""
    return {
        "kind": "training-plan", "version": 1, "model": model, "cluster": "dgx-h100", "gpus": gpus,
        "request": {"seq_len": seq_len, "global_batch_size": gbs, "precision": precision,
                    "optimizer": optimizer, "framework": framework, "fixed": {},
                    "headroom": headroom, "reserve_bytes": 2 * 2**30},
        "plan": {"parallelism": {
            "dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "etp": etp, "zero_stage": zero,
            "sequence_parallel": sp, "micro_batch_size": mbs, "global_batch_size": gbs,
            "num_microbatches": gbs // (mbs * dp), "vpp": vpp, "recompute": recompute,
            "pipeline_layers": list(split),
            # what `planner plan` sets (`overlap.tuned`): tp-comm only where tp > 1 with SP,
            # param-gather only with a distributed optimizer or Megatron-FSDP (ZeRO >= 1)
            "overlap": {**({"tp_comm_overlap": True} if tp > 1 and sp else {}),
                        "overlap_grad_reduce": True,
                        **({"overlap_param_gather": True} if zero >= 1 else {})}}},
    }


def _read_back(doc: dict, tmp_path):
    emitted = emit(doc, "megatron")
    assert emitted.suffix == ".sh" and emitted.framework == "megatron"
    path = tmp_path / f"launch{emitted.suffix}"
    path.write_text(emitted.text)
    target = read_target(path, model=doc["model"], cluster=doc["cluster"], gpus=doc["gpus"],
                         seq_len=doc["request"]["seq_len"])
    return emitted, target


def _split_of(target) -> tuple[int, ...]:
    """The reader's split; None is its even split."""
    layout = target.layout
    return layout.pipeline_layers or (target.model.num_hidden_layers // layout.pp,) * layout.pp


def _counts(target) -> list[dict[str, int]]:
    """Per-stage recompute counts of the target (a uniform mode: that mode on every layer)."""
    if target.recompute_per_stage is None:
        return [{target.layout.recompute: n} for n in _split_of(target)]
    return [dict(c) for c in target.recompute_per_stage]


def _plan_counts(doc: dict) -> list[dict[str, int]]:
    par = doc["plan"]["parallelism"]
    if isinstance(par["recompute"], str):
        return [{par["recompute"]: n} for n in par["pipeline_layers"]]
    return [dict(c) for c in par["recompute"]]


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {m: n for m, n in counts.items() if n}


def _assert_round_trip(doc: dict, emitted, target, *, changed_stages=(), split_changed=False):
    """The target's layout is the plan's field by field, the recompute counts are equal on every
    stage a deviation does not name, and the split is the plan's unless a deviation says not."""
    want = plan_layout(doc["plan"], doc["request"])
    want = want.replace(mtp_layers=mtp_layers(load_model(doc["model"]), want))  # a hand plan: the default
    got = target.layout.replace(pipeline_layers=_split_of(target))
    per_stage = target.recompute_per_stage or not isinstance(
        doc["plan"]["parallelism"]["recompute"], str)
    skip = {"pipeline_layers"} | ({"recompute"} if per_stage else set())  # counts compared below
    if want.pipeline_layout is None and got.pipeline_layout is not None:  # a split as layout string
        skip.add("pipeline_layout")
    for field in dataclasses.fields(want):
        if field.name not in skip:
            assert getattr(got, field.name) == getattr(want, field.name), field.name
    named_split = any(d.startswith("pipeline split") for d in emitted.deviations)
    assert named_split == split_changed
    if not split_changed:
        assert got.pipeline_layers == want.pipeline_layers
    plan_counts = _plan_counts(doc)
    mode = doc["plan"]["parallelism"]["recompute"]
    if split_changed and isinstance(mode, str):  # the plan's one mode on the moved split
        plan_counts = [{mode: n} for n in got.pipeline_layers]
    for stage, (a, b) in enumerate(zip(_counts(target), plan_counts)):
        if stage in changed_stages:
            assert any(_names_stage(d, stage) for d in emitted.deviations), stage
        else:
            assert _nonzero(a) == _nonzero(b), stage
    assert evaluate(target)["verdict"] == "pass"


def _names_stage(line: str, stage: int) -> bool:
    """Whether a deviation line starts by naming `stage` ("stage 2:" or "stages 1-3:")."""
    head = line.split(":")[0].split()
    if head[0] == "stage":
        return int(head[1]) == stage
    if head[0] == "stages":
        first, last = map(int, head[1].split("-"))
        return first <= stage <= last
    return False


# ---------------------------------------------------------------- round trip of real plans

@pytest.mark.parametrize("model, gpus, fixed", [
    ("llama-3.1-8b", 8, {}),                                  # dp 8, ZeRO-3, pp 1
    ("llama-3.1-8b", 16, {"pp": 2}),                          # uneven 2-stage split, cp 2
    ("llama-3.1-8b", 16, {"pp": 2, "recompute": "selective"}),
    ("llama-3.1-8b", 8, {"zero_stage": 2, "recompute": "full"}),
    ("llama-3.1-8b", 16, {"zero_stage": 3}),
    ("llama-3.1-70b", 64, {"pp": 4, "vpp": 2}),               # interleaved, even split
    # MoE with expert parallelism; selective on every layer (Megatron's one granularity), with
    # the recompute module list the search chose (layernorm, moe_act; issue 8 item 2)
    ("mixtral-8x7b", 64, {"ep": 8, "recompute": "selective"}),
])
def test_real_plans_read_back_exactly(tmp_path, model, gpus, fixed):
    doc = _doc(model, gpus, **fixed)
    emitted, target = _read_back(doc, tmp_path)
    assert emitted.deviations == ()
    _assert_round_trip(doc, emitted, target)


def test_real_70b_plan_with_a_recompute_mix_and_uneven_middle(tmp_path):
    """llama-3.1-70b on 64 GPUs: the planner's best plan recomputes 2 layers on stage 0 only and
    splits 19/20/21/20 (middle stages differ): Megatron gets block recompute of 2 layers on every
    stage and the plan's split as a layout string."""
    doc = _doc("llama-3.1-70b", 64, gbs=1024)
    par = doc["plan"]["parallelism"]
    if isinstance(par["recompute"], str) or expressible(tuple(par["pipeline_layers"]), par["vpp"]):
        pytest.skip("the planner's best plan changed; the hand-written deviation tests cover this")
    emitted, target = _read_back(doc, tmp_path)
    n = max(c["full"] + c["selective"] for c in par["recompute"])
    assert f"--recompute-num-layers {n}" in emitted.text
    split = _split_of(target)
    assert split == tuple(par["pipeline_layers"]) and sum(split) == 80
    assert all(c["full"] == min(n, k) for c, k in zip(_counts(target), split))
    assert evaluate(target)["verdict"] == "pass"


# ---------------------------------------------------------------- known text

def _flags(text: str) -> list[str]:
    """The torchrun command's words after pretrain_gpt.py, flags joined with their values."""
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    words = words[words.index("pretrain_gpt.py") + 1:]
    out = []
    for w in words:
        if w.startswith("--"):
            out.append(w)
        else:
            out[-1] += " " + w
    return out


def test_known_flags_of_a_hand_written_plan():
    """llama-3.1-8b (32 layers, h 4096, FFN 14336, 32 heads, 8 KV heads, head 128, vocab 128256,
    128k positions, untied) on 16 GPUs: tp 2 x pp 2 x cp 1 -> dp 16 / 4 = 4; fp8, ZeRO-1, SP,
    selective recompute, even split 16/16, global batch 128 of micro-batch 1."""
    doc = _hand(precision="fp8")
    emitted = emit(doc, "megatron")
    assert emitted.deviations == ()
    assert emitted.text.startswith("#!/bin/bash\n")
    assert "torchrun \\\n    --nproc_per_node 8 \\\n    --nnodes 2 \\\n" in emitted.text
    assert _flags(emitted.text) == [
        "--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 2",
        "--context-parallel-size 1", "--sequence-parallel", "--micro-batch-size 1",
        "--global-batch-size 128", "--seq-length 4096", "--use-distributed-optimizer", "--bf16",
        "--fp8-format hybrid",
        # the plan's overlaps (Megatron defaults: off), in the table's order
        "--tp-comm-overlap", "--overlap-grad-reduce", "--overlap-param-gather",
        "--optimizer adam", "--recompute-granularity selective",
        "--num-layers 32", "--hidden-size 4096", "--ffn-hidden-size 14336",
        "--num-attention-heads 32", "--group-query-attention", "--num-query-groups 8",
        "--kv-channels 128", "--max-position-embeddings 131072", "--swiglu",
        "--normalization RMSNorm", "--position-embedding-type rope",
        "--rotary-base 500000",  # Llama 3.1 config.json rope_theta 500000.0
        "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--vocab-size 128256",
        # no dropout (Llama trains without; Megatron's default is 0.1 on both)
        "--hidden-dropout 0", "--attention-dropout 0",
        # Llama 3.1 rope_scaling: factor 8, low 1, high 4, original 8192 = Megatron's constants
        "--use-rope-scaling", "--rope-scaling-factor 8",
        # Llama 3's published hyper-parameters as shell variables (values asserted below)
        "--adam-beta1 $ADAM_BETA1", "--adam-beta2 $ADAM_BETA2", "--adam-eps $ADAM_EPS",
        "--weight-decay $WEIGHT_DECAY", "--clip-grad $CLIP_GRAD",
        "--lr-warmup-iters $LR_WARMUP_ITERS", "--lr-decay-style $LR_DECAY_STYLE",
        "--init-method-std $INIT_METHOD_STD",  # not published for Llama 3: a PLACEHOLDER line
        "--min-lr $MIN_LR",  # Llama 3 gives the final learning rate of 405B only: a PLACEHOLDER line
        "--tokenizer-type HuggingFaceTokenizer", "--tokenizer-model $TOKENIZER_MODEL",
        "--data-path $DATA_PATH", "--save $CHECKPOINT_PATH", "--load $CHECKPOINT_PATH",
        "--train-iters $TRAIN_ITERS", "--lr $LR"]
    for var in ("DATA_PATH", "TOKENIZER_MODEL", "CHECKPOINT_PATH"):
        assert f'{var}="${{{var}:-' in emitted.text  # a marked placeholder the user sets


@pytest.mark.parametrize("zero, flags", [
    (0, []), (1, ["--use-distributed-optimizer"]),
    (2, ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads",
         "--ckpt-format fsdp_dtensor"]),
    (3, ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params",
         "--ckpt-format fsdp_dtensor"])])
def test_zero_stage_flags(tmp_path, zero, flags):
    """Megatron-FSDP (ZeRO-2 / 3) asserts the fsdp_dtensor checkpoint format and
    CUDA_DEVICE_MAX_CONNECTIONS != 1 (arguments.py validate_args, d98e8a6): the script sets the
    variable to 1 only without FSDP (tp > 1 before Blackwell asserts 1 there)."""
    doc = _hand(zero=zero)
    emitted, target = _read_back(doc, tmp_path)
    state = [f for f in _flags(emitted.text) if "fsdp" in f or "distributed-optimizer" in f
             or "sharding" in f]
    assert state == flags
    assert target.layout.zero_stage == zero
    assert ("export CUDA_DEVICE_MAX_CONNECTIONS=1" in emitted.text) == (zero < 2)
    assert not [v for v in target.findings if v.severity == "error"]


def test_uneven_ends_and_interleaving_flags(tmp_path):
    """pp 4 over 32 layers as 7/9/9/7: middle stages even (9), ends their own counts; full
    recompute on every layer is uniform with 1 layer per chunk; vpp 2 with an even split 8/8/8/8
    is 32 / 4 / 2 = 4 layers per virtual stage."""
    doc = _hand(gpus=32, tp=2, pp=4, dp=4, split=(7, 9, 9, 7), recompute="full")
    emitted, target = _read_back(doc, tmp_path)
    flags = _flags(emitted.text)
    assert {"--decoder-first-pipeline-num-layers 7", "--decoder-last-pipeline-num-layers 7",
            "--recompute-granularity full", "--recompute-method uniform",
            "--recompute-num-layers 1"} <= set(flags)
    _assert_round_trip(doc, emitted, target)
    doc = _hand(gpus=32, tp=2, pp=4, dp=4, split=(8, 8, 8, 8), vpp=2, recompute="none")
    emitted, target = _read_back(doc, tmp_path)
    assert "--num-layers-per-virtual-pipeline-stage 4" in _flags(emitted.text)
    assert not any("pipeline-num-layers" in f or "recompute" in f for f in _flags(emitted.text))
    _assert_round_trip(doc, emitted, target)


# ---------------------------------------------------------------- deviations

def test_full_and_selective_mix_becomes_block_full(tmp_path):
    """Stage 0: full 2 + selective 3 + none 11; stage 1: none 16. Megatron cannot mix selective
    with full and has one count: block with N = max(2 + 3, 0) = 5 on both stages, so stage 0
    fully recomputes 5 (its 2 full + 3 selective) and stage 1 fully recomputes 5 it kept."""
    mix = [{"none": 11, "selective": 3, "full": 2}, {"none": 16, "selective": 0, "full": 0}]
    doc = _hand(recompute=mix)
    emitted, target = _read_back(doc, tmp_path)
    assert {"--recompute-granularity full", "--recompute-method block",
            "--recompute-num-layers 5"} <= set(_flags(emitted.text))
    assert _counts(target) == [{"full": 5, "none": 11}, {"full": 5, "none": 11}]
    assert len(emitted.deviations) == 2
    assert emitted.deviations[0].startswith(
        "stage 0: recompute full 5 / none 11 where the plan has full 2 / selective 3 / none 11")
    assert emitted.deviations[1].startswith(
        "stage 1: recompute full 5 / none 11 where the plan has none 16")
    for line in emitted.deviations:
        assert f"#   - {line}" in emitted.text  # the header lists each deviation
    _assert_round_trip(doc, emitted, target, changed_stages=(0, 1))


def test_selective_and_none_mix_becomes_selective_everywhere(tmp_path):
    """No full layer: selective on all 32 layers (stage 0: 8 kept layers more, stage 1: 16)."""
    mix = [{"none": 8, "selective": 8, "full": 0}, {"none": 16, "selective": 0, "full": 0}]
    doc = _hand(recompute=mix)
    emitted, target = _read_back(doc, tmp_path)
    assert "--recompute-granularity selective" in _flags(emitted.text)
    assert _counts(target) == [{"selective": 16}, {"selective": 16}]
    assert [d.split(" (")[0] for d in emitted.deviations] == [
        "stage 0: recompute selective 16 where the plan has selective 8 / none 8",
        "stage 1: recompute selective 16 where the plan has none 16"]
    _assert_round_trip(doc, emitted, target, changed_stages=(0, 1))


def test_block_count_is_per_model_chunk_with_interleaving(tmp_path):
    """vpp 2, 16 layers per rank (two chunks of 8): the plan recomputes 3 layers on stage 0 and 1
    on stage 1; block N = max(ceil(3 / 2), ceil(1 / 2)) = 2 per chunk -> 4 per stage."""
    mix = [{"none": 13, "selective": 0, "full": 3}, {"none": 15, "selective": 0, "full": 1}]
    doc = _hand(vpp=2, recompute=mix, gbs=128)
    emitted, target = _read_back(doc, tmp_path)
    assert "--recompute-num-layers 2" in _flags(emitted.text)
    assert _counts(target) == [{"full": 4, "none": 12}, {"full": 4, "none": 12}]
    _assert_round_trip(doc, emitted, target, changed_stages=(0, 1))


def test_uneven_middle_split_is_written_as_a_layout_string(tmp_path):
    """32 layers over pp 4 as 8/7/9/8: the middle stages differ, so the first / last-stage flags
    cannot give it; the layout string does, one virtual stage per rank (vpp 1): the embedding
    with stage 0's 8 layers "Et*8", then "t*7", "t*9", and the loss after stage 3's 8 "t*8L".
    Read back, it is the plan exactly, at the step time of the plan's split (8/7/9/8 contiguous,
    no layout string)."""
    doc = _hand(gpus=32, tp=2, pp=4, dp=4, split=(8, 7, 9, 8), recompute="none")
    emitted, target = _read_back(doc, tmp_path)
    flags = _flags(emitted.text)
    assert "--pipeline-model-parallel-layout Et*8|t*7|t*9|t*8L" in flags
    assert not any(f.startswith(("--decoder-first", "--decoder-last", "--num-virtual"))
                   for f in flags)
    assert emitted.deviations == ()
    assert target.layout.vpp == 1 and _split_of(target) == (8, 7, 9, 8)
    _assert_round_trip(doc, emitted, target)
    as_planned = dataclasses.replace(target, layout=target.layout.replace(pipeline_layout=None))
    assert evaluate(target)["time_s"]["step"] == evaluate(as_planned)["time_s"]["step"]


def test_architecture_gap_is_a_deviation():
    """A model feature the flags do not state is listed, not dropped."""
    doc = _hand()
    spec = load_model("llama-3.1-8b")
    from planner.emit import megatron
    gaps = megatron._architecture_gaps(dataclasses.replace(spec, attention_sinks=True))
    assert gaps == ["architecture: attention sinks is not written as a "
                    "flag; add Megatron-LM's option by hand"]
    assert emit(doc, "megatron").deviations == ()


# ---------------------------------------------------------------- unrunnable

@pytest.mark.parametrize("change, words", [
    ({"optimizer": "adam8bit"}, ["adam8bit", "--optimizer adamw"]),
    ({"framework": "torchtitan"}, ["torchtitan", "--framework megatron"]),
])
def test_unrunnable_plans_raise(change, words):
    doc = _hand()
    doc["request"].update(change)
    with pytest.raises(SpecError) as exc:
        emit(doc, "megatron")
    assert exc.value.key == "--emit"
    for word in words:
        assert word in str(exc.value)


def test_layout_string_plan_over_its_budget_raises():
    """With 90% headroom (budget 8 GiB of 80) the 19/20/21/20 split of llama-3.1-70b (a layout
    string, nothing moved) does not fit: SpecError naming what to pin, not a silently other plan."""
    doc = _hand(model="llama-3.1-70b", gpus=64, tp=8, pp=4, dp=2, split=(19, 20, 21, 20),
                recompute="none", headroom=0.9)
    with pytest.raises(SpecError) as exc:
        emit(doc, "megatron")
    assert exc.value.key == "--emit" and "--fix recompute=full" in str(exc.value)


def test_plan_that_does_not_fit_its_budget_raises():
    """An expressible plan over its own memory budget (90% headroom) is not emitted."""
    doc = _hand(model="llama-3.1-70b", gpus=64, tp=8, pp=4, dp=2, split=(20, 20, 20, 20),
                recompute="none", headroom=0.9)
    with pytest.raises(SpecError, match="does not fit"):
        emit(copy.deepcopy(doc), "megatron")


@pytest.mark.parametrize("mix, vpp", [
    ([{"none": 11, "selective": 3, "full": 2}, {"none": 16, "selective": 0, "full": 0}], 1),
    ([{"none": 8, "selective": 8, "full": 0}, {"none": 16, "selective": 0, "full": 0}], 1),
    ([{"none": 13, "selective": 0, "full": 3}, {"none": 15, "selective": 0, "full": 1}], 2),
])
def test_recompute_deviation_needs_no_more_memory_on_any_stage(tmp_path, mix, vpp):
    """Every stage of the emitted script, as `planner check` costs it, needs at most the memory
    the plan's own per-stage counts need on that stage (`cost.memory.stage_memory` of both)."""
    from planner.cost.memory import stage_layers, stage_memory
    doc = _hand(recompute=mix, vpp=vpp)
    emitted, target = _read_back(doc, tmp_path)
    layout = plan_layout(doc["plan"], doc["request"])
    cluster = load_cluster("dgx-h100", gpus=16)
    model = load_model("llama-3.1-8b")
    for s, layers in enumerate(stage_layers(model, layout)):
        plan_mem = stage_memory(model, cluster, layout, s, layers=layers,
                                layers_by_recompute=mix[s]).total
        got = evaluate(target)["stages"][s]["memory_bytes"]["total"]
        assert got <= plan_mem, (s, got, plan_mem)


def test_rotary_base_follows_rope_theta():
    """rope_theta 1000000 (Qwen-style) -> --rotary-base 1000000; a fractional theta (10000.5)
    cannot be written as Megatron's int flag: no flag, a deviation instead."""
    import dataclasses as dc
    from planner.emit.megatron import _architecture_flags, _architecture_gaps
    from planner.specs.model import load_model
    base = load_model("llama-3.1-8b")
    assert "--rotary-base 500000" in _architecture_flags(base, 4096)
    qwen = dc.replace(base, extra={**base.extra, "rope_theta": 1000000.0})
    assert "--rotary-base 1000000" in _architecture_flags(qwen, 4096)
    odd = dc.replace(base, extra={**base.extra, "rope_theta": 10000.5})
    assert not any(f.startswith("--rotary-base") for f in _architecture_flags(odd, 4096))
    assert any("rope_theta 10000.5" in g for g in _architecture_gaps(odd))
    assert not any("rope_theta" in g for g in _architecture_gaps(base))


def test_deepseek_v3_flags_mla_yarn_and_moe_dispatch(tmp_path):
    """DeepSeek-V3 (config.json: q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
    qk_rope_head_dim 64, v_head_dim 128; rope_scaling yarn factor 40, mscale 1.0, mscale_all_dim
    1.0, beta_fast 32, beta_slow 1, original 4096): Megatron's MLA flags (`_add_mla_args`) and
    YaRN flags, the all-to-all dispatcher and grouped GEMM the cost model assumes, no dropout; the
    script reads back to the plan's layout with no error."""
    doc = _hand(model="deepseek-v3", gpus=256, tp=2, pp=16, cp=1, dp=8, ep=8, etp=1, zero=1,
                mbs=1, gbs=256, recompute="full", split=(4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1))
    emitted, target = _read_back(doc, tmp_path)
    flags = _flags(emitted.text)
    for flag in ("--multi-latent-attention", "--q-lora-rank 1536", "--kv-lora-rank 512",
                 "--qk-head-dim 128", "--qk-pos-emb-head-dim 64", "--v-head-dim 128",
                 "--rotary-scaling-factor 40", "--mscale 1", "--mscale-all-dim 1",
                 "--yarn-beta-fast 32", "--yarn-beta-slow 1",
                 "--yarn-original-max-position-embeddings 4096",
                 "--moe-token-dispatcher-type alltoall", "--moe-grouped-gemm",
                 "--hidden-dropout 0", "--attention-dropout 0"):
        assert flag in flags, flag
    assert not any("multi-latent" in d for d in emitted.deviations)
    assert not [v.message for v in target.findings if v.severity == "error"]
    assert (target.layout.tp, target.layout.pp, target.layout.ep) == (2, 16, 8)


def test_gpt3_keeps_megatrons_dropout(tmp_path):
    """GPT-3 trained with dropout 0.1 (Brown et al. 2020; Megatron's default): no dropout flag."""
    doc = _hand(model="gpt-3-175b", gpus=64, tp=8, pp=8, dp=1, zero=1, mbs=1, gbs=64,
                seq_len=2048, split=(12,) * 8)
    flags = _flags(emit(doc, "megatron").text)
    assert not [f for f in flags if "dropout" in f]


def test_uneven_interleaved_plan_is_emitted_as_a_layout_string_and_read_back():
    """`plan --fix pp=4 --fix vpp=3` for llama-3.1-8b: 32 layers + embedding + loss = 34 slots
    over 12 virtual stages do not divide, so no account-for option builds the plan's layout: the
    script carries the layout string (1 + 10 x 3 + 1 layers) and `check` reads it back to the
    plan's split and step time (the emitter's own check line)."""
    from typer.testing import CliRunner

    from planner.cli import app
    result = CliRunner().invoke(app, ["plan", "-m", "llama-3.1-8b", "-c", "dgx-h100", "--gpus", "8",
                                      "--fix", "pp=4", "--fix", "vpp=3", "--emit", "megatron"])
    assert result.exit_code == 0, result.output
    assert "--pipeline-model-parallel-layout 'Et|(t*3|)*10tL'" in result.output
    assert "check: PASS" in result.output


def test_deepseek_v3_on_pp16_round_trips_a_layout_string():
    """Issue 8's case: DeepSeek-V3's 61 layers on pp 16 with vpp 2 (32 virtual stages): 61 + 2
    slots do not divide 32, nor 61 + 1, so no account-for option builds it; the plan's layout is
    an embedding-only first stage, 30 stages of 2 layers and a last of 1 with the loss
    (0 + 60 + 1 = 61), written as a layout string and read back by `check` to the same plan."""
    from typer.testing import CliRunner

    from planner.cli import app
    result = CliRunner().invoke(app, ["plan", "-m", "deepseek-v3", "-c", "hgx-h800", "--gpus", "1024",
                                      "--fix", "pp=16", "--fix", "vpp=2", "--fix", "ep=64",
                                      "--emit", "megatron"])
    assert result.exit_code == 0, result.output
    # the model's MTP layer (num_nextn_predict_layers 1), trained as NVIDIA's DeepSeek-V3 recipes
    # train it and costed on the loss's stage: its `m` before the `L`, --mtp-num-layers 1, and
    # `check` reads the same MTP layer back (its check line passes: the plan's cost)
    assert "--pipeline-model-parallel-layout 'E|(tt|)*30tmL'" in result.output
    assert "--mtp-num-layers 1 \\\n" in result.output
    assert "multi-token prediction" not in result.output
    assert "check: PASS" in result.output


def test_overlaps_and_all_to_all_context_parallelism_round_trip(tmp_path):
    """A plan with cp 2 over all-to-all (Ulysses) and the tuned overlaps: the script carries
    --cp-comm-type a2a and the overlap switches, and `planner check` reads back the same layout."""
    doc = _hand(cp=2, dp=2)
    doc["plan"]["parallelism"]["cp_comm_type"] = "a2a"
    emitted, target = _read_back(doc, tmp_path)
    flags = _flags(emitted.text)
    assert "--cp-comm-type a2a" in flags
    assert {"--tp-comm-overlap", "--overlap-grad-reduce", "--overlap-param-gather"} <= set(flags)
    assert target.layout.cp_comm_type == "a2a"
    assert (target.layout.tp_comm_overlap, target.layout.overlap_grad_reduce,
            target.layout.overlap_param_gather, target.layout.ep_comm_overlap) == (True, True, True, None)
    _assert_round_trip(doc, emitted, target)


# ---------------------------------------------------------------- per-layer recompute (recompute_layers)

def _block_modes(groups: list[str], n: int) -> list[str]:
    """Megatron's block recompute by hand: the first n layers of each model chunk full."""
    return ["f" * min(n, len(g)) + "n" * (len(g) - min(n, len(g))) for g in groups]


def test_per_layer_mix_within_a_stage_becomes_block_with_per_chunk_count(tmp_path):
    """llama-3.1-8b, pp 2, vpp 2, layout Et*7|(t*8|)*2t*9L: chunks of 7, 8, 8, 9 decoder layers,
    chunks 0 and 2 on stage 0 (15 layers), 1 and 3 on stage 1 (17). The plan's per-layer modes
    mix selective and full inside chunks: chunk 0 'sf' + 5 n (2 recomputed), chunk 1 8 n,
    chunk 2 'fsf' + 5 n (3), chunk 3 's' + 8 n (1). Megatron has one granularity and one block
    count: full, block, N = max(2, 0, 3, 1) = 3, so each chunk's first 3 layers are full; both
    stages change (stage 0: full 6 / none 9 where the plan has full 3 / selective 2 / none 10;
    stage 1: full 6 / none 11 where it has selective 1 / none 16) and are named."""
    groups = ["sfnnnnn", "n" * 8, "fsfnnnnn", "s" + "n" * 8]
    doc = _hand(vpp=2, gbs=128, split=(15, 17), recompute=[
        {"none": 10, "selective": 2, "full": 3}, {"none": 16, "selective": 1, "full": 0}])
    doc["plan"]["parallelism"]["pipeline_layout"] = "Et*7|(t*8|)*2t*9L"
    doc["plan"]["parallelism"]["recompute_layers"] = "|".join(groups)
    emitted, target = _read_back(doc, tmp_path)
    assert {"--recompute-granularity full", "--recompute-method block",
            "--recompute-num-layers 3"} <= set(_flags(emitted.text))
    want = "".join(_block_modes(groups, 3))
    assert "".join(m[0] for m in target.recompute_layers) == want
    assert _counts(target) == [{"full": 6, "none": 9}, {"full": 6, "none": 11}]
    assert [d.split(" (--")[0] for d in emitted.deviations] == [
        "stage 0: recompute full 6 / none 9 (fffnnnn|fffnnnnn) where the plan has full 3 / selective 2 "
        "/ none 10 (sfnnnnn|fsfnnnnn)",
        "stage 1: recompute full 6 / none 11 (fffnnnnn|fffnnnnnn) where the plan has selective 1 / none 16 "
        "(nnnnnnnn|snnnnnnnn)"]
    assert evaluate(target)["verdict"] == "pass"


def test_per_layer_plan_already_in_block_form_has_no_deviation(tmp_path):
    """The same layout with the plan recomputing exactly the first 2 layers of every chunk (full):
    block N = 2 states it; no deviation, and check reads back the plan's own per-layer modes."""
    groups = _block_modes(["t" * 7, "t" * 8, "t" * 8, "t" * 9], 2)
    doc = _hand(vpp=2, gbs=128, split=(15, 17), recompute=[
        {"none": 11, "selective": 0, "full": 4}, {"none": 13, "selective": 0, "full": 4}])
    doc["plan"]["parallelism"]["pipeline_layout"] = "Et*7|(t*8|)*2t*9L"
    doc["plan"]["parallelism"]["recompute_layers"] = "|".join(groups)
    emitted, target = _read_back(doc, tmp_path)
    assert "--recompute-num-layers 2" in _flags(emitted.text)
    assert emitted.deviations == ()
    assert "".join(m[0] for m in target.recompute_layers) == "".join(groups)


def test_interleaved_405b_plan_round_trips_its_chunks():
    """405B on 16,384 H100s, pp 16 vpp 4 (`plan --fix cp=1 --fix pp=16 --fix vpp=4`): the plan's
    `recompute_layers` recomputes at most one layer per chunk, so block N = 1 (counted here from
    the plan's string); `check` reads the script back to the first layer of every chunk full, and
    names exactly the stages whose chunks the plan had recomputed otherwise."""
    doc = _doc("llama-3.1-405b", 16384, seq_len=8192, gbs=2048, cp=1, pp=16, vpp=4)
    par = doc["plan"]["parallelism"]
    groups = par["recompute_layers"].split("|")
    n = max(len(g) - g.count("n") for g in groups)
    assert n == 1 and par["pipeline_layout"] == "Et|(tt|)*62tL"
    emitted = emit(doc, "megatron")
    assert f"--recompute-num-layers {n}" in _flags(emitted.text)
    want = _block_modes(groups, n)
    changed = {k % 16 for k, (a, b) in enumerate(zip(groups, want)) if sorted(a) != sorted(b)}
    named = {s for s in range(16) if any(_names_stage(d, s) for d in emitted.deviations)}
    assert named == changed
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "launch.sh"
        path.write_text(emitted.text)
        target = read_target(path, model=doc["model"], cluster=doc["cluster"], gpus=doc["gpus"], seq_len=8192)
    assert "".join(m[0] for m in target.recompute_layers) == "".join(want)
    assert evaluate(target)["verdict"] == "pass"


def test_sliding_window_attention_is_written_as_megatrons_window_flags():
    """GPT-OSS (config.json sliding_window 128, even layers sliding from 0): Megatron-LM's window (left,
    right) = (127, 0) as Megatron-Bridge's gpt_oss_bridge.py converts it, and with layer numbers from 1
    every 2nd layer full (`is_layer_window_attention`: layer_number % 2 != 0 slides) -> skip frequency 2;
    a window on every layer needs no frequency; an irregular pattern is written as its 0/1 list."""
    from planner.emit.megatron import _architecture_gaps, _window_flags
    oss = load_model("gpt-oss-120b")
    assert _window_flags(oss) == ["--window-size 127,0", "--window-attn-skip-freq 2"]
    assert not any("sliding" in g for g in _architecture_gaps(oss))
    spec = load_model("llama-3.1-8b")
    every = ("sliding_attention",) * 32
    assert _window_flags(dataclasses.replace(spec, sliding_window=4096, layer_types=every)) == ["--window-size 4095,0"]
    odd = ("sliding_attention",) * 3 + ("full_attention",) * 29
    assert _window_flags(dataclasses.replace(spec, sliding_window=4096, layer_types=odd)) == [
        "--window-size 4095,0", "--window-attn-skip-freq '[" + ",".join(["1"] * 3 + ["0"] * 29) + "]'"]
    assert _window_flags(spec) == []
