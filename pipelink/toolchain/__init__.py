"""The CUDA toolchain pipelink drives: the pinned nvcc wheel, NVRTC and nvJitLink.

Nothing here needs a GPU. The toolchain comes from the pinned 13.0.88 wheels, never from a
system CUDA install, so every machine links with the same versions.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..core.nvshmem_home import PINNED as NVSHMEM_PINNED
from ..core.nvshmem_home import nvshmem_home, nvshmem_version

PINNED_CUDA = "13.0"
PINNED_NVSHMEM = NVSHMEM_PINNED  # distributed links: its device library and headers (pyproject.toml pins the wheel)


class ToolchainError(Exception):
    """A toolchain call failed; `log` holds what the tool said."""

    crashed = False  # the tool died reading its inputs (a corrupt object), rather than refusing them

    def __init__(self, message: str, log: str = ""):
        super().__init__(message + (f"\n{log}" if log else ""))
        self.message = message
        self.log = log


@functools.cache
def cuda_root() -> Path:
    """The CUDA toolkit pipelink compiles with: the `nvidia/cu13` folder of the pinned wheels.

    Where the wheels cannot be installed (a machine without a package index), PIPELINK_CUDA_HOME
    may name a CUDA toolkit instead; it must be the pinned release, or LTO-IR versions drift.
    """
    override = os.environ.get("PIPELINK_CUDA_HOME")
    if override:
        root = Path(override)
        if not (root / "bin" / "nvcc").exists():
            raise ToolchainError(f"PIPELINK_CUDA_HOME={override} has no bin/nvcc")
        _require_pinned_release(root)
        return root
    try:
        import nvidia  # namespace package of the NVIDIA wheels
    except ImportError as exc:  # pragma: no cover - install problem
        raise ToolchainError("the nvidia CUDA wheels are not installed") from exc
    for base in getattr(nvidia, "__path__", []):
        root = Path(base) / "cu13"
        if (root / "bin" / "nvcc").exists():
            return root
    raise ToolchainError("nvcc from the nvidia-cuda-nvcc==13.0.88 wheel was not found")


def _require_pinned_release(root: Path) -> None:
    version = nvcc_version(root)
    if not version.startswith(f"{PINNED_CUDA}."):
        raise ToolchainError(f"{root} is not CUDA {PINNED_CUDA}: its nvcc is {version}")


def nvcc_version(root: Path | None = None) -> str:
    """The version nvcc reports (`13.0.88`), of the toolkit at `root` (default: the one pipelink uses)."""
    import re
    import subprocess
    nvcc = (root or cuda_root()) / "bin" / "nvcc"
    try:  # a broken toolkit must not hang the command nor crash it on bytes that are not text
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, errors="replace",
                             timeout=60).stdout
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{nvcc} --version did not answer within 60 s") from None
    except OSError as exc:
        raise ToolchainError(f"cannot run {nvcc}: {exc.strerror or exc}") from None
    found = re.search(r"release [0-9.]+, V([0-9.]+)", out)
    if found is None:
        raise ToolchainError(f"{nvcc} --version names no release", out.strip())
    return found.group(1)


def nvcc_path() -> Path:
    return cuda_root() / "bin" / "nvcc"


def cuda_include_dirs() -> list[Path]:
    """Headers for components: the CUDA runtime headers and CCCL (CUB, libcu++, Thrust)."""
    inc = cuda_root() / "include"
    dirs = [inc]
    if (inc / "cccl").is_dir():
        dirs.append(inc / "cccl")
    return dirs


def nvshmem_root() -> Path:
    """NVSHMEM's folder in the pinned nvidia-nvshmem-cu13 wheel: include/ and lib/libnvshmem_device.a, what a
    distributed link's glue compiles and links against."""
    root = nvshmem_home()
    if root is None or not (root / "lib" / "libnvshmem_device.a").exists():
        raise ToolchainError(f"NVSHMEM (the nvidia-nvshmem-cu13=={PINNED_NVSHMEM} wheel) was not found")
    found = nvshmem_version(root)
    if found != PINNED_NVSHMEM:  # another package's NVSHMEM: its headers differ (and may not compile in the glue)
        raise ToolchainError(f"the NVSHMEM found at {root} is release {found or 'unknown'}, not the pinned "
                             f"{PINNED_NVSHMEM} that distributed links are built against")
    return root


def nvcc_env(scratch: Path | None = None) -> dict:
    """Environment for running the wheel's nvcc: its own bin first, and its libraries. `scratch`: a directory
    the caller removes, for nvcc's intermediate files (TMPDIR), so a compile killed midway (Ctrl-C) leaves none."""
    env = dict(os.environ)
    if scratch is not None:
        env["TMPDIR"] = os.fspath(scratch)
    root = cuda_root()
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = f"{root / 'lib'}{os.pathsep}{env.get('LD_LIBRARY_PATH', '')}"
    return env


