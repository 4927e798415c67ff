"""The rule `megatron_checkpoint_vocab` (issue 11, FC-08): Megatron-LM pads the tokenizer's
vocabulary to a multiple of --make-vocab-size-divisible-by x tp (Megatron-LM d98e8a6
`megatron/core/tokenizers/utils/build_tokenizer.py` `vocab_size_with_padding`); a run that loads a
checkpoint of other rows stops on the embedding's shape. Checked where the files the gate reads
give both sides: the model's own checkpoint rows (`padded_vocab_size`, BLOOM), or another file of
the same run saving (--save) the path this one loads (--load / --pretrained-checkpoint).

Expected numbers are hand arithmetic, ceil(V / m) x m, written at each test."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from planner.cli import app

runner = CliRunner()


def script(tmp, name, *, tp, gpus, extra="", model_flags=True):
    """A torchrun + pretrain_gpt.py script; GPT-2's 50,257-token vocabulary as --vocab-size."""
    arch = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --max-position-embeddings "
            "2048 --swiglu --normalization RMSNorm --position-embedding-type rope --vocab-size 50257 "
            "--untie-embeddings-and-output-weights --disable-bias-linear ") if model_flags else ""
    text = (f"CKPT=/ckpt/gpt\n"
            f"torchrun --nproc_per_node {gpus} pretrain_gpt.py \\\n"
            f"  --tensor-model-parallel-size {tp} {arch}\\\n"
            f"  --seq-length 2048 --micro-batch-size 1 --global-batch-size {gpus // tp * 8} \\\n"
            f"  --bf16 {extra}\n")
    path = tmp / name
    path.write_text(text)
    return str(path)


def run(*args):
    result = runner.invoke(app, ["check", *args])
    return result.exit_code, result.output


def rule(data, name="megatron_checkpoint_vocab"):
    return [v for v in data["violations"] if v["rule"] == name]


# BLOOM: 250,680 tokens in 250,880 rows (models/bloom-176b.yaml; bigscience tr11 README).
def bloom(tmp, tp, extra):
    gpus = max(tp, 8)
    path = tmp / "bloom.sh"
    path.write_text(f"torchrun --nproc_per_node 8 --nnodes {gpus // 8} pretrain_gpt.py "
                    f"--tensor-model-parallel-size {tp} --micro-batch-size 1 "
                    f"--global-batch-size {gpus // tp} --seq-length 2048 --bf16 "
                    f"--use-distributed-optimizer {extra}\n")
    code, out = run(str(path), "--model", "bloom-176b", "--cluster", "dgx-h100", "--format", "json")
    return code, json.loads(out)


def test_bloom_checkpoint_at_tp16_fails_with_numbers_and_fix(tmp_path):
    # 128 x 16 = 2048; ceil(250680 / 2048) = 123 -> 251,904 rows, not the checkpoint's 250,880.
    _, data = bloom(tmp_path, 16, "--load /ckpt/bloom")
    [found] = rule(data)
    assert found["severity"] == "error" and data["verdict"] == "fail"
    text = found["message"] + " " + found["fix"]
    for number in ("--load /ckpt/bloom", "250680", "128 x tp 16 = 2048", "251904", "250880"):
        assert number in text, text
    # 64 x 16 = 1024; ceil(250680 / 1024) = 245 -> 245 x 1024 = 250,880: the fix keeps tp 16.
    assert "--make-vocab-size-divisible-by 64" in found["fix"]
    assert "--use-checkpoint-args" in found["fix"]  # 250880 / 16 = 15680 rows per rank
    assert found["line"] == 1


def test_bloom_fixes_pass_the_rule(tmp_path):
    for extra in ("--make-vocab-size-divisible-by 64", "--use-checkpoint-args"):
        _, data = bloom(tmp_path, 16, f"--load /ckpt/bloom {extra}")
        assert not rule(data), extra


def test_bloom_at_tp8_and_tp4_pads_to_the_checkpoint(tmp_path):
    # 128 x 8 = 1024 -> 245 x 1024 = 250,880; 128 x 4 = 512 -> 490 x 512 = 250,880: no error.
    for tp in (8, 4):
        _, data = bloom(tmp_path, tp, "--load /ckpt/bloom")
        assert not rule(data), tp


