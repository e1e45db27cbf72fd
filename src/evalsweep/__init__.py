"""evalsweep: did this checkpoint really get better?

Scores several checkpoints on the same benchmarks, stores every per-question
result, and compares them with paired statistics.
"""

__version__ = "0.1.0"
