#!/bin/bash
# Megatron-LM launch for glm-4.5 on 320 x H100-SXM5-80GB (dgx-h100): `planner plan --fix ep=40 --emit megatron` (deepep branch), its alltoall dispatcher changed by hand to flex + deepep (senior review 10 finding 1: DeepEP over 5 nodes).
# Plan: dp=20 tp=2 pp=8 cp=1 ep=40 etp=1 vpp=4 zero=1 sp=true micro-batch=1 global-batch=640 seq=4096 precision=bf16 optimizer=adamw
# Pipeline split: 10/12/12/12/12/12/12/10; plan recompute: none; emitted: no recompute
# The plan's predicted step time: 10.61 s
# Activation offloading ON (fine-grained, modules expert_fc1; NVTE_CPU_OFFLOAD_V1=1): their saved inputs wait in pinned host memory between forward and backward; the plan's step time and memory count on that host memory and on the host-link (PCIe) copies overlapping compute.
# Deviations from the plan: none (this is the plan exactly).

# PLACEHOLDER values: the plan does not know them; set these before launching.
DATA_PATH="${DATA_PATH:-/path/to/dataset_text_document}"  # Megatron .bin/.idx prefix of the tokenized data
TOKENIZER_MODEL="${TOKENIZER_MODEL:-/path/to/tokenizer}"  # Hugging Face tokenizer name or directory
CHECKPOINT_PATH="${CHECKPOINT_PATH:-checkpoints/run}"  # where to save and load checkpoints
TRAIN_ITERS="${TRAIN_ITERS:-1000}"  # optimizer steps to train
LR="${LR:-3.0e-4}"  # peak learning rate

# Training hyper-parameters: no published recipe of glm-4.5 is recorded: set the model's own.
# The peak learning rate LR above is a PLACEHOLDER: no published value of glm-4.5 is recorded.
ADAM_BETA2="${ADAM_BETA2:-0.999}"  # PLACEHOLDER: Megatron-LM's default; no published value recorded
WEIGHT_DECAY="${WEIGHT_DECAY:-0.01}"  # PLACEHOLDER: Megatron-LM's default; no published value recorded
INIT_METHOD_STD="${INIT_METHOD_STD:-0.02}"  # PLACEHOLDER: Megatron-LM's default; no published value recorded
LR_WARMUP_ITERS="${LR_WARMUP_ITERS:-0}"  # PLACEHOLDER: Megatron-LM's default; no published value recorded
MIN_LR="${MIN_LR:-0}"  # PLACEHOLDER: Megatron-LM's default; no published value recorded

NODE_RANK="${NODE_RANK:-0}"  # this node, 0..39
MASTER_ADDR="${MASTER_ADDR:-localhost}"
MASTER_PORT="${MASTER_PORT:-6000}"

export CUDA_DEVICE_MAX_CONNECTIONS=1

export NVTE_CPU_OFFLOAD_V1=1

torchrun \
    --nproc_per_node 8 \
    --nnodes 40 \
    --node_rank "$NODE_RANK" \
    --master_addr "$MASTER_ADDR" \
    --master_port "$MASTER_PORT" \
    pretrain_gpt.py \
    --tensor-model-parallel-size 2 \
    --pipeline-model-parallel-size 8 \
    --context-parallel-size 1 \
    --expert-model-parallel-size 40 \
    --expert-tensor-parallel-size 1 \
    --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend deepep \
    --pipeline-model-parallel-layout 'Et|(t*3|)*30tmL' \
    --sequence-parallel \
    --micro-batch-size 1 \
    --global-batch-size 640 \
    --seq-length 4096 \
    --use-distributed-optimizer \
    --bf16 \
    --tp-comm-overlap \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --optimizer adam \
    --num-layers 92 \
    --hidden-size 5120 \
    --ffn-hidden-size 12288 \
    --num-attention-heads 96 \
    --group-query-attention \
    --num-query-groups 8 \
    --kv-channels 128 \
    --max-position-embeddings 131072 \
    --swiglu \
    --normalization RMSNorm \
    --position-embedding-type rope \
    --rotary-base 1000000 \
    --untie-embeddings-and-output-weights \
    --disable-bias-linear \
    --add-qkv-bias \
    --qk-layernorm \
    --vocab-size 151552 \
    --hidden-dropout 0 \
    --attention-dropout 0 \
    --num-experts 160 \
    --moe-router-topk 8 \
    --moe-ffn-hidden-size 1536 \
    --moe-grouped-gemm \
    --moe-shared-expert-intermediate-size 1536 \
    --moe-layer-freq '[0,0,0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]' \
    --moe-router-score-function sigmoid \
    --moe-router-enable-expert-bias \
    --moe-router-topk-scaling-factor 2.5 \
    --moe-router-dtype fp32 \
    --mtp-num-layers 1 \
    --adam-beta2 "$ADAM_BETA2" \
    --weight-decay "$WEIGHT_DECAY" \
    --init-method-std "$INIT_METHOD_STD" \
    --lr-warmup-iters "$LR_WARMUP_ITERS" \
    --min-lr "$MIN_LR" \
    --fine-grained-activation-offloading \
    --offload-modules expert_fc1 \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model "$TOKENIZER_MODEL" \
    --data-path "$DATA_PATH" \
    --save "$CHECKPOINT_PATH" \
    --load "$CHECKPOINT_PATH" \
    --train-iters "$TRAIN_ITERS" \
    --lr "$LR"
