"""Minerva: the undergraduate STEM problems (OCWCourses) from the Minerva paper.

e1 data prepare minerva
"""

from e1.data.registry import Benchmark, Fields, register

register(
    Benchmark(
        name="minerva",
        hub_id="math-ai/minervamath",
        split="test",
        description="Minerva OCW courses, undergraduate science and engineering",
        expected_rows=272,
        fields=Fields(problem="question"),
    )
)
