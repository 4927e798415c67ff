#!/bin/bash
python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --trust-remote-code \
  --tp-size 48 --dp-size 48 --enable-dp-attention --ep-size 48 --moe-a2a-backend deepep \
  --ep-num-redundant-experts 32 --nnodes 6 --node-rank $NODE_RANK --dist-init-addr $HEAD:5000 --port 30000
