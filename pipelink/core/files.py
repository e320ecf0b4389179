"""Reading an input file: its bytes, within a size limit, read once where a second read would differ.

A command may read an input more than once (to tell a contract from an object, to find its sidecars, to
key the link cache). A regular file reads the same each time; a stream does not: a pipe, a FIFO,
`/dev/stdin` or a shell's `<(...)` is empty the second time, and `/dev/zero` never ends. So within one
command (`reading()`: the CLI's and the API's entry points) a stream's bytes are kept, keyed by its device
and inode, and every read stops at the limit. A later command (a long-lived process using the API) reads
a FIFO afresh.
"""
from __future__ import annotations

import contextlib
import os
import stat
import threading

# Objects with LTO-IR for several archs are tens of MB; a GiB is no input pipelink is meant to take.
MAX_INPUT_BYTES = 1 << 30

_local = threading.local()  # per thread: depth of reading() scopes, and the streams read in them


@contextlib.contextmanager
def reading():
    """One command's reads: a stream read inside is read once, its bytes kept until the outermost scope ends."""
    depth = getattr(_local, "depth", 0)
    if depth == 0:
        _local.streams = {}
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth
        if depth == 0:
            _local.streams = {}


class TooLarge(OSError):
    """Raised for an input over the limit; an OSError, so every reader reports it as it reports others."""

    def __init__(self, limit: int):
        super().__init__(f"it is larger than {_size(limit)}, the most pipelink reads")
        self.strerror = str(self.args[0])
        self.limit = limit


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def read_input_bytes(path: str | os.PathLike, limit: int | None = None) -> bytes:
    """The bytes of the file at `path` (OSError if it cannot be read, TooLarge past `limit`, by default
    MAX_INPUT_BYTES)."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    name = os.fspath(path)
    st = os.stat(name)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", name)
    if stat.S_ISREG(st.st_mode):
        if st.st_size > limit:
            raise TooLarge(limit)
        with open(name, "rb") as f:
            data = f.read(limit + 1)
    else:
        key = (st.st_dev, st.st_ino)
        streams = _local.streams if getattr(_local, "depth", 0) else {}  # outside a command: read afresh
        if key in streams:
            data = streams[key]
        else:
            with open(name, "rb") as f:
                chunks, total = [], 0
                while total <= limit:
                    chunk = f.read(min(1 << 20, limit + 1 - total))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    total += len(chunk)
            data = streams[key] = b"".join(chunks)
    if len(data) > limit:
        raise TooLarge(limit)
    return data
