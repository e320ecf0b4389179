"""The build cache: an object `pipelink build` made, stored under a hash of what shapes it, beside the link
cache (`linker/cache.py`: PIPELINK_CACHE_DIR, PIPELINK_CACHE=0 turns both off).

The key covers pipelink's version and the code that makes an object (the builder, the header generator,
the contract embedding, pipelink's device headers), nvcc's version, the nvcc command (its temporary
folders named, not spelled), the generated header, the contract's bytes and the source's path and bytes.
What the source includes is known only after a compile: nvcc lists it (`-MD`), and the entry records each
file with its hash; a lookup rehashes them, so an edited header makes a miss, as in ccache's direct mode, and so
does a header of the same name created in an earlier -I folder since (it would be read instead).
An entry is written into a temporary directory and renamed into place; anything wrong with one is a miss.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .. import __version__, toolchain
from ..core.cache_root import cache_dir, changed_since, enabled, read_file, read_json

PACKAGE = Path(__file__).resolve().parents[1]  # pipelink/
# pipelink's code that decides an object's bytes (besides the inputs and the nvcc command).
CODE = ("authoring/builder.py", "authoring/header.py", "formats/inputs.py")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_hash() -> str:
    h = hashlib.sha256()
    for f in sorted([*(PACKAGE / c for c in CODE), *PACKAGE.glob("include/pipelink/*.h")]):
        h.update(f"{f.relative_to(PACKAGE).as_posix()}\0{_sha256(f.read_bytes())}\n".encode())
    return h.hexdigest()


def key(command: list[str], scratch: Path, header: str, contract_bytes: bytes, source: Path) -> str:
    """The entry's name: everything known before compiling. `scratch`, the build's temporary folder, is
    named in the command as <scratch>."""
    doc = {"pipelink": __version__, "code": code_hash(), "nvcc": toolchain.nvcc_version(),
           "command": [a.replace(str(scratch), "<scratch>") for a in command], "header": _sha256(header.encode()),
           "contract": _sha256(contract_bytes), "source": [str(source.resolve()), _sha256(source.read_bytes())]}
    return _sha256(json.dumps(doc, sort_keys=True).encode())


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a make rule (`target: a b \\` ...), as nvcc -MD writes them; `\\ ` is a space."""
    body = text.replace("\\\n", " ").replace("\\\r\n", " ")
    _, sep, rest = body.partition(": ")
    if not sep:
        return []
    out, word, i = [], [], 0
    while i < len(rest):
        ch = rest[i]
        if ch == "\\" and i + 1 < len(rest) and rest[i + 1] == " ":
            word.append(" ")
            i += 2
            continue
        if ch.isspace():
            if word:
                out.append("".join(word))
                word = []
        else:
            word.append(ch)
        i += 1
    if word:
        out.append("".join(word))
    return out


def _entry(k: str) -> Path:
    return cache_dir() / "build" / k[:2] / k


def shadowed(path: str, include_dirs: list[str]) -> bool:
    """Whether a file that the compile found in include folder k (`path`) would now be found in an earlier folder
    of the search: one created there since would be read instead (the entry's bytes are not the compile's)."""
    p = Path(path)
    dirs = [Path(d).resolve() for d in include_dirs]
    for k, d in enumerate(dirs):
        if p.is_relative_to(d):
            rel = p.relative_to(d)
            return any((earlier / rel).exists() for earlier in dirs[:k])
    return False


# Names a folder gains that no #include can mean: the build's own outputs and their staging files.
_NOT_INCLUDED = (".o", ".a", ".cubin", ".fatbin", ".ltoir", ".json", ".map", ".html", ".svg", ".tmp", ".d")


def folder_names(folder: str) -> str:
    """A digest of the names in a folder the compile searched, less names no #include means (outputs): a header
    created there since the entry was stored (beside the header that includes it, or one a `__has_include` probes)
    could change what the compile reads; its bytes alone cannot say so."""
    try:
        names = sorted(n for n in os.listdir(folder) if not n.endswith(_NOT_INCLUDED))
    except OSError:
        return ""
    return _sha256("\0".join(names).encode())


def searched_folders(deps: list[str], include_dirs: list[str]) -> list[str]:
    """The folders a compile looks in: its -I folders and the folder of every file it read (a quoted #include looks
    beside the including file first)."""
    return sorted({str(Path(d).resolve()) for d in include_dirs} | {str(Path(p).resolve().parent) for p in deps})


def lookup(k: str, include_dirs: list[str] = ()) -> bytes | None:
    """The cached object if every file its compile read still has the bytes it had and none is now shadowed by a
    file of the same name earlier in `include_dirs` (the compile's -I folders, in order); else None (and a stale
    or broken entry is removed)."""
    if not enabled():
        return None
    entry = _entry(k)
    try:
        deps = read_json(entry / "deps.json")
        for path, digest in deps:
            if _sha256(read_file(path)) != digest:
                raise ValueError(f"{path} changed")
            if shadowed(path, list(include_dirs)):
                raise ValueError(f"{path} is shadowed")
        meta = read_json(entry / "meta.json")
        for folder, digest in meta["folders"].items():
            if folder_names(folder) != digest:
                raise ValueError(f"{folder} holds other files")
        data = read_file(entry / "object.o")
        if _sha256(data) != meta["sha256"] or meta.get("key") != k:  # an entry moved under another key is no hit
            raise ValueError("object damaged")
        return data
    except FileNotFoundError:
        shutil.rmtree(entry, ignore_errors=True)  # a partial entry, if any
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        shutil.rmtree(entry, ignore_errors=True)
        return None


def files_read(depfile: Path, scratch: Path, cwd: str | None = None) -> list[str]:
    """The files a compile read (nvcc's -MD list), less those under `scratch` (the generated header); a relative
    path in the list is relative to `cwd`, the folder nvcc ran in, and comes back joined to it."""
    found = [os.path.join(cwd, p) if cwd else p for p in parse_depfile(depfile.read_text())]
    return [p for p in found if not Path(p).resolve().is_relative_to(scratch.resolve())]


def recorded_files(k: str) -> list[str]:
    """The files the compile of entry `k` read, as recorded beside it; [] if unreadable."""
    try:
        return [str(p) for p, _ in read_json(_entry(k) / "deps.json")]
    except (OSError, ValueError, TypeError):
        return []


def store(k: str, data: bytes, depfile: Path, scratch: Path, began: float, include_dirs: list[str] = (),
          cwd: str | None = None) -> None:
    """Keep `data` under `k` with the files nvcc read (those under `scratch`, the generated header, are in
    the key), unless one of them was written or moved into place since the compile began (`began`, time.time():
    the object may be of its earlier bytes, the entry would record the later). A cache that cannot be written is
    no error: the build already succeeded."""
    if not enabled():
        return
    tmp = None
    try:
        deps = files_read(depfile, scratch, cwd)
        if changed_since(deps, began):
            return
        recorded = [[str(Path(p).resolve()), _sha256(read_file(p))] for p in deps]
        entry = _entry(k)
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{k[:8]}-", dir=entry.parent))
        (tmp / "object.o").write_bytes(data)
        (tmp / "deps.json").write_text(json.dumps(recorded))
        folders = {f: folder_names(f) for f in searched_folders(deps, list(include_dirs))
                   if not Path(f).is_relative_to(scratch.resolve())}  # the generated header's: in the key
        (tmp / "meta.json").write_text(json.dumps({"sha256": _sha256(data), "key": k, "folders": folders}))
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    except OSError:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
