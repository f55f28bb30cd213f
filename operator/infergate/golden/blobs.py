"""Where a golden store keeps its bytes: the `BlobStore` interface and the directory store.

Keys are '/'-separated paths relative to the store's root (`infergate.golden.keys`).
Every put is atomic: a reader sees a whole blob or none. The directory store (the
default, a PVC mounted into the runner) writes to a partial file and renames it into
place, and publishes a staged record by renaming its directory, so a record appears
whole; the S3 store (`infergate.golden.s3`) relies on S3's whole-object puts.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Final, Protocol

from infergate.golden.errors import GoldenConfigError, GoldenMissingError, GoldenUnavailableError
from infergate.golden.keys import INDEX, RECORDS, STAGING

CHUNK: Final = 1 << 20
_PARTIAL: Final = ".partial-"


@dataclass(frozen=True)
class BlobInfo:
    """A listed blob: its key, size in bytes and last modification (UTC)."""

    key: str
    size: int
    modified: datetime


class BlobStore(Protocol):
    """What the golden store needs of a place that keeps bytes."""

    def describe(self) -> str:
        """Where this is, for messages (no credentials)."""

    def staging_root(self) -> Path | None:
        """A local directory to stage records in so `publish` can rename them; None: any."""

    def publish(self, local_dir: Path, prefix: str, files: Sequence[str]) -> None:
        """Store `files` (paths relative to `local_dir`) under `prefix`; may move them."""

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store `data` under `key`, whole or not at all."""

    def get_bytes(self, key: str) -> bytes:
        """The blob's bytes; `GoldenMissingError` when absent."""

    def read_chunks(self, key: str, sink: Callable[[bytes], None]) -> None:
        """Feed the blob's bytes to `sink` in chunks; `GoldenMissingError` when absent."""

    def local_path(self, key: str) -> Path | None:
        """The blob as a local file, when the store is a directory; None otherwise."""

    def list(self, prefix: str) -> Iterator[BlobInfo]:
        """Every blob whose key starts with `prefix` (a '/'-terminated folder)."""

    def delete(self, keys: Sequence[str]) -> None:
        """Delete these blobs; absent ones are no error."""


def _fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def check_key(key: str) -> str:
    """A relative '/'-separated key that stays inside the store."""
    pure = PurePosixPath(key)
    if not key or pure.is_absolute() or ".." in pure.parts or "\\" in key or "\x00" in key:
        raise GoldenConfigError(f"key {key!r} is not a relative path inside the store")
    return key


class DirectoryStore:
    """A directory (on a PVC in the cluster) holding `records/`, `index/` and `.staging/`."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)
        if self._root.exists() and not self._root.is_dir():
            raise GoldenConfigError(f"store: {self._root} exists and is not a directory")

    @property
    def root(self) -> Path:
        return self._root

    def describe(self) -> str:
        return f"directory {self._root}"

    def _path(self, key: str) -> Path:
        return self._root / check_key(key)

    def staging_root(self) -> Path:
        return self._root / STAGING

    def publish(self, local_dir: Path, prefix: str, files: Sequence[str]) -> None:
        target = self._path(prefix.rstrip("/"))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if self.staging_root() in local_dir.parents:
                # Same filesystem: the record appears whole, in one rename.
                local_dir.rename(target)
                _fsync_dir(target.parent)
                return
            for name in files:
                self._put_file(self._path(f"{prefix}{check_key(name)}"), local_dir / name)
        except OSError as err:
            raise GoldenUnavailableError(
                f"{self.describe()}: cannot publish {prefix}: {err}"
            ) from err

    def _put_file(self, target: Path, source: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}{_PARTIAL}{secrets.token_hex(4)}")
        shutil.copyfile(source, partial)
        partial.replace(target)

    def put_bytes(self, key: str, data: bytes) -> None:
        target = self._path(key)
        partial = target.with_name(f"{target.name}{_PARTIAL}{secrets.token_hex(4)}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with partial.open("xb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            partial.replace(target)
            _fsync_dir(target.parent)
        except OSError as err:
            partial.unlink(missing_ok=True)
            raise GoldenUnavailableError(f"{self.describe()}: cannot write {key}: {err}") from err

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as err:
            raise GoldenMissingError(f"{self.describe()}: {key} is missing") from err
        except OSError as err:
            raise GoldenUnavailableError(f"{self.describe()}: cannot read {key}: {err}") from err

    def read_chunks(self, key: str, sink: Callable[[bytes], None]) -> None:
        try:
            with self._path(key).open("rb") as handle:
                while chunk := handle.read(CHUNK):
                    sink(chunk)
        except FileNotFoundError as err:
            raise GoldenMissingError(f"{self.describe()}: {key} is missing") from err
        except OSError as err:
            raise GoldenUnavailableError(f"{self.describe()}: cannot read {key}: {err}") from err

    def local_path(self, key: str) -> Path:
        return self._path(key)

    def list(self, prefix: str) -> Iterator[BlobInfo]:
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self._root
        if not base.is_dir():
            return
        for folder, _dirs, names in os.walk(base):
            for name in sorted(names):
                if _PARTIAL in name:
                    continue
                path = Path(folder) / name
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue  # deleted while listing
                key = path.relative_to(self._root).as_posix()
                modified = datetime.fromtimestamp(stat.st_mtime, UTC)
                yield BlobInfo(key, stat.st_size, modified)

    def delete(self, keys: Sequence[str]) -> None:
        try:
            for key in keys:
                path = self._path(key)
                path.unlink(missing_ok=True)
                self._prune_empty(path.parent)
        except OSError as err:
            raise GoldenUnavailableError(f"{self.describe()}: cannot delete: {err}") from err

    def _prune_empty(self, folder: Path) -> None:
        stops = {self._root, self._root / RECORDS, self._root / INDEX, self.staging_root()}
        while folder not in stops and self._root in folder.parents:
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent
