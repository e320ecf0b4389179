"""Import a case study's module by its plain name from that case study's folder, whatever other tests put on
sys.path before: case studies each have their own `run.py`, `report.py`, ... and import their siblings by name."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path


def case_module(folder: Path, name: str):
    """`folder`/`name`.py as module `name`; a module of that name from another folder is replaced."""
    folder = Path(folder).resolve()
    have = sys.modules.get(name)
    if have is not None and Path(getattr(have, "__file__", "") or "").resolve().parent == folder:
        return have
    sys.modules.pop(name, None)
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
