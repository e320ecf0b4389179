"""Where a command writes. Every output is checked against every input the command reads and
against the other outputs before anything runs, then all are written atomically, or none.

`-` names stdout; one output at most goes there, and a binary one never to a terminal. Files are
compared by resolved path and by device and inode, so a symbolic or a hard link to an input is
caught too. Files get the mode any new file gets (0666 less the umask), not mkstemp's 0600.
A symbolic link is written through (its target is replaced, the link stays), and what is not a
regular file (/dev/null, a FIFO, a terminal) is written to as it is, never replaced by a file.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from dataclasses import dataclass

from ..core.diagnostics import DiagnosticSink, Location

STDOUT = "-"


@dataclass(frozen=True)
class Output:
    path: str           # STDOUT for stdout
    role: str           # "cubin", "manifest", "link map", ...
    option: str         # how the user chose it: "-o", "--map", "default: the cubin's name with .json"
    binary: bool = False
    hint: str | None = None  # how to move this output elsewhere

    @property
    def label(self) -> str:
        if self.path == STDOUT:
            return f"the {self.role} (stdout, {self.option} -)"
        return f"the {self.role} {self.path} ({self.option})"


@dataclass(frozen=True)
class Input:
    path: str
    label: str  # "the pipeline file rowsum.json", "input tile.o", ...


def object_inputs(paths, pipeline: str | None = None) -> list[Input]:
    """What link and check read: each input, every sidecar contract the read pass could pick up for
    it (an archive's members' too), and the pipeline file."""
    from .fatbin import CorruptError, UnsupportedError
    from .inputs import sidecar_paths

    out = []
    for path in map(str, paths):
        out.append(Input(path, f"input {path}"))
        try:
            sidecars = sidecar_paths(path)
        except (OSError, CorruptError, UnsupportedError):  # the read pass reports it
            sidecars = []
        out += [Input(str(s), f"the sidecar contract {s} of {path}") for s in sidecars]
    if pipeline:
        out.append(Input(str(pipeline), f"the pipeline file {pipeline}"))
    return out


def _identity(path: str) -> tuple[str, tuple[int, int] | None]:
    try:
        st = os.stat(path)
        inode = (st.st_dev, st.st_ino)
    except (OSError, ValueError):
        inode = None
    return os.path.realpath(path), inode


def _same(a, b) -> bool:
    return a[0] == b[0] or (a[1] is not None and a[1] == b[1])


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def _stdout_file() -> tuple[int, int] | None:
    """The file stdout writes to, where two writers would corrupt it (a pipe, a socket, a regular file: not a
    terminal or /dev/null), as (device, inode); None otherwise."""
    import stat
    try:
        st = os.fstat(1)
    except (OSError, ValueError):
        return None
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISREG(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        return st.st_dev, st.st_ino
    return None


def check_outputs(outputs: list[Output], inputs: list[Input], sink: DiagnosticSink,
                  report_on_stdout: str | None = None) -> bool:
    """True when the outputs may be written: none is an input, a directory or another output, and
    stdout carries one thing at most (`report_on_stdout`: what else the command prints there). An output named
    by a path to the file stdout writes to (/dev/stdout, /dev/fd/1, or the file it is redirected to) counts as
    stdout."""
    before = len(sink.errors)
    stdout = _stdout_file()
    on_stdout = [o.label for o in outputs if o.path == STDOUT or
                 (stdout is not None and _identity(o.path)[1] == stdout)] + \
        ([report_on_stdout] if report_on_stdout else [])
    if len(on_stdout) > 1:
        sink.error("PL122", f"{' and '.join(on_stdout)} would both go to stdout")
    for o in outputs:
        if o.path == STDOUT and o.binary and _stdout_is_terminal():
            sink.error("PL123", f"{o.label} is binary and stdout is a terminal")
    files = [(o, _identity(o.path)) for o in outputs if o.path != STDOUT]
    read = [(i, _identity(i.path)) for i in inputs if i.path != STDOUT]
    for n, (o, ident) in enumerate(files):
        if o.path.endswith(os.sep) or (os.altsep and o.path.endswith(os.altsep)):
            sink.error("PL007", f"{o.label} {o.path[:80]!r} ends in a path separator: it names a folder",
                       Location(file=o.path), hint=o.hint or "name a file, not a directory")
            continue
        if os.path.islink(o.path) and _loops(o.path):
            sink.error("PL007", f"{o.label} is a symbolic link that leads back to itself", Location(file=o.path),
                       hint=o.hint or "point the link at a file, or write elsewhere")
            continue
        if os.path.isdir(o.path):
            sink.error("PL007", f"{o.label} is a directory", Location(file=o.path),
                       hint=o.hint or "name a file, not a directory")
            continue
        blocked = _file_in_the_way(o.path)
        if blocked:  # the folder cannot be made: said before the work, not after it
            sink.error("PL007", f"cannot write {o.label}: {blocked} is a file, not a folder",
                       Location(file=o.path), hint=o.hint)
            continue
        for i, other in read:
            if _same(ident, other):
                sink.error("PL120", f"{o.label} would overwrite {i.label}", Location(file=o.path), hint=o.hint,
                           related=(Location(file=i.path),))
                break
        for other_output, _ in files:  # one output named as a folder on another's path: one of them cannot be
            if other_output is not o and not special_file(other_output.path) and _inside(o.path, other_output.path):
                sink.error("PL121", f"{o.label} would be written inside {other_output.label}, which is a file",
                           Location(file=o.path), hint=o.hint, related=(Location(file=other_output.path),))
        for earlier, other in files[:n]:
            if _same(ident, other):
                hints = [h for h in dict.fromkeys((o.hint, earlier.hint)) if h]
                hints = [h for h in hints if not any(h != g and h in g for g in hints)]  # one saying it all
                sink.error("PL121", f"{o.label} and {earlier.label} are one file", Location(file=o.path),
                           hint="; or ".join(hints) or None, related=(Location(file=earlier.path),))
    return len(sink.errors) == before


def _inside(path: str, folder: str) -> bool:
    """Whether `path` lies under `folder` (as written, made absolute): `k.cubin/m.html` under `k.cubin`."""
    try:
        a, b = os.path.abspath(path), os.path.abspath(folder)
    except (OSError, ValueError):
        return False
    return a != b and a.startswith(b.rstrip(os.sep) + os.sep)


def _loops(path: str) -> bool:
    import errno
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _file_in_the_way(path: str) -> str | None:
    """The nearest existing folder above `path` that is no folder (a file where the output's folder would be
    made), or None."""
    parent = os.path.dirname(os.path.abspath(path))
    while parent and not os.path.exists(parent):
        up = os.path.dirname(parent)
        if up == parent:
            return None
        parent = up
    return parent if parent and os.path.exists(parent) and not os.path.isdir(parent) else None


def _staging_prefix(path: str) -> str:
    """The temporary file's name beside `path`: `.<name>.` cut so that the whole (mkstemp adds 8 characters and
    `.tmp`) fits where `path` itself fits, a name of up to 255 bytes (NAME_MAX)."""
    name = os.fsencode(os.path.basename(path))  # the bytes on disk, whatever the locale (a name need not be UTF-8)
    room = 255 - len(".") - len(".") - 8 - len(".tmp")
    return f".{os.fsdecode(name[:room])}."  # a cut inside a character decodes (surrogateescape) to the same bytes


def _umask() -> int:
    # Linux reports it; setting it to read it back would change it for a moment for every thread.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def special_file(path: str) -> bool:
    """An existing path that is not a regular file (a device, a FIFO, a socket): written to, not replaced."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


