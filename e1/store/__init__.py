"""The run directory: what a run writes and how it is kept whole.

- :mod:`e1.store.results`: the parquet schemas and the one atomic writer;
- :mod:`e1.store.run_identity`: what a run directory holds, and the check that a run does not mix with another;
- :mod:`e1.store.samples`: samples written once per batch as parts, compacted at the end;
- :mod:`e1.store.think_ends`: samples written before their ``think_end`` vocabulary was recorded, read in today's;
- :mod:`e1.store.digest`: a file's content hash (:func:`file_digest`), never its size and time;
- :mod:`e1.store.paths`: names that become paths (:func:`file_name`) and paths kept inside their root (:func:`inside`);
- :mod:`e1.store.lock`: one process per run directory (a lock that dies with its process);
- :mod:`e1.store.preflight`: checks before any model loads (``--out`` writable, model paths,
  budgets against the context).
"""

from e1.store.digest import file_digest
from e1.store.disk import DISK_ERRNOS, RESUME, disk_errno, disk_errors
from e1.store.guard import check_alive
from e1.store.guard import guard as guard_dir  # its own name would hide the module e1.store.guard
from e1.store.lock import held, run_lock
from e1.store.owned import (
    MANIFEST,
    owned_names,
    read_manifest,
    record_files,
    recorded,
    remove_owned,
    replace_owned,
    stamps,
)
from e1.store.paths import file_name, inside, new_run_dir
from e1.store.preflight import CONTEXT_FIELDS, check_context, check_model_path, check_out, check_writable, missing_file
from e1.store.results import (
    CONFIG,
    GROUP_KEY,
    MODE_FORMAT,
    MODE_FORMAT_KEY,
    SAMPLE_COLUMNS,
    SAMPLE_KEY,
    SAMPLES,
    SUMMARY,
    SUMMARY_COLUMNS,
    THINK_END_KEY,
    THINK_END_VOCABULARY,
    THINK_RATE_COLUMNS,
    atomic_write,
    bound_counts,
    parquet_metadata,
    read_parquet,
    read_whole,
    think_end_vocabulary,
    write_json,
    write_parquet,
    write_text,
)
from e1.store.run_identity import (
    CHECKPOINTS,
    FINGERPRINTS,
    INCLUDE_FINGERPRINTS,
    METRICS,
    check_datasets,
    check_run_dir,
    mode_format,
    model_identity,
    read_record,
)
from e1.store.samples import SampleStore, held_datasets
from e1.store.think_ends import read_old_ends_with

__all__ = [
    "CHECKPOINTS",
    "CONFIG",
    "CONTEXT_FIELDS",
    "DISK_ERRNOS",
    "FINGERPRINTS",
    "GROUP_KEY",
    "INCLUDE_FINGERPRINTS",
    "MANIFEST",
    "METRICS",
    "MODE_FORMAT",
    "MODE_FORMAT_KEY",
    "RESUME",
    "owned_names",
    "read_manifest",
    "read_record",
    "record_files",
    "recorded",
    "remove_owned",
    "replace_owned",
    "SAMPLES",
    "SAMPLE_COLUMNS",
    "SAMPLE_KEY",
    "SUMMARY",
    "SUMMARY_COLUMNS",
    "THINK_END_KEY",
    "THINK_END_VOCABULARY",
    "THINK_RATE_COLUMNS",
    "think_end_vocabulary",
    "SampleStore",
    "stamps",
    "atomic_write",
    "bound_counts",
    "check_alive",
    "check_context",
    "check_datasets",
    "check_model_path",
    "check_out",
    "check_run_dir",
    "check_writable",
    "disk_errno",
    "disk_errors",
    "file_digest",
    "file_name",
    "guard_dir",
    "held",
    "held_datasets",
    "inside",
    "missing_file",
    "mode_format",
    "model_identity",
    "new_run_dir",
    "parquet_metadata",
    "read_parquet",
    "read_whole",
    "read_old_ends_with",
    "run_lock",
    "write_json",
    "write_parquet",
    "write_text",
]
