"""A released vLLM's source files, read from its wheel on PyPI without downloading it: the wheel is a
zip, and ``zipfile`` only needs its central directory and the members asked for, which HTTP range
requests fetch (about 1 MB for a 300 MB wheel).

    read = wheel_source("vllm", "0.26.0")
    read("vllm/entrypoints/llm.py")   # text, or None when the wheel has no such file
"""

from __future__ import annotations

import io
import json
import urllib.request
import zipfile

BLOCK = 256 * 1024


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file, fetched in cached blocks."""

    def __init__(self, url: str, timeout: float = 20):
        self.url, self.timeout, self.position, self.blocks = url, timeout, 0, {}
        request = urllib.request.Request(url, method="HEAD")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            self.size = int(response.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.position = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence] + offset
        return self.position

    def _block(self, index: int) -> bytes:
        if index not in self.blocks:
            first, last = index * BLOCK, min(self.size, (index + 1) * BLOCK) - 1
            request = urllib.request.Request(self.url, headers={"Range": f"bytes={first}-{last}"})
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                self.blocks[index] = response.read()
        return self.blocks[index]

    def read(self, size: int = -1) -> bytes:
        end = self.size if size is None or size < 0 else min(self.size, self.position + size)
        parts = []
        while self.position < end:
            block = self._block(self.position // BLOCK)
            start = self.position % BLOCK
            piece = block[start : start + end - self.position]
            parts.append(piece)
            self.position += len(piece)
        return b"".join(parts)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def wheel_url(package: str, version: str, timeout: float = 20) -> str:
    """The x86_64 Linux wheel of ``package==version``, from PyPI's simple index (what pip reads)."""
    request = urllib.request.Request(
        f"https://pypi.org/simple/{package}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        files = json.load(response)["files"]
    prefix = f"{package.replace('-', '_')}-{version}-"
    return next(f["url"] for f in files if f["filename"].startswith(prefix) and f["filename"].endswith("x86_64.whl"))


def wheel_source(package: str, version: str):
    """A function from a path inside the wheel to that file's text (None when absent)."""
    archive = zipfile.ZipFile(RangeFile(wheel_url(package, version)))
    names = set(archive.namelist())

    def read(path: str) -> str | None:
        return archive.read(path).decode("utf-8", errors="replace") if path in names else None

    return read
