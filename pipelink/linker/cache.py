"""The link cache: a successful link, stored under a hash of everything that shapes its output.

Like Triton's kernel cache. The key covers pipelink's version and the hash of the modules that decide
a link's output (a changed linker must not reuse old links; an edited launcher or CLI need not throw
them away), the NVRTC and nvJitLink versions, every input file's path and bytes with any sidecar
contracts, and the options: every field of the frozen LinkOptions, by construction (`key_doc`). An entry is a directory
`<root>/<key[:2]>/<key>/` written into a temporary directory and renamed into place, so a reader
sees a whole entry or none. Anything wrong with an entry makes it a miss, and it is removed.

    PIPELINK_CACHE_DIR   where entries live (default ~/.cache/pipelink)
    PIPELINK_CACHE=0     neither read nor write the cache (as LinkOptions(cache=False), --no-cache)
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, toolchain

from ..core import jsonread
from ..core.expr import python_ast
from ..core.files import read_input_bytes
from ..core.cache_root import cache_dir, changed_since, enabled, read_file, read_json  # noqa: F401  (the link cache's root, the switch)
from ..core.diagnostics import Diagnostic
from ..formats.fatbin import CorruptError, UnsupportedError
from ..formats.inputs import NamedBytes, sidecar_paths
from ..runtime.manifest import Manifest
from ..core.pipeline import NOT_IN_KEY  # noqa: F401  (the marker key_doc honours)

PACKAGE = Path(__file__).resolve().parents[1]  # pipelink/


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# Modules the link reaches that do not decide its output: the launcher (LinkResult.kernel) and the file
# writer (LinkResult.save, the component builder). What they import only through themselves stays out too.
NOT_LINK_OUTPUT = frozenset({"runtime.launch", "formats.outputs"})


def _module_file(module: str) -> Path | None:
    """The file of a package module named relative to pipelink ("linker.glue", "toolchain"), or None."""
    base = PACKAGE.joinpath(*module.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if module and f.is_file():
            return f
    return None


def package_imports(module: str) -> set[str]:
    """The package's modules (named relative to pipelink) that `module` imports anywhere in its body,
    functions' imports included."""
    path = _module_file(module)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names = set()
    for node in ast.walk(python_ast(path.read_text(), "exec")):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - node.level + 1]
            target = [*base, *node.module.split(".")] if node.module else base
            names.add(".".join(target))
            names.update(".".join([*target, a.name]) for a in node.names)  # `from . import glue` names a module
    return {n for n in names if _module_file(n) is not None}


@functools.cache
def link_modules() -> tuple[str, ...]:
    """The modules that decide a link's output: every module the linker imports, directly or through
    another, except the launcher and the file writer. A new module the passes use is in by construction."""
    seen, todo = set(), ["linker.passes"]
    while todo:
        module = todo.pop()
        if module not in seen and module not in NOT_LINK_OUTPUT:
            seen.add(module)
            todo += sorted(package_imports(module))
    return tuple(sorted(seen))


@functools.cache
def source_hash() -> str:
    """pipelink's own code that shapes a link: the link's modules, the headers the glue includes, the schemas."""
    files = sorted([*(_module_file(m) for m in link_modules()), *PACKAGE.glob("include/pipelink/*.h"),
                    *PACKAGE.glob("schema/*.json")])
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(PACKAGE).as_posix()}\0{_sha256(f.read_bytes())}\n".encode())
    return h.hexdigest()


def _input_doc(path) -> dict:
    """One input: its path (the manifest and the diagnostics name it), its bytes, and every sidecar
    contract the read pass could pick up for it or, in an archive, for each member."""
    if isinstance(path, NamedBytes):  # no file, so no sidecar
        return {"path": path.name, "sha256": _sha256(path.data), "sidecars": []}
    name = os.fspath(path)
    data = read_input_bytes(name)
    sidecars = [[str(p), _sha256(read_input_bytes(p))] for p in sidecar_paths(name, data)]
    return {"path": name, "sha256": _sha256(data), "sidecars": sidecars}


def inputs_changed_since(inputs, since: float) -> bool:
    """An input file or a sidecar it could pick up written or moved into place since `since` (a rebuild during the
    link): the link read one version, its key another."""
    paths = []
    for item in inputs:
        if isinstance(item, NamedBytes):
            continue
        name = os.fspath(item)
        paths.append(name)
        try:
            paths += [str(p) for p in sidecar_paths(name, read_input_bytes(name))]
        except (OSError, CorruptError, UnsupportedError):
            return True
    return changed_since(paths, since)


