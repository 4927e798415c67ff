"""Closed-form cost models of a layout: parameters and FLOPs, activations, memory per stage,
collectives and their time, GEMM throughput, pipeline schedules and step time (training), and
serving memory and latency. Pure functions of specs and placements; no OR-Tools, no printing
(docs/architecture.md §1, §3)."""
