#!/usr/bin/env bash
set -e
export HF_TOKEN=xxx
MODEL="meta-llama/Llama-3.1-8B-Instruct"
for i in 0 1 2 3; do
  CUDA_VISIBLE_DEVICES=$((i*2)),$((i*2+1)) nohup vllm serve $MODEL --tensor-parallel-size 2 --port $((8000+i)) --max-model-len 16384 > log_$i.txt 2>&1 &
done
wait
