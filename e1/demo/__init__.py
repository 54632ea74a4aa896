"""`e1 demo`: the paper in miniature, offline on a laptop CPU (see :mod:`e1.data.digits_task`).

- :mod:`e1.demo.pipeline`: data → SFT → GRPO (E1 and a cosine-reward baseline) → a budget sweep;
- :mod:`e1.demo.claims`: the paper's claims checked on the sweep, and the README's table of them.
"""

from e1.demo.claims import check_readme, claims_markdown, update_readme
from e1.demo.pipeline import DemoConfig, model_names, run_demo

__all__ = ["DemoConfig", "check_readme", "claims_markdown", "model_names", "run_demo", "update_readme"]
