"""Placement semantics: a training layout's degrees and knobs (`Layout`), where each model state
lives along each mesh axis (`Placement`, built by the strategies), bytes per state by precision,
and the correctness and composition rules (docs/architecture.md §2)."""
