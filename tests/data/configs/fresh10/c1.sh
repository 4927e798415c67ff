#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \
  --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 \
  --num-attention-heads 32 --group-query-attention --num-query-groups 8 \
  --seq-length 4096 --max-position-embeddings 131072 \
  --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000 \
  --untie-embeddings-and-output-weights --disable-bias-linear --bf16 \
#  --recompute-activations \
  --tensor-model-parallel-size 2 --sequence-parallel \
  --micro-batch-size 1 --global-batch-size 256 --use-distributed-optimizer
