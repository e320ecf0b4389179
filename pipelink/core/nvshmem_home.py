"""Where NVSHMEM is: the folder of the nvidia-nvshmem-cu13 wheel (include/, lib/). The toolchain compiles and
links a distributed link against its headers and device library; the runtime loads its host library from
the same folder, so the device code and the host library that sets it up are one NVSHMEM release.

Another package may bring its own NVSHMEM into the same `nvidia` namespace (torch does): the pinned release
is preferred wherever it is, and a folder of another release is reported as such (toolchain, runtime), never
used silently. PIPELINK_NVSHMEM_HOME names a folder of the same layout instead of searching."""
from __future__ import annotations

import os
import re
from pathlib import Path

PINNED = "3.8.0"  # pyproject.toml pins nvidia-nvshmem-cu13 to this release


def nvshmem_version(root: Path) -> str | None:
    """The release of the NVSHMEM folder `root` ('3.8.0'), from its version header; None if it has none."""
    try:
        text = (root / "include" / "non_abi" / "nvshmem_version.h").read_text()
    except OSError:
        return None
    parts = [re.search(rf"#define NVSHMEM_VENDOR_{k}_VERSION (\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else None


def _candidates() -> list[Path]:
    chosen = os.environ.get("PIPELINK_NVSHMEM_HOME")
    if chosen:
        return [Path(chosen)]
    try:
        import nvidia  # namespace package of the NVIDIA wheels
    except ImportError:
        return []
    return [Path(base) / "nvshmem" for base in getattr(nvidia, "__path__", [])]


def nvshmem_home() -> Path | None:
    """The NVSHMEM folder to use: the pinned release if one is found, else the first one found (its release
    then tells the caller why it will not do), else None."""
    found = [root for root in _candidates() if (root / "include" / "nvshmem.h").exists() and (root / "lib").is_dir()]
    pinned = [root for root in found if nvshmem_version(root) == PINNED]
    return (pinned or found or [None])[0]
