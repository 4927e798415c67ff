MODEL="meta-llama/Llama-3.1-8B-Instruct"
for i in 0 1 2 3; do
  vllm serve $MODEL --tensor-parallel-size 2 --port $((8000+i)) --max-model-len 16384 &
done
