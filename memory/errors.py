"""The memory's errors, at the bottom of the package so every module can raise them."""
from __future__ import annotations


class MemoryStoreError(Exception):
    """Base class of the memory's persistence errors."""


class MemoryFileError(MemoryStoreError):
    """A memory file is missing, truncated, corrupted or of an unsupported schema.
    ``.path`` names the file."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class MemoryMismatch(MemoryStoreError):
    """The stored memory was built with another key encoder, normalizer or dimensions."""
