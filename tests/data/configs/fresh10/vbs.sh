vllm serve meta-llama/Llama-3.1-70B-Instruct \ 
  --tensor-parallel-size 4 \
  --max-model-len 8192
