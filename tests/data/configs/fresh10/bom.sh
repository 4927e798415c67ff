vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192
