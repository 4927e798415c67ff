#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 pretrain_gpt.py \
  --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \
  --group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 131072 \
  --swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights \
  --disable-bias-linear --vocab-size 128256 --tensor-model-parallel-size 1 --bf16 --global-batch-size 64 \
  --data-path /data/run#7/text_document --micro-batch-size 8