def test_bloom_tp1_fix_is_a_power_of_two(tmp_path):
    # 128 x 1 -> ceil(250680 / 128) = 1959 -> 250,752 != 250,880; 256 -> 980 x 256 = 250,880.
    _, data = bloom(tmp_path, 1, "--load /ckpt/bloom")
    [found] = rule(data)
    assert "250752" in found["message"]
    assert "--make-vocab-size-divisible-by 256" in found["fix"]


def test_resumed_run_and_no_load_are_not_checked(tmp_path):
    # --load == --save: the run reloads the rows it wrote itself; no --load: nothing is loaded.
    for extra in ("--load /ckpt/run --save /ckpt/run", "--save /ckpt/run", ""):
        _, data = bloom(tmp_path, 16, extra)
        assert not rule(data), extra


def test_load_path_from_an_unset_variable_is_unknown_not_bad_input(tmp_path):
    code, data = bloom(tmp_path, 16, "--load $1")
    assert code in (0, 1) and not rule(data)


def test_pretrain_then_finetune_at_other_tp_fails_the_loading_file(tmp_path):
    # pretrain: tp 1, 128 -> ceil(50257 / 128) = 393 -> 50,304 rows saved at /ckpt/gpt;
    # finetune: tp 8, 1024 -> ceil(50257 / 1024) = 50 -> 51,200 rows: Megatron stops.
    pre = script(tmp_path, "pretrain.sh", tp=1, gpus=8, extra="--save $CKPT")
    fine = script(tmp_path, "finetune.sh", tp=8, gpus=8, extra="--pretrained-checkpoint $CKPT")
    code, out = run(pre, fine, "--cluster", "dgx-h100", "--format", "json")
    assert code == 1
    first, second = json.loads(out)
    assert not rule(first)
    [found] = rule(second)
    assert second["verdict"] == "fail"
    for number in ("--pretrained-checkpoint /ckpt/gpt", "50257", "128 x tp 8 = 1024", "51200",
                   "pretrain.sh saves 50304 rows", "128 x tp 1"):
        assert number in found["message"], found["message"]
    # 16 x 8 = 128 -> 50,304 rows; 50304 / 8 = 6288 rows per rank for --use-checkpoint-args.
    assert "--make-vocab-size-divisible-by 16" in found["fix"]
    assert "--use-checkpoint-args" in found["fix"]
    assert found["line"] == 5  # line 5 of finetune.sh sets --pretrained-checkpoint


def test_across_files_github_annotation_points_at_the_flag(tmp_path):
    pre = script(tmp_path, "pretrain.sh", tp=1, gpus=8, extra="--save $CKPT")
    fine = script(tmp_path, "finetune.sh", tp=8, gpus=8, extra="--load $CKPT")
    code, out = run(pre, fine, "--cluster", "dgx-h100", "--format", "github")
    assert code == 1
    assert f"::error file={fine},line=5,title=megatron_checkpoint_vocab::" in out


def test_vocab_file_keeps_divisible_by_so_only_checkpoint_args_is_offered(tmp_path):
    # With --vocab-file Megatron also asserts make_vocab_size_divisible_by equals the checkpoint's
    # (check_checkpoint_args): 16 != 128, so that fix is not offered.
    pre = script(tmp_path, "pretrain.sh", tp=1, gpus=8, extra="--save $CKPT --vocab-file v.json")
    fine = script(tmp_path, "finetune.sh", tp=8, gpus=8, extra="--load $CKPT --vocab-file v.json")
    _, out = run(pre, fine, "--cluster", "dgx-h100", "--format", "json")
    [found] = rule(json.loads(out)[1])
    assert "--make-vocab-size-divisible-by" not in found["fix"]
    assert found["fix"].startswith("--use-checkpoint-args")


def test_same_padding_across_files_passes(tmp_path):
    # tp 2 at 64: 128 -> 50,304 rows, as the tp 1 pretraining at 128 saved.
    pre = script(tmp_path, "pretrain.sh", tp=1, gpus=8, extra="--save $CKPT")
    fine = script(tmp_path, "finetune.sh", tp=2, gpus=8,
                  extra="--load $CKPT --make-vocab-size-divisible-by 64")
    code, out = run(pre, fine, "--cluster", "dgx-h100", "--format", "json")
    assert not any(rule(r) for r in json.loads(out)), out