class OutOfMemory(Exception):
    """run_bounded stopped a tool whose processes together held more memory than its limit."""


def memory_limit() -> int:
    """What a tool's processes may hold together: half the machine's memory, at least 8 GiB (a CUTLASS compile's
    cicc takes a few)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 0
    return max(8 << 30, total // 2)


def _group_rss(pgid: int) -> int:
    """Resident bytes of the processes of one process group (Linux /proc; 0 where it cannot be read)."""
    total, page = 0, os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 21 and int(fields[2]) == pgid:  # after "(comm)": state ppid pgrp ... rss is the 22nd
            total += int(fields[21]) * page
    return total


def run_bounded(cmd: list[str], env: dict, timeout_s: float | None, memory_bytes: int | None = None,
                cwd: str | None = None):
    """Run a tool (nvcc) to its end, or until `timeout_s` seconds pass or its processes together hold more than
    `memory_bytes` (default memory_limit()), whichever is first: a source that #includes a file that never ends
    (/dev/zero, a FIFO) keeps the preprocessor reading for ever, and from /dev/zero its memory grows until the
    machine runs out. On a limit the tool's whole process group (nvcc's cicc, ptxas, the host compiler) is killed
    and subprocess.TimeoutExpired or OutOfMemory raised."""
    import signal
    import subprocess
    import time
    limit = memory_limit() if memory_bytes is None else memory_bytes
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                            env=env, cwd=cwd, start_new_session=True)  # its own group: the kill reaches its children
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() > deadline:
                    raise
                if _group_rss(proc.pid) > limit:
                    raise OutOfMemory(f"{cmd[0]} held more than {limit >> 20} MiB") from None
    except BaseException:  # a limit, or Ctrl-C: no compiler left running behind us
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def objcopy_path() -> str | None:
    return shutil.which("objcopy")


def nvdisasm_path() -> Path:
    """nvdisasm from the pinned `nvidia-cuda-nvdisasm` wheel (it lands beside nvcc), or from the
    PIPELINK_CUDA_HOME toolkit. It only reads cubins, so it need not be the nvcc release."""
    candidates = [cuda_root() / "bin" / "nvdisasm"]
    try:
        import nvidia
        candidates += [Path(base) / "cu13" / "bin" / "nvdisasm" for base in getattr(nvidia, "__path__", [])]
    except ImportError:  # pragma: no cover - install problem
        pass
    for path in candidates:
        if path.exists():
            return path
    raise ToolchainError("nvdisasm was not found: install the nvidia-cuda-nvdisasm wheel pipelink pins")


def disassemble(cubin: bytes) -> str:
    """The SASS of every code section of a cubin, as nvdisasm prints it."""
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            proc = subprocess.run([str(nvdisasm_path()), "--print-code", f.name], capture_output=True, text=True, errors="replace")
        except OSError as exc:
            raise ToolchainError(f"cannot run nvdisasm: {exc}") from None
    if proc.returncode != 0:
        raise ToolchainError("nvdisasm could not read the probe cubin", proc.stderr.strip())
    return proc.stdout


# --- NVRTC ---------------------------------------------------------------------------------

def nvrtc_to_ltoir(source: str, name: str, options: list[str]) -> bytes:
    """Compile CUDA C++ source to LTO-IR with NVRTC, in a child process where the system can fork
    (`_isolated`): NVRTC installs its own SIGINT/SIGTERM handlers around a compile, which end the process with
    status 4; in the child an interrupt leaves the command's own handling (exit 130) intact."""
    if not hasattr(os, "fork"):
        return _nvrtc_to_ltoir(source, name, options)
    return _isolated(_nvrtc_to_ltoir, source, name, options, tool="NVRTC")


