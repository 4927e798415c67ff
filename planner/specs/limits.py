"""The largest values a request may hold: beyond any real cluster or run, they keep the search's
arithmetic (and the solver's integer nanoseconds) bounded. The CLI checks its options against them;
readers of framework configs check the files' values against the same numbers."""

MAX_GPUS = 2**22
"""Largest GPU count accepted (4,194,304): beyond any cluster built; bounds the search's arithmetic."""
MAX_SEQ_LEN = 2**24
"""Largest sequence length accepted, tokens (16,777,216)."""
MAX_BATCH_TOKENS = 2**34
"""Largest global batch accepted, tokens (17,179,869,184: 1,024x Llama 3's 16M-token batch); keeps
step times inside the solver's integer nanoseconds."""
MAX_FLAG_INT = 2**53
"""Largest magnitude of any other integer a framework flag gives (9,007,199,254,740,992, the largest a float
holds exactly): beyond every real count, size or port, it keeps the cost model's float arithmetic finite
(a 320-digit value overflowed it: fresh-user review 8 finding 1)."""
MAX_VPP = 128
"""Largest virtual pipeline stages per rank accepted."""
MAX_TOP = 100
"""Most plans `planner plan --top` returns: each one more plan keeps more candidates from being
pruned (--top 100,000 made deepseek-v3 on 2,048 GPUs solve for two minutes)."""