def key_doc(value):
    """A canonical JSON value of `value` for the key: a dataclass as its type's name and every field (but
    those marked NOT_IN_KEY), mappings sorted, sequences in order. Any other type raises TypeError: an
    option of a new kind must say how it keys, never slip out of the key."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__, **{f.name: key_doc(getattr(value, f.name))
                                                for f in dataclasses.fields(value) if f.metadata.get("link_key", True)}}
    if isinstance(value, dict):
        return {str(k): key_doc(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [key_doc(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot key a link on a {type(value).__name__}: give the option a key_doc form")


def options_doc(options) -> dict:
    """The options as the key sees them: every field of LinkOptions and of its PipelineSpec, by construction."""
    return key_doc(options)


def link_key(inputs, options) -> str | None:
    """The entry's key, or None where there is nothing safe to key on: an unreadable or malformed input
    (the read pass reports it) or a toolchain that cannot say its version (the link fails too)."""
    try:
        files = [_input_doc(p) for p in inputs]
    except (OSError, CorruptError, UnsupportedError):
        return None
    try:
        tools = {"nvjitlink": list(toolchain.nvjitlink_version()), "nvrtc": list(toolchain.nvrtc_version())}
    except Exception:  # ImportError, a driver-library load failure, ...: the passes say what is wrong
        return None
    doc = {"pipelink": __version__, "source": source_hash(), **tools, "options": options_doc(options), "inputs": files}
    return _sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())


def entry_dir(key: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / key[:2] / key


@dataclass
class CachedLink:
    cubin: bytes
    manifest: Manifest
    link_map: str
    glue: str
    monolithic: str | None
    diagnostics: list[Diagnostic]
    link_picture: str | None = None


DIGESTS = "sha256.json"  # the entry's files and their hashes: a file damaged since the store is a miss
KEY = "key"               # DIGESTS also names the key the entry was stored under


def load(key: str, monolithic: bool = False, root: Path | None = None) -> CachedLink | None:
    """The entry for `key`, or None. A damaged entry (a file missing or unreadable, a cubin that is not
    the one its manifest hashed) is removed, so the link that follows writes a good one."""
    d = entry_dir(key, root)
    try:
        if not d.is_dir():
            return None
    except OSError:  # a root the system cannot look into (a name too long): no cache, not a failed link
        return None
    try:
        digests = read_json(d / DIGESTS)
        if digests.get(KEY) != key:  # an entry moved under another key is no hit
            raise ValueError("the entry was stored under another key")

        def read(name: str) -> bytes:  # every file as it was stored, or the entry is damaged
            data = read_file(d / name)
            if digests.get(name) != _sha256(data):
                raise ValueError(f"{name} is not the file the entry stored")
            return data

        warnings = jsonread.parse(read("diagnostics.json"))
        hit = CachedLink(cubin=read("kernel.cubin"), manifest=Manifest.from_json(jsonread.parse(read("manifest.json"))),
                         link_map=read("link.map").decode(), glue=read("glue.cu").decode(),
                         monolithic=read("monolithic.cu").decode() if monolithic else None,
                         diagnostics=[Diagnostic.from_json(x) for x in warnings],
                         link_picture=read("link.svg").decode())
        if hit.manifest.cubin_sha256 != _sha256(hit.cubin):
            raise ValueError("cubin does not match its manifest")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):  # JSONError is a ValueError
        _remove(d)
        return None
    return hit


def store(key: str, result, root: Path | None = None) -> Path | None:
    """Write a successful link's outputs (a LinkResult) as the entry for `key`; the entry's path, or None
    where another process stored it first or the cache cannot be written (the link stands either way)."""
    root = root or cache_dir()
    final = entry_dir(key, root)
    files = {"kernel.cubin": result.cubin, "manifest.json": json.dumps(result.manifest.to_json(), indent=1),
             "link.map": result.link_map, "link.svg": result.link_picture, "glue.cu": result.glue,
             "diagnostics.json": json.dumps([d.to_json() for d in result.diagnostics], indent=1)}
    if result.monolithic is not None:
        files["monolithic.cu"] = result.monolithic
    files = {name: data if isinstance(data, bytes) else data.encode(errors="surrogateescape") for name, data in files.items()}
    files[DIGESTS] = json.dumps({KEY: key, **{name: _sha256(data) for name, data in files.items()}}, indent=1).encode()
    staging = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Stage on the cache's own file system: the rename into place must be atomic.
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        for name, data in files.items():
            (staging / name).write_bytes(data)
        final.parent.mkdir(exist_ok=True)
        os.rename(staging, final)  # fails if `final` exists: another process won, and its entry is as good
        return final
    except OSError:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        return None


def _remove(d: Path) -> None:
    """Rename the entry aside first, so its key is free at once even while the files are deleted."""
    aside = None
    try:
        aside = Path(tempfile.mkdtemp(prefix=".bad-", dir=d.parent.parent))
        os.rename(d, aside / "entry")
    except OSError:
        shutil.rmtree(d, ignore_errors=True)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
