"""MATH-500: the 500-problem test subset of Hendrycks MATH chosen by "Let's Verify Step by Step".

e1 data prepare math500
"""

from e1.data.registry import Benchmark, Fields, register

register(
    Benchmark(
        name="math500",
        hub_id="HuggingFaceH4/MATH-500",
        split="test",
        description="MATH-500, competition math across 7 subjects and 5 levels",
        expected_rows=500,
        fields=Fields(id="unique_id"),  # e.g. "test/precalculus/807.json"
    )
)
