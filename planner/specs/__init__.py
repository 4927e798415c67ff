"""Input specifications: models (Hugging Face config field names), clusters (GPU, node, network),
request limits, and reading spec files with one-line errors (docs/architecture.md §3)."""
