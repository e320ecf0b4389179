"""Where pipelink's caches live (the link cache, linker/cache.py; the build cache, authoring/build_cache.py),
and whether they are used: read on every call, not at import, so tests and tools can point them elsewhere
after importing pipelink.

    PIPELINK_CACHE_DIR   the root (default ~/.cache/pipelink)
    PIPELINK_CACHE=0     neither read nor write any cache (also false, off, no)
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_FILE_BYTES = 1 << 30  # no entry's file (an object, a cubin) is near it: a larger one is damage, not data


OFF = ("0", "false", "off", "no")  # PIPELINK_CACHE values that turn the caches off (any case)


def enabled() -> bool:
    return os.environ.get("PIPELINK_CACHE", "1").strip().lower() not in OFF


def cache_dir() -> Path:
    return Path(os.environ.get("PIPELINK_CACHE_DIR") or Path.home() / ".cache" / "pipelink")


def read_file(path: str | os.PathLike, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a cache's file, or of a file a cache entry depends on: a regular file, read up to `limit`.
    Anything else (a FIFO, a device such as /dev/zero, a file past the limit) is OSError: a cache is read only
    where it cannot block or exhaust the process, and a caller takes the error for a miss."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path} is not a regular file")
        if info.st_size > limit:
            raise OSError(f"{path} is larger than {limit} bytes")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise OSError(f"{path} grew past {limit} bytes")
        return data
    finally:
        os.close(fd)


def read_json(path: str | os.PathLike) -> object:
    """A cache's JSON file through read_file and the one JSON reader (its size and depth limits): ValueError or
    OSError for anything that is not one (a miss to the caller)."""
    from .jsonread import parse
    return parse(read_file(path))


def changed_since(paths, since: float) -> bool:
    """Whether a file was written or put in place (its mtime or ctime: an atomic `mv` of an older file changes
    the ctime) at or after `since` (time.time()), or cannot be looked at: what a command read while it ran is not
    what its cache entry would record, so nothing is stored."""
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            return True
        if max(info.st_mtime, info.st_ctime) >= since:
            return True
    return False
