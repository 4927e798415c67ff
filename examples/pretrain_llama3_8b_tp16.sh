#!/bin/bash
# Llama 3.1 8B on two 8-GPU nodes: tensor parallelism 16 over 8 KV heads, and a misspelled flag.
torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py \
  --tensor-model-parallel-size 16 \
  --micro-batch-size 1 --global-batch-size 64 --seq-length 4096 --bf16 --rotary-base 500000 \
  --use-flash-atention
