"""The run directory: what a run writes and how it is kept whole.

- :mod:`e1.store.results`: the parquet schemas, the one atomic writer, a run's identity check;
- :mod:`e1.store.samples`: samples written once per batch as parts, compacted at the end;
- :mod:`e1.store.lock`: one process per run directory (a lock that dies with its process);
- :mod:`e1.store.preflight`: checks before any model loads (``--out`` writable, model paths,
  budgets against the context).
"""
