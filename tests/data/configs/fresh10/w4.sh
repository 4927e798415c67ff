MODEL="meta-llama/Llama-3.1-8B-Instruct"
if [ "$NODE_RANK" -eq 0 ]; then
  vllm serve $MODEL --tensor-parallel-size 8 --port 8000 --max-model-len 16384
fi
if [ "$NODE_RANK" -eq 1 ]; then
  vllm serve $MODEL --tensor-parallel-size 8 --port 8000 --max-model-len 16384
fi
