# Field case FC-02 (llm-d-benchmark issue 621): Llama-3.3-70B in fp8 on one H100-80GB
vllm serve meta-llama/Llama-3.3-70B-Instruct \
    --quantization fp8 \
    --max-model-len 16000 \
    --gpu-memory-utilization 0.95
