"""The search: candidate meshes and knobs, lower bounds and the best-first driver, the stage
program that splits layers and chooses recompute (exact DP, CP-SAT beyond its grid), and its
brute-force oracle. Never prints (docs/architecture.md §1, §3)."""
