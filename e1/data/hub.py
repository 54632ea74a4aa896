"""Reading a benchmark's hub dataset, or its copy under ``$E1_HUB_MIRROR``.

    records = hub_records(get_benchmark("gsm8k"))          # one config and split, through ``datasets``
    [path] = hub_files(get_benchmark("taco"), ["ALL/test-00000-of-00001.parquet"])  # named files

With ``E1_HUB_MIRROR=DIR`` a hub id is read from ``DIR/<hub_id>/``, a copy of the hub repository
in its own layout; nothing is downloaded. A mirror is read afresh every time (``datasets`` would
serve a corrected mirror's old rows from its cache), and :func:`mirror_fingerprint` tells when
its files have changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from e1.data.registry import Benchmark
from e1.errors import DataError

HUB_MIRROR_ENV = "E1_HUB_MIRROR"


def hub_records(benchmark: Benchmark, config: str | None = None, split: str | None = None) -> list[dict[str, Any]]:
    """One split of the benchmark's hub dataset as plain records, read through ``datasets.load_dataset``.

    ``config`` and ``split`` default to the benchmark's own. A mirror is read into a fresh cache
    folder that is removed afterwards: ``datasets`` keys its cache of a local folder by the
    folder's name and the config, so it would serve a corrected mirror's old rows.
    """
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    config, split = config or benchmark.config, split or benchmark.split
    mirror = _mirror_dir(benchmark)
    source = str(mirror or benchmark.hub_id)
    bars_were_on = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # the CLI shows its own status line
    try:
        with _fresh_cache() if mirror else contextlib.nullcontext() as cache_dir:
            return datasets.load_dataset(source, config, split=split, cache_dir=cache_dir).to_list()
    except (ConnectionError, TimeoutError):  # includes huggingface_hub's OfflineModeIsEnabled
        raise _offline_error(benchmark) from None
    except DatasetNotFoundError:
        raise _not_on_hub(benchmark) from None
    except (ValueError, FileNotFoundError) as err:
        described = f"config {config}, " if config else ""
        raise DataError(
            f"{benchmark.name}: cannot load {source} ({described}split {split}): {err}",
            hint="a mirror must keep the hub layout (data/<split>-*.parquet, README.md listing configs)",
        ) from None
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()


@contextlib.contextmanager
def _fresh_cache():
    """An empty folder beside ``datasets``' own cache (same disk), removed on exit."""
    import datasets

    parent = Path(datasets.config.HF_DATASETS_CACHE)
    parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="e1-mirror-", dir=parent) as folder:
        yield folder


def hub_files(benchmark: Benchmark, filenames: Sequence[str]) -> list[Path]:
    """Local paths of files of the benchmark's hub repository (downloaded once into the hub cache)."""
    mirror = _mirror_dir(benchmark)
    if mirror is not None:
        missing = [name for name in filenames if not (mirror / name).is_file()]
        if missing:
            raise DataError(
                f"{benchmark.name}: {mirror} has no {', '.join(missing)} ({HUB_MIRROR_ENV} is set)",
                hint=f"copy those files of {benchmark.hub_id} there, in the hub repository's layout",
            )
        return [mirror / name for name in filenames]
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )

    paths = []
    for name in filenames:
        try:
            paths.append(Path(hf_hub_download(benchmark.hub_id, name, repo_type="dataset")))
        except (LocalEntryNotFoundError, ConnectionError, TimeoutError):  # offline, or no connection
            raise _offline_error(benchmark) from None
        except RepositoryNotFoundError:
            raise _not_on_hub(benchmark) from None
        except EntryNotFoundError:
            raise DataError(
                f"{benchmark.name}: {benchmark.hub_id} has no file {name}",
                hint=f"the hub dataset may have changed; prepare from a file: e1 data prepare --from FILE "
                f"--name {benchmark.name}",
            ) from None
    return paths


def _mirror_dir(benchmark: Benchmark) -> Path | None:
    """``$E1_HUB_MIRROR/<hub_id>`` if the mirror is set (it must then hold the dataset), else None."""
    mirror = os.environ.get(HUB_MIRROR_ENV, "")
    if not mirror:
        return None
    local = Path(mirror).expanduser() / benchmark.hub_id
    if not local.is_dir():
        raise DataError(
            f"{benchmark.name}: {local} does not exist ({HUB_MIRROR_ENV} is set)",
            hint=f"copy the hub repo there (hf download {benchmark.hub_id} --repo-type dataset "
            f"--local-dir {local}) or unset {HUB_MIRROR_ENV}",
        )
    return local


def _offline_error(benchmark: Benchmark) -> DataError:
    return DataError(
        f"could not reach the Hugging Face hub for {benchmark.name} ({benchmark.hub_id})",
        hint=f"offline? use a local copy: e1 data prepare --from FILE --name {benchmark.name}, "
        f"or set {HUB_MIRROR_ENV}=DIR with DIR/{benchmark.hub_id} a copy of the hub repo",
    )


def _not_on_hub(benchmark: Benchmark) -> DataError:
    return DataError(
        f"{benchmark.name}: {benchmark.hub_id} is not on the hub (or needs a login)",
        hint=f"prepare from a file instead: e1 data prepare --from FILE --name {benchmark.name}",
    )


def mirror_fingerprint(benchmark: Benchmark) -> str | None:
    """``mirror DIR sha256:...`` over each file under the benchmark's mirror folder (hidden ones,
    such as ``hf download``'s ``.cache``, left out): its path and a hash of its bytes
    (:func:`e1.store.file_digest`), so a file replaced by another of the same size and
    modification time (``cp -p``, ``touch -r``) is new. None when no mirror is set or it does not
    hold this dataset."""
    from e1.store import file_digest

    mirror = os.environ.get(HUB_MIRROR_ENV, "")
    local = Path(mirror).expanduser() / benchmark.hub_id if mirror and benchmark.hub_id else None
    if local is None or not local.is_dir():
        return None
    digest = hashlib.sha256()
    for folder, subfolders, files in os.walk(local):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith("."))
        for name in sorted(name for name in files if not name.startswith(".")):
            path = Path(folder, name)
            with contextlib.suppress(OSError):  # a dangling link counts as absent
                digest.update(f"{path.relative_to(local).as_posix()}\0{file_digest(path)}\n".encode())
    return f"mirror {local.resolve()} sha256:{digest.hexdigest()[:24]}"