def test_memory_pads_to_the_divisible_by_the_script_sets(tmp_path):
    """Memory counts the rows Megatron builds with the script's --make-vocab-size-divisible-by
    (default 128; arguments.py l. 2441 at d98e8a6), not always 128 x tp. GPT-2's 50,257 tokens,
    untied input and output embeddings of hidden 1,024, tp 2, bf16 parameters (2 B):
      default 128: multiple 256, ceil(50257 / 256) = 197 -> 50,432 rows (175 padding);
      64:          multiple 128, ceil(50257 / 128) = 393 -> 50,304 rows (47 padding);
      1:           multiple 2,   ceil(50257 / 2) = 25,129 -> 50,258 rows (1 padding).
    Each row fewer removes 1,024 / 2 parameters per rank from each of the two matrices."""
    def checked(extra):
        path = script(tmp_path, "gpt.sh", tp=2, gpus=8, extra=extra)
        code, out = run(path, "--cluster", "dgx-h100", "--format", "json")
        assert code == 0, out
        data = json.loads(out)
        padding = rule(data, "vocab_padding")
        return data["memory_bytes"]["parameters"], padding[0]["message"] if padding else ""

    default, said = checked("")
    assert "padded to 50432 rows" in said and "175 padding rows" in said
    for divisible_by, rows, padding in ((64, 50304, 47), (1, 50258, 1)):
        params, said = checked(f"--make-vocab-size-divisible-by {divisible_by}")
        assert f"padded to {rows} rows" in said and f"({padding} padding row" in said
        assert default - params == (50432 - rows) // 2 * 1024 * 2 * 2  # rows/tp x h x 2 matrices x 2 B


def test_layout_refuses_a_divisible_by_below_one():
    import pytest

    from planner.errors import SpecError
    from planner.placement.layout import Layout

    with pytest.raises(SpecError, match="vocab_divisible_by"):
        Layout(dp=1, tp=1, pp=1, cp=1, vocab_divisible_by=0)
    with pytest.raises(SpecError, match="vocab_divisible_by"):
        Layout(dp=1, tp=1, pp=1, cp=1).replace(vocab_divisible_by=-2)


def test_checkpoint_args_cost_the_model_s_stated_rows(tmp_path):
    # --use-checkpoint-args: Megatron-LM takes BLOOM's checkpoint rows (250,880), not 128 x tp 16 =
    # 2048 -> 123 x 2048 = 251,904. The embedding (tied, on the one stage) loses
    # (251904 - 250880) / 16 = 64 rows per rank x hidden 14,336 x 2 B (bf16) = 1,835,008 B.
    def parameters(extra):
        _, data = bloom(tmp_path, 16, f"--load /ckpt/bloom {extra}")
        return data["memory_bytes"]["parameters"], data
    padded, _ = parameters("")
    taken, data = parameters("--use-checkpoint-args")
    assert padded - taken == 64 * 14336 * 2
    assert not rule(data, "megatron_checkpoint_args_vocab")  # the rows are known: no assumption


def test_checkpoint_args_without_stated_rows_say_what_is_assumed(tmp_path):
    # GPT-2's 50,257 tokens at tp 8: 128 x 8 = 1024 -> 50 x 1024 = 51,200 rows costed; a
    # checkpoint saved at tp 1 holds ceil(50257 / 128) x 128 = 50,304.
    path = script(tmp_path, "finetune.sh", tp=8, gpus=8, extra="--load /ckpt/gpt --use-checkpoint-args")
    _, out = run(path, "--cluster", "dgx-h100", "--format", "json")
    [found] = rule(json.loads(out), "megatron_checkpoint_args_vocab")
    assert found["severity"] == "warning"
    for number in ("51200 rows", "50257", "128 x tp 8", "holds 50304"):
        assert number in found["message"], found["message"]


def test_checkpoint_args_without_a_checkpoint_is_megatron_s_start_up_error(tmp_path):
    # arguments.py parse_and_validate_args: "--use-checkpoint-args requires --load or
    # --pretrained-checkpoint argument".
    path = script(tmp_path, "train.sh", tp=8, gpus=8, extra="--use-checkpoint-args")
    code, out = run(path, "--cluster", "dgx-h100", "--format", "json")
    data = json.loads(out)
    [found] = rule(data, "megatron_checkpoint_args_without_load")
    assert found["severity"] == "error" and data["verdict"] == "fail" and code == 1
