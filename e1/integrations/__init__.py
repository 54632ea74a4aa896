"""e1's budgets inside other tools: :mod:`e1.integrations.trl` (budgeted rollouts for TRL's ``GRPOTrainer``).

Nothing here imports the other tool, torch or transformers at import time; each loads inside the
function that needs it.
"""

from __future__ import annotations

from e1.integrations.trl import BudgetedRollouts, budgeted_rollouts, sampling_of

__all__ = ["BudgetedRollouts", "budgeted_rollouts", "sampling_of"]
