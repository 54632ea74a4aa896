"""e1: Elastic Reasoning under strict token budgets.

Separate budgeting gives the thinking phase ``t`` tokens and the solution phase ``s``
tokens; budget-constrained GRPO teaches a model to answer well from truncated thinking.

    >>> from e1.budget import Budget
    >>> Budget.parse("1k", "512")
    Budget(think=1024, solve=512)
"""

__version__ = "0.1.0"