def _nvrtc_to_ltoir(source: str, name: str, options: list[str]) -> bytes:
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check_nvrtc(err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise ToolchainError(f"NVRTC could not compile {name}", _nvrtc_log(prog))
        err, size = nvrtc.nvrtcGetLTOIRSize(prog)
        _check_nvrtc(err, "nvrtcGetLTOIRSize")
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetLTOIR(prog, buf)
        _check_nvrtc(err, "nvrtcGetLTOIR")
        return bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvrtc_log(prog) -> str:
    from cuda.bindings import nvrtc

    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    buf = b" " * size
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return buf.rstrip(b"\x00 ").decode(errors="replace")


def _check_nvrtc(err, what: str) -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ToolchainError(f"{what} failed: {err}")


def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    _check_nvrtc(err, "nvrtcVersion")
    return (major, minor)


# --- nvJitLink -----------------------------------------------------------------------------

@dataclass
class LinkInput:
    """One input of an nvJitLink call. kind: 'object' | 'ltoir' | 'fatbin' | 'library' | 'cubin' | 'ptx'."""

    kind: str
    data: bytes
    name: str


@dataclass
class LinkOutput:
    cubin: bytes | None
    ptx: str | None
    info_log: str
    error_log: str = ""
    options: list[str] = field(default_factory=list)


def nvjitlink_version() -> tuple[int, int]:
    from cuda.bindings import nvjitlink

    return tuple(nvjitlink.version())


def nvjitlink_link(inputs: list[LinkInput], options: list[str], want_ptx: bool = False) -> LinkOutput:
    """Run nvJitLink over `inputs`. Raises ToolchainError with the error log on failure.

    The inputs are the users' objects, and nvJitLink (NVVM inside it) reads corrupt device code by crashing the
    process or printing to its stderr. So where the system can fork, the call runs in a child process: a crash is a
    ToolchainError with `crashed` set, and what the library printed is part of the log instead of the user's
    terminal."""
    if not hasattr(os, "fork"):
        return _nvjitlink_link(inputs, options, want_ptx)
    return _isolated(_nvjitlink_link, inputs, options, want_ptx)


_FORKING = threading.Lock()


def _fork() -> int | None:
    """os.fork(), one thread of the process at a time; None where the system or the process refuses it.

    Threads building components in parallel call the toolchain at once, and forks from two threads at once are
    what a library's fork hooks may refuse: filelock (imported by huggingface_hub, torch's caches) raises
    RuntimeError from its audit hook on an os.fork while another thread is inside one. So forks are serialized
    here, and a refusal that still comes (another library's fork at that moment) is tried again a few times
    before the call runs in this process."""
    import time
    for attempt in range(8):
        try:
            with _FORKING:
                return os.fork()
        except OSError:  # no process to spare (memory, limits)
            return None
        except Exception:  # noqa: BLE001 - an audit hook's refusal (filelock's RuntimeError): usually brief
            time.sleep(0.005 * (attempt + 1))
    return None


def _isolated(fn, *args, tool: str = "nvJitLink"):
    """fn(*args) in a forked child: its result, or its ToolchainError, comes back through a pipe (pickled), what
    it wrote on fds 1 and 2 through a temporary file. A child that dies (a signal, an abort) raises ToolchainError
    with `crashed` True and that output as the log."""
    import pickle
    import signal
    import tempfile

    for stream in (sys.stdout, sys.stderr):  # either may be None in a process started without it
        if stream is not None:
            stream.flush()
    with tempfile.TemporaryFile() as printed:
        r, w = os.pipe()
        pid = _fork()
        if pid is None:  # no process to spare, or forking refused: run it here, unprotected, rather than fail
            os.close(r)
            os.close(w)
            return fn(*args)
        if pid == 0:  # the child: never returns into the caller's code
            status = 0
            try:
                import faulthandler
                faulthandler.disable()  # a crash is reported by the parent, not as a Python traceback
                os.close(r)
                os.dup2(printed.fileno(), 1)
                os.dup2(printed.fileno(), 2)
                try:
                    result = ("ok", fn(*args))
                except ToolchainError as exc:
                    result = ("error", exc.message, exc.log)
                except Exception as exc:  # noqa: BLE001 - the bindings' own errors, as the parent would see them
                    result = ("error", f"{tool} failed: {exc}", "")
                data = pickle.dumps(result)
                view = memoryview(data)
                while view:
                    view = view[os.write(w, view):]
            except BaseException:  # noqa: BLE001 - anything else: the parent sees no result
                status = 70
            finally:
                os._exit(status)
        os.close(w)
        chunks = []
        try:
            with os.fdopen(r, "rb") as pipe:
                while chunk := pipe.read(1 << 20):
                    chunks.append(chunk)
        except BaseException:  # interrupted (Ctrl-C): the child goes too, and is reaped
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise
        _, wait_status = os.waitpid(pid, 0)
        printed.seek(0)
        said = printed.read().decode(errors="replace").strip()
    data = b"".join(chunks)
    if os.WIFEXITED(wait_status) and os.WEXITSTATUS(wait_status) == 0 and data:
        result = pickle.loads(data)
        if result[0] == "ok":
            return result[1]
        raise ToolchainError(result[1], "\n".join(x for x in (said, result[2]) if x))
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        try:
            how = f"crashed ({signal.Signals(sig).name})"
        except ValueError:
            how = f"crashed (signal {sig})"
    else:
        how = f"stopped with exit status {os.WEXITSTATUS(wait_status)}"
    err = ToolchainError(f"{tool} {how} reading its inputs", said)
    err.crashed = True
    raise err


def _nvjitlink_link(inputs: list[LinkInput], options: list[str], want_ptx: bool = False) -> LinkOutput:
    from cuda.bindings import nvjitlink

    kinds = {
        "cubin": nvjitlink.InputType.CUBIN,
        "ptx": nvjitlink.InputType.PTX,
        "ltoir": nvjitlink.InputType.LTOIR,
        "fatbin": nvjitlink.InputType.FATBIN,
        "object": nvjitlink.InputType.OBJECT,
        "library": nvjitlink.InputType.LIBRARY,
    }
    handle = nvjitlink.create(len(options), options)
    try:
        try:
            for inp in inputs:
                # the name is only for nvJitLink's messages: one that is no UTF-8 (a path's raw bytes) is escaped
                name = inp.name.encode("utf-8", "backslashreplace").decode("utf-8")
                nvjitlink.add_data(handle, kinds[inp.kind], inp.data, len(inp.data), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            raise ToolchainError(f"nvJitLink failed: {exc}", _jitlink_log(handle, error=True)) from None
        info = _jitlink_log(handle, error=False)
        if want_ptx:
            size = nvjitlink.get_linked_ptx_size(handle)
            buf = bytearray(size)
            nvjitlink.get_linked_ptx(handle, buf)
            return LinkOutput(None, bytes(buf).rstrip(b"\x00").decode(), info, options=list(options))
        size = nvjitlink.get_linked_cubin_size(handle)
        buf = bytearray(size)
        nvjitlink.get_linked_cubin(handle, buf)
        return LinkOutput(bytes(buf), None, info, options=list(options))
    finally:
        nvjitlink.destroy(handle)


def _jitlink_log(handle, error: bool) -> str:
    from cuda.bindings import nvjitlink

    try:
        if error:
            size = nvjitlink.get_error_log_size(handle)
            buf = bytearray(size)
            nvjitlink.get_error_log(handle, buf)
        else:
            size = nvjitlink.get_info_log_size(handle)
            buf = bytearray(size)
            nvjitlink.get_info_log(handle, buf)
    except Exception:  # the log is best effort; the failure itself is already reported
        return ""
    return bytes(buf).rstrip(b"\x00").decode(errors="replace").strip()


def nvshmem_unresolved(log: str) -> bool:
    """Does nvJitLink's log say device code calls NVSHMEM functions no input defines (a distributed component's,
    linked without NVSHMEM's device library)?"""
    return re.search(r"Unresolved extern function '[^']*nvshmem", log) is not None


def nvshmem_device_library() -> LinkInput:
    """NVSHMEM's device library as a link input (ToolchainError where NVSHMEM is not installed)."""
    lib = nvshmem_root() / "lib" / "libnvshmem_device.a"
    try:
        return LinkInput("library", lib.read_bytes(), lib.name)
    except OSError as exc:
        raise ToolchainError(f"cannot read {lib}: {exc.strerror or exc}") from None


def link_probe(inputs: list[LinkInput], options: list[str]) -> LinkOutput:
    """nvjitlink_link for a probe of one component: one that calls NVSHMEM's device API is linked with NVSHMEM's
    device library too, where it is installed, as the distributed link that runs it is."""
    try:
        return nvjitlink_link(inputs, options)
    except ToolchainError as exc:
        if not nvshmem_unresolved(exc.log or ""):
            raise
        try:
            library = nvshmem_device_library()
        except ToolchainError:
            raise exc from None
    return nvjitlink_link([*inputs, library], options)


def _probe_link(inp: LinkInput, symbols: list[tuple[str, str]], arch: str, nvshmem: bool = False,
                defined: tuple[str, ...] = ()) -> tuple[LinkOutput | None, str]:
    """Link a one-line kernel that takes the address of each (symbol, kind) against `inp`, where
    kind is "function" or "variable". LTO-IR is opaque, so nvJitLink itself says what it defines;
    this also proves that the pinned nvJitLink can read the input at all. Returns (output, log).
    `nvshmem`: with NVSHMEM's device library; `defined`: link-time constants (4-byte, as the generated header
    declares them) the probe defines as 0."""
    decls = "".join(f'extern "C" __device__ void {name}();\n' if kind == "function"
                    else f'extern "C" __device__ const unsigned {name};\n' for name, kind in symbols)
    decls += "".join(f'extern "C" __device__ const unsigned {name} = 0u;\n' for name in defined)
    refs = " ".join(f"out[{i}] = (const void*)&{name};" for i, (name, _) in enumerate(symbols))
    src = f'{decls}extern "C" __global__ void __pipelink_probe(const void** out) {{ {refs} }}\n'
    probe = nvrtc_to_ltoir(src, "pipelink_probe.cu", [f"-arch={arch}", "-dlto", "-rdc=true"])
    inputs = [LinkInput("ltoir", probe, "pipelink_probe"), inp] + ([nvshmem_device_library()] if nvshmem else [])
    try:
        return nvjitlink_link(inputs, [f"-arch={arch}", "-lto"]), ""
    except ToolchainError as exc:
        log = f"{exc.message}\n{exc.log}".strip() if exc.crashed else exc.log
    # A component calling NVSHMEM's device API (a distributed link's) leaves NVSHMEM's functions for the link to
    # resolve from its device library. With a library among its inputs nvJitLink no longer zero-fills undefined
    # variables, so the probe then also defines the component's link-time constants (the glue's, `pl_...`) it names.
    if nvshmem or not nvshmem_unresolved(log):
        return None, log
    try:
        out, again = _probe_link(inp, symbols, arch, nvshmem=True)
    except ToolchainError:  # NVSHMEM is not installed: the first log says what is missing
        return None, log
    if out is not None:
        return out, ""
    names = tuple(dict.fromkeys(re.findall(r"Undefined reference to '(pl_[A-Za-z0-9_]+)'", again)))
    names = tuple(n for n in names if n not in {s for s, _ in symbols})  # what is probed is never made up
    return _probe_link(inp, symbols, arch, nvshmem=True, defined=names) if names else (None, again)


# nvJitLink's words for device code it cannot read: its decompressor's, NVVM failing to parse the LTO-IR (any
# compilation error of a probe link that adds nothing but a reference to a symbol), LLVM's fatal errors, and the
# crash _isolated() reports. An LTO-IR of another version is NVVM_ERROR_IR_VERSION_MISMATCH: not among them.
_UNREADABLE = ("Uncompress failed", "NVVM_ERROR_COMPILATION", "LLVM ERROR", "nvJitLink crashed", "nvJitLink stopped with")


def unreadable_device_code(log: str) -> bool:
    """Does nvJitLink's log (or its crash) say the input's device code is corrupt, rather than of another version
    or lacking a symbol?"""
    return any(s in log for s in _UNREADABLE)


def probe_device_symbol(inp: LinkInput, symbol: str, arch: str, kind: str = "function") -> tuple[bool, str]:
    """Does `inp` define the `extern "C" __device__` function (or const variable) `symbol` for `arch`?
    Returns (defined, log)."""
    out, log = _probe_link(inp, [(symbol, "function" if kind == "function" else "variable")], arch)
    if out is None:
        return False, log
    # nvJitLink does not fail on an undefined extern variable: it turns it into a zero-filled
    # definition in .nv.global (NOBITS). A defined constant has bytes; look in the cubin.
    if kind != "function" and symbol not in defined_symbols(out.cubin):
        return False, f"undefined reference to '{symbol}' (nvJitLink would have zero-filled it)"
    return True, ""


def probe_entry_and_marker(inp: LinkInput, functions, variable: str, arch: str) -> bool:
    """The entry functions (one name or several: a load or prefetch entry beside the entry) and the marker at once,
    in one probe link (the common case: a good object). False means at least one is missing or the input is
    unreadable: probe them one by one to say which."""
    functions = [functions] if isinstance(functions, str) else list(functions)
    out, _ = _probe_link(inp, [*((f, "function") for f in functions), (variable, "variable")], arch)
    return out is not None and variable in defined_symbols(out.cubin)


def defined_symbols(cubin: bytes) -> set[str]:
    """Names the cubin defines with contents: functions, and variables in sections that hold bytes.

    A variable in a NOBITS section (.nv.global) is either a zero-initialized __device__ variable
    or an extern nobody defined; nvJitLink treats both alike.
    """
    import io

    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    elf = ELFFile(io.BytesIO(cubin))
    sections = list(elf.iter_sections())
    out = set()
    for sec in sections:
        if not isinstance(sec, SymbolTableSection):
            continue
        for sym in sec.iter_symbols():
            idx = sym["st_shndx"]
            if not sym.name or not isinstance(idx, int) or sym["st_info"]["type"] == "STT_SECTION":
                continue
            if sections[idx]["sh_type"] != "SHT_NOBITS":
                out.add(sym.name)
    return out
