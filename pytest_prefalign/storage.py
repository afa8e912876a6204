"""Files: the user cache, atomic writes and the locks that workers share. No heavy imports."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

T = TypeVar("T")

CACHE_ENV = "PREFALIGN_CACHE"


def cache_root() -> Path:
    """The user cache: ``$PREFALIGN_CACHE``, else ``$XDG_CACHE_HOME/prefalign``, else
    ``~/.cache/prefalign``."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "prefalign"


def cache_dir(*parts: str) -> Path:
    """A sub-folder of the user cache, created on first use."""
    path = cache_root().joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def content_key(*parts: Any) -> str:
    """A short stable hash of JSON-serialisable parts (config, fingerprints)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def memoised_sha256(path: Path) -> str:
    """The file's sha256, remembered by (path, size, mtime) in ``<cache>/models/sha256.json``:
    hashing a 100 MB file each load would cost more than loading the converted model."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    memo_path = cache_dir("models") / "sha256.json"
    known = _read_memo(memo_path)
    if key in known:
        return known[key]
    digest = file_sha256(path)
    with locked(memo_path):
        known = _read_memo(memo_path)
        known[key] = digest
        atomic_write_json(memo_path, known)
    return digest


def kept_json(path: Path, compute: Callable[[], T], valid: Callable[[Any], bool]) -> T:
    """The JSON value kept at ``path`` where it is readable and ``valid``, else ``compute()``,
    kept there for the next process (a folder that cannot be written: computed again then)."""
    try:
        found = read_json(path)
    except (OSError, ValueError):
        found = None
    if found is not None and valid(found):
        return cast(T, found)
    value = compute()
    try:
        atomic_write_json(path, value)
    except OSError:
        pass
    return value


def _read_memo(path: Path) -> dict[str, str]:
    try:
        data = read_json(path)
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are for sharing
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def make_shareable(folder: Path) -> None:
    """Give a folder built privately (``mkdtemp``, libraries that write 0600 files) the modes
    the user's umask gives new files: the cache is meant to be shared like its parent."""
    mask = _umask()
    for dirpath, _, filenames in os.walk(folder):
        os.chmod(dirpath, 0o777 & ~mask)
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o666 & ~mask)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def atomic_write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, default=_jsonable) + "\n" for r in rows))


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


@contextlib.contextmanager
def locked(path: Path, timeout: float = 3600) -> Iterator[None]:
    """Hold an inter-process lock beside ``path`` (pytest-xdist workers share caches)."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock", timeout=timeout):
        yield


STALE_AFTER = 3600.0  # seconds: a temporary file this old belongs to no running write


def remove_stale_temporaries(root: Path, max_age: float = STALE_AFTER) -> list[Path]:
    """Remove what interrupted writes left under ``root``: ``.NAME.XXXX.tmp`` files and folders
    (``atomic_write_bytes``, model conversions). One is stale when the lock its writer holds
    (``NAME.lock`` beside it) is free, or, for writers without a lock, when nothing in it
    changed for ``max_age`` seconds: a concurrent run's write in progress is left alone."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for dirpath, dirnames, filenames in os.walk(root):
        folder = Path(dirpath)
        for name in [*dirnames, *filenames]:
            path = folder / name
            if name.startswith(".") and name.endswith(".tmp") and _stale(path, max_age):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                removed.append(path)
        dirnames[:] = [d for d in dirnames if (folder / d).exists()]
    return removed


def _stale(path: Path, max_age: float) -> bool:
    owner = path.name[1:-4].rpartition(".")[0]  # ".NAME.XXXX.tmp" -> "NAME"
    lock = path.with_name(owner + ".lock")
    if owner and lock.exists():
        from filelock import FileLock, Timeout

        try:
            with FileLock(str(lock), timeout=0):
                return True  # nobody holds the writer's lock: the write is over
        except Timeout:
            return False
    return time.time() - _newest_change(path) > max_age


def _newest_change(path: Path) -> float:
    newest = path.lstat().st_mtime
    if path.is_dir():
        for dirpath, _, filenames in os.walk(path):
            for name in filenames:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
    return newest


def _jsonable(obj: Any) -> Any:
    # numpy scalars and arrays, Paths: anything else is a bug worth a TypeError
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
