"""AIME: the American Invitational Mathematics Examination, 30 problems a year, integer answers 0-999.

e1 data prepare aime aime25
"""

from e1.data.registry import Benchmark, Fields, register

register(
    Benchmark(
        name="aime",
        hub_id="HuggingFaceH4/aime_2024",
        split="train",
        description="AIME 2024 (I and II), integer answers",
        expected_rows=30,
        fields=Fields(id="id"),
    )
)

register(
    Benchmark(
        name="aime25",
        hub_id="MathArena/aime_2025",
        split="train",
        description="AIME 2025 (I and II), integer answers",
        expected_rows=30,
        fields=Fields(id="problem_idx"),  # answers are int64 there; rendered as "70"
    )
)