@contextlib.contextmanager
def _folders_locked(folders: list[str]):
    """An exclusive flock on each folder (in sorted order: two writers never wait on each other crosswise) while a
    set of outputs is renamed into place, so two commands writing the same set (a cubin and its manifest) leave
    one command's whole set, never one's cubin beside the other's manifest. Where a folder cannot be locked (no
    flock, no read permission) the renames go ahead unlocked, as before."""
    held = []
    try:
        try:
            import fcntl
        except ImportError:  # no flock on this system
            fcntl = None
        for folder in folders if fcntl else []:
            try:
                fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            except OSError:
                continue
            held.append(fd)
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in held:
            os.close(fd)  # closing the descriptor releases its lock


def write_outputs(files: dict[str, bytes], sink: DiagnosticSink) -> bool:
    """Write every file or none: each is staged in a temporary file beside its target (so the rename
    stays on one filesystem) and renamed once all are staged. A symbolic link's target is what is
    replaced (realpath), and special files (/dev/null, a FIFO) and STDOUT are written to in place, after
    the staging and before the renames."""
    mode = 0o666 & ~_umask()
    staged: list[tuple[str, str]] = []
    created: list[str] = []  # folders made for the outputs: removed again unless every file is written
    target = ""
    try:
        for target, data in files.items():
            if target == STDOUT or special_file(target):
                continue
            real = os.path.realpath(target)
            folder = os.path.dirname(real) or "."
            try:
                if not os.path.islink(target):  # a link's target folder is the link's business, not made here
                    _make_folders(folder, created)
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=_staging_prefix(real), suffix=".tmp")
            except OSError as exc:
                sink.error("PL007", f"cannot write {target}: no file can be created in {folder} "
                                    f"({exc.strerror or exc})", Location(file=target),
                           hint="an output is written to a new file beside it and renamed into place (a reader "
                                "never sees half of it): name a file in a folder you can write to")
                return False
            staged.append((tmp, real))
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), mode)
                f.write(data)
        # Special files and stdout before any rename: a write that fails there (a full device, a closed stdout)
        # leaves none of the set renamed into place.
        for target, data in files.items():
            if target != STDOUT and special_file(target):
                with open(target, "wb") as f:
                    f.write(data)
        if STDOUT in files:
            target = "stdout"
            if sys.stdout is None:
                raise OSError(errno.EBADF, "stdout is closed")
            sys.stdout.flush()  # what was printed before comes first
            sys.stdout.buffer.write(files[STDOUT])
            sys.stdout.buffer.flush()
        with _folders_locked(sorted({os.path.dirname(real) or "." for _, real in staged}) if len(staged) > 1 else []):
            for tmp, real in staged:
                target = real
                os.replace(tmp, real)
        created = []  # written: the folders stay
    except BrokenPipeError:  # the reader left (`| head`): the command ends quietly, nothing renamed
        raise
    except OSError as exc:
        if target == "stdout":
            sink.error("PL007", f"cannot write stdout: {exc.strerror or exc}",
                       hint="stdout could not take the output (a full device, a closed descriptor): redirect it")
        else:
            sink.error("PL007", f"cannot write {target}: {exc.strerror or exc}", Location(file=target))
        return False
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):  # renamed into place
                os.unlink(tmp)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
    return True


def _make_folders(folder: str, made: list[str]) -> None:
    """Create `folder` and the folders above it that are missing (as `mkdir -p`), adding each to `made` as it is
    created, outermost first (so a mkdir that fails halfway, past the longest path the system takes, leaves the
    ones before it to be removed). An output's folders are made only for a command that writes it."""
    missing = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for path in reversed(missing):
        os.mkdir(path, 0o777)
        made.append(path)
