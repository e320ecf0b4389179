"""Where pipelink's caches live (the link cache, linker/cache.py; the build cache, authoring/build_cache.py),
and whether they are used: read on every call, not at import, so tests and tools can point them elsewhere
after importing pipelink.

    PIPELINK_CACHE_DIR   the root (default ~/.cache/pipelink)
    PIPELINK_CACHE=0     neither read nor write any cache
"""
from __future__ import annotations

import os
from pathlib import Path


def enabled() -> bool:
    return os.environ.get("PIPELINK_CACHE", "1") != "0"


def cache_dir() -> Path:
    return Path(os.environ.get("PIPELINK_CACHE_DIR") or Path.home() / ".cache" / "pipelink")
