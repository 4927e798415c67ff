"""planner: lays a large model out over a GPU cluster (training and serving)."""

__version__ = "0.1.0"
