"""The `pipelink` command: a thin shell over the library. Exit codes: 0 ok, 1 a contract or link
problem, 2 bad usage or unreadable input, 3 a bug in pipelink itself, 141 when the reader of stdout
went away (`pipelink inspect ... | head`), quietly, as a tool ended by SIGPIPE would."""
from __future__ import annotations

import argparse
import contextlib
import contextvars
import errno
import io
import os
import re
import shlex
import sys
import traceback
from dataclasses import replace
from pathlib import Path

from .core.files import read_input_bytes, reading
from .core.diagnostics import (Diagnostic, DiagnosticSink, ExitCode, Location, escape_controls, json_text, render_all,
                               safe_text, sarif_log)
from .core.pipeline import DISPATCHES, SCHEDULES
from .core.targets import TARGETS
from .formats.outputs import STDOUT, Input, Output, check_outputs, object_inputs, special_file, write_outputs

INTERNAL_ERROR = 3
STDOUT_CLOSED = 128 + 13  # SIGPIPE


class UsageError(Exception):
    pass


class _ParserExit(Exception):
    """--help printed its text: end the command with this status (argparse would exit the interpreter)."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class _StoreOnce(argparse.Action):
    """An option that takes one value: given twice with different values is a usage error (argparse keeps the
    last, so `-o a.cubin ... -o b.cubin` from two layers of a build script wrote only b, silently); the same value
    twice is harmless."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in given and given[self.dest][1] != values:
            first, value = given[self.dest]
            raise argparse.ArgumentError(self, f"given twice, as {first} {value} and {option_string} {values}: "
                                               "give it once")
        given[self.dest] = (option_string, values)
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit 2 itself; keep our format
        raise UsageError(f"{self.prog}: {message}")

    def add_argument(self, *args, **kwargs):
        if args and args[0].startswith("-") and kwargs.get("action", "store") == "store" and kwargs.get("nargs") is None:
            kwargs["action"] = _StoreOnce
        return super().add_argument(*args, **kwargs)

    def exit(self, status=0, message=None):
        if message:
            print(message, end="", file=sys.stderr)
        raise _ParserExit(status)


FORMATS = ("text", "json", "sarif")


def _path(text: str) -> str:
    """A file argument: an empty one is a mistake (a shell variable left unset), never "the default" or the
    current folder."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


def _decimal(text: str) -> int:
    """An integer option: decimal ASCII digits only, as the pipeline's JSON writes it (int() alone took ' 10' and
    other scripts' digits, '١٠')."""
    if not _INTEGER.fullmatch(text) or len(text) > 40:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a decimal integer")
    return int(text)


def _seconds(text: str) -> int:
    """A time limit in whole seconds, at least 1."""
    value = _decimal(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: give at least 1 second")
    return value


def _arch(text: str) -> str:
    """A target named on the command line: one pipelink knows, or a usage error (exit 2) before any input is read;
    a contract naming an unknown target stays a contract problem (PL034, exit 1)."""
    if text not in TARGETS:
        raise argparse.ArgumentTypeError(f"unknown target {text!r} (known: {', '.join(TARGETS)})")
    return text


def _report_options(p: argparse.ArgumentParser) -> None:
    """The options of every command that reports diagnostics about its inputs."""
    p.add_argument("--format", choices=FORMATS, default="text",
                   help="text (default); json: one report on stdout; sarif: a SARIF 2.1.0 log on stdout, for "
                        "code-scanning tools")
    p.add_argument("--werror", action="store_true", help="treat warnings as errors (exit 1)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pipelink", description="A contract-guided linker for fused GPU kernels.")
    p.add_argument("--version", action="store_true",
                   help="print pipelink's version and the toolchain it uses (nvcc, NVRTC, nvJitLink)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                           help="what to do (`pipelink COMMAND --help` says more)")

    ins = sub.add_parser("inspect", help="show what objects and contracts hold")
    ins.add_argument("files", nargs="+", metavar="FILE", type=_path, help="objects, archives, fatbins, LTO-IR, linked cubins "
                     "or contracts")
    ins.add_argument("--manifest", type=_path, metavar="K.json", help="the linked cubin's manifest, where it is not "
                     "beside it as K.json (link --manifest put it elsewhere)")
    _report_options(ins)

    chk = sub.add_parser("check", help="validate contracts and objects, each alone or as one kernel's set",
                         description="Validate each component: its contract, and its object against the contract. "
                                     "Each component is checked on its own unless --set or --pipeline asks for "
                                     f"them as one kernel's components. Targets: {', '.join(TARGETS)}.")
    chk.add_argument("files", nargs="+", metavar="FILE", type=_path, help="contracts (.json) or objects")
    chk.add_argument("--set", action="store_true", help="check the components together as one kernel's: compile "
                     "flags, a common target, geometry, barrier ids, resource lower bounds (PL04x, PL05x)")
    chk.add_argument("--arch", type=_arch, help="the link target (default: the first target each component, or with --set "
                     "every component, supports)")
    chk.add_argument("--pipeline", metavar="P", type=_path, help="check the set (implies --set) as this pipeline links it, "
                     "without compiling: wires, geometry, events (PL06x-PL08x) and the joint allocation (PL04x)")
    chk.add_argument("--map", metavar="FILE", type=_path, help="with --pipeline: write the link map of what the link would "
                     "decide (everything but the linked kernel's own resources); - for stdout")
    chk.add_argument("--schedule", choices=SCHEDULES, help="check the set (implies --set) as `link --schedule` links it")
    chk.add_argument("--dispatch", choices=DISPATCHES, help="check the set (implies --set) as `link --dispatch` links it")
    _report_options(chk)

    hdr = sub.add_parser("header", help="write the header a component compiles against")
    hdr.add_argument("contract", type=_path, help="the component's contract (.json)")
    hdr.add_argument("-o", "--output", default=STDOUT, type=_path, help="file to write (default: - for stdout)")

    bld = sub.add_parser("build", help="compile a component against its contract and embed the contract")
    bld.add_argument("source", type=_path, help="the component's CUDA source")
    bld.add_argument("--contract", required=True, type=_path, help="the component's contract (.json)")
    bld.add_argument("-o", "--output", required=True, type=_path, help="the object to write (- for stdout)")
    bld.add_argument("--arch", type=_arch, action="append", help="build only for this target (repeatable)")
    bld.add_argument("-I", dest="include", action="append", default=[], help="include directory")
    bld.add_argument("-D", dest="define", action="append", default=[], help="preprocessor definition")
    bld.add_argument("-v", "--verbose", action="store_true", help="print the nvcc command lines")
    bld.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                     help="stop a compile that runs longer than this (default: 1200 s)")
    bld.add_argument("--werror", action="store_true", help="treat warnings as errors (exit 1, nothing written)")

    lnk = sub.add_parser("link", help="link component objects into one fused kernel",
                         description="Check, allocate, generate the glue, link with nvJitLink LTO, verify, emit. "
                                     "Nothing is written unless the whole link succeeds. An identical earlier "
                                     "link is reused from the link cache: PIPELINK_CACHE_DIR (default "
                                     "~/.cache/pipelink); PIPELINK_CACHE=0 turns it off.")
    lnk.add_argument("files", nargs="+", metavar="FILE", type=_path, help="component objects (with contracts)")
    lnk.add_argument("-o", "--output", type=_path, help="the cubin (default: <kernel>.cubin; - for stdout)")
    lnk.add_argument("--pipeline", type=_path, help="a pipeline file: components' order, wires, schedule, kernel name")
    lnk.add_argument("--wire", action="append", default=[], metavar="P.OUT=C.IN", help="wire two ports (repeatable)")
    lnk.add_argument("--schedule", choices=SCHEDULES, help="how the components share the block (default: the "
                     "pipeline's, else inferred from the contracts)")
    lnk.add_argument("--dispatch", choices=DISPATCHES, help="persistent schedule: how CTAs get tasks")
    lnk.add_argument("--specialize", action="append", default=[], metavar="NAME=VALUE",
                     help="bake an integer parameter's value into this link (one kernel per shape)")
    lnk.add_argument("--geometry", action="append", default=[], metavar="NAME=VALUE",
                     help="the value of a geometry name the components consume and none provides (what the "
                          "other components of their layer provide: a standalone link of one of them)")
    lnk.add_argument("--debug-events", action="store_true",
                     help="a wait that spins too long stops the kernel; the launcher raises EventTimeout")
    lnk.add_argument("--dependent-launch", action="store_true",
                     help="programmatic dependent launch (sm_90+): the kernel may start while the one before it "
                          "in the stream finishes, and waits for it before reading its inputs")
    lnk.add_argument("--standalone", action="store_true",
                     help="drop the components' events: the kernel runs after the kernels its waits are on (a "
                          "component of an event-wired pipeline as a kernel of its own)")
    lnk.add_argument("--profile-tasks", type=_decimal, metavar="N",
                     help="persistent schedule: record every task (component, SM, when it starts, when its waits "
                          "are met, when it is done) in a ring of N records; Kernel.task_profile() reads them")
    lnk.add_argument("--name", help="the kernel's name (default: the pipeline's, or pipelink_fused)")
    lnk.add_argument("--arch", type=_arch, help="the link target (default: the first target every component supports "
                     "that has what the components and the pipeline ask for, e.g. sm_90 for mbarrier rings)")
    lnk.add_argument("--map", metavar="FILE", type=_path, help="write the link map (- for stdout)")
    lnk.add_argument("--loops", action="store_true",
                     help="also link each component alone and compare its streaming loops with the same loops in "
                          "the kernel (a link map section; PL183 where one grew: the kernel's one register "
                          "allocation left it fewer registers); such a link bypasses the link cache")
    lnk.add_argument("--manifest", metavar="FILE", type=_path, help="where to write the manifest (default: the cubin's path "
                     "with .json, or <kernel>.json when the cubin goes to stdout)")
    lnk.add_argument("--emit-glue", metavar="FILE", type=_path, help="also write the generated glue source")
    lnk.add_argument("--emit-monolithic", metavar="FILE", type=_path, help="also write the one-unit control source")
    lnk.add_argument("-v", "--verbose", action="store_true", help="say what each pass decided")
    lnk.add_argument("--time", action="store_true", help="show each pass's time")
    lnk.add_argument("--no-cache", action="store_true", help="link afresh: neither read nor write the link cache")
    _report_options(lnk)

    cfg = sub.add_parser("config", help="print what a component build with one's own nvcc needs",
                         description="Print the flags `pipelink build` compiles every component with, for builds "
                                     "with one's own nvcc (as pkg-config does). The contract's own flags and header "
                                     "come from `pipelink header` and the contract.")
    what = cfg.add_mutually_exclusive_group(required=True)
    what.add_argument("--cflags", action="store_true", help="include folders (pipelink's, the pinned toolchain's "
                      "CUDA headers, CUTLASS/CuTe where installed) and flags, on one line")
    what.add_argument("--include-dir", action="store_true", help="pipelink's include folder")

    demo = sub.add_parser("demo", help="build the shipped components, link the default pipeline, run it on a GPU")
    demo.add_argument("--build-dir", default="build/components", type=_path, help="where the shipped components are built "
                      "(default: build/components)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if sys.stdout is None:  # started with stdout closed (`>&-`): its report is dropped, a file for it is PL007
        sys.stdout = _ClosedStdout()
    if sys.stderr is None:  # started with stderr closed (`2>&-`): its diagnostics are dropped, the exit code stays
        sys.stderr = _ClosedStdout()
    for stream in (sys.stdout, sys.stderr):  # a name the terminal cannot encode must not end the command
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # each command's own main input: an earlier command of this process must not locate this one's results
    _SARIF_ARTIFACT.set(None)
    try:
        with reading():  # a stream given as an input is read once for the whole command
            code = _run(argv)
        sys.stdout.flush()  # a closed stdout shows here at the latest
        return code
    except UsageError as exc:
        sink = DiagnosticSink()
        sink.items.append(Diagnostic("PL001", str(exc)))
        if _SARIF_ARTIFACT.get() is None:  # a command line that did not parse: show it against a file it names
            _SARIF_ARTIFACT.set(next((a for a in argv if not a.startswith("-") and os.path.isfile(a)), None))
        return _finish(sink, _asked_format(argv), {"ok": False}, [])
    except _ParserExit as exc:
        return exc.status
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:  # the system refused a path no reader reported: bad input, exit 2
            from .core.diagnostics import os_error_diagnostic
            with contextlib.suppress(OSError, ValueError):
                _emit([os_error_diagnostic(exc)], _asked_format(argv) if argv else "text")
            return ExitCode.USAGE
        # stdout (or stderr) could not take what the command printed: a full device, a closed descriptor
        with contextlib.suppress(OSError, ValueError):
            _emit([Diagnostic("PL007", f"cannot write the command's output: {exc.strerror or exc}",
                              hint="stdout could not take it (a full device, a closed descriptor): redirect it")],
                  "text")
        _stdout_closed()
        return ExitCode.USAGE
    except Exception as exc:  # a bug, not bad input: say so plainly (a missing toolchain is neither)
        from .toolchain import ToolchainError
        if isinstance(exc, ToolchainError):
            _emit([Diagnostic("PL008", safe_text(str(exc), lines=True))], "text")
            return ExitCode.USAGE
        if os.environ.get("PIPELINK_TRACEBACK"):
            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {safe_text(str(exc), lines=True)}\n  = this is a bug in "
              "pipelink; rerun with PIPELINK_TRACEBACK=1 and report the output", file=sys.stderr)
        return INTERNAL_ERROR


_INTEGER = re.compile(r"[+-]?[0-9]+")  # what --specialize and --geometry take, as the pipeline's JSON
_WRITE_ERRNOS = {errno.ENOSPC, errno.EBADF, errno.EIO, errno.EDQUOT, errno.EFBIG}


class _ClosedStdout(io.TextIOBase):
    """sys.stdout for a process started without one: text printed to it is dropped (as Python drops print()s),
    and a binary output asked of it fails as a write to a closed descriptor does."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)

    @property
    def buffer(self):
        raise OSError(errno.EBADF, "stdout is closed")


def _asked_format(argv: list[str]) -> str:
    """The --format a command line asks for, read past a usage error, so that a tool reading JSON or SARIF on
    stdout gets its document even for a command it could not run."""
    fmt = "text"
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--format" and i + 1 < len(argv) else arg.partition("=")[2] \
            if arg.startswith("--format=") else None
        if value in ("json", "sarif"):
            fmt = value
    return fmt


def _stdout_closed() -> int:
    """The reader of stdout went away (`... | head`): nothing more to say to it. Point stdout at
    /dev/null so that the interpreter's last flush does not complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind sys.stdout
        pass
    return STDOUT_CLOSED


def _run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.version:
        return cmd_version()
    if args.command is None:
        _parser().print_help()
        return ExitCode.USAGE
    # a SARIF result needs a file to be shown against: one located only at an option or a component gets the
    # command's main input (the pipeline, else the first input; a stream read from stdin is no file)
    inputs = [getattr(args, "pipeline", None), *(getattr(args, "files", None) or ())]
    _SARIF_ARTIFACT.set(next((str(f) for f in inputs if f is not None and str(f) != "-"), None))
    return {"inspect": cmd_inspect, "check": cmd_check, "header": cmd_header, "build": cmd_build,
            "link": cmd_link, "config": cmd_config, "demo": cmd_demo}[args.command](args)


_SARIF_ARTIFACT: contextvars.ContextVar = contextvars.ContextVar("sarif_artifact", default=None)


def cmd_version() -> int:
    """Like `nvcc --version`: what pipelink is and which toolchain it found. A tool it cannot find is said
    so on its line; the command that needs it reports PL008."""
    from . import __version__, toolchain

    def found(read) -> str:
        try:
            return read()
        except Exception as exc:  # ToolchainError, ImportError, a library that does not load: say which
            said = str(exc).splitlines()
            return f"not available ({safe_text(said[0] if said else type(exc).__name__)})"

    print(f"pipelink {__version__} (CUDA toolchain pinned at {toolchain.PINNED_CUDA})")
    print(f"nvcc {found(lambda: f'{toolchain.nvcc_version()} ({toolchain.nvcc_path()})')}")
    print(f"NVRTC {found(lambda: '.'.join(map(str, toolchain.nvrtc_version())))}")
    print(f"nvJitLink {found(lambda: '.'.join(map(str, toolchain.nvjitlink_version())))}")
    return ExitCode.OK


def cmd_config(args) -> int:
    from .authoring.builder import component_cflags, pipelink_include_dir
    from .toolchain import ToolchainError

    if sys.stdout is None or isinstance(sys.stdout, _ClosedStdout):  # the printed line is all config makes
        sink = DiagnosticSink()
        sink.error("PL007", "cannot write the flags: stdout is closed", hint="run it with stdout open ($(...))")
        return _finish(sink, "text", {}, [])
    if args.include_dir:
        print(pipelink_include_dir())
        return ExitCode.OK
    try:
        flags = component_cflags()
    except ToolchainError as exc:
        sink = DiagnosticSink()
        sink.error("PL008", str(exc))
        return _finish(sink, "text", {}, [])
    print(shlex.join(flags))
    return ExitCode.OK


def _emit(diags, fmt: str) -> None:
    diags = list(diags)
    if diags and fmt == "text":
        print(render_all(diags), file=sys.stderr)


def _werror(sink: DiagnosticSink, werror: bool) -> None:
    """--werror: every warning becomes an error, as -Werror makes them; called before anything is written."""
    if werror:
        sink.warnings_as_errors()


def cmd_inspect(args) -> int:
    from .core.loader import load_contract_bytes, load_contract_file
    from .core.model import Source
    from .formats.inputs import find_contract, read_input
    from .formats.inputs import is_contract_file
    from .report import contract_summary, contract_text, object_summary, object_text

    sink = DiagnosticSink()
    results, lines = [], []
    if args.manifest is not None and len(args.files) > 1:
        sink.error("PL001", "--manifest names the manifest of one linked cubin; inspect that cubin alone",
                   Location(option=f"--manifest {args.manifest[:80]}"))
        return _finish(sink, args.format, {"inputs": []}, [])
    for path in args.files:
        try:
            data = read_input_bytes(path)
        except OSError as exc:
            sink.error("PL002", f"cannot read {path}: {exc.strerror or exc}", Location(file=path))
            continue
        if is_contract_file(path, data):
            c = load_contract_file(path, sink)
            if c:
                results.append({"path": path, "format": "contract", "contract": contract_summary(c)})
                lines += contract_text(c) + [""]
            continue
        for obj in read_input(path, sink):
            item = object_summary(obj)
            lines += object_text(obj)
            if obj.format == "cubin":  # a linked kernel: its manifest, not a contract, describes it
                lines += _inspect_manifest(Path(args.manifest or Path(path).with_suffix(".json")), obj.data, item, sink,
                                           given=args.manifest is not None, cubin_name=Path(path).name)
                results.append(item)
                lines.append("")
                continue
            inner = DiagnosticSink()
            found = find_contract(obj, inner)
            if found:
                c = load_contract_bytes(found[0], Source(found[1]), inner)
                item["contract"] = contract_summary(c) if c else None
                lines += ["  " + ln for ln in (contract_text(c) if c else [f"contract at {found[1]} is invalid "
                                                                           "(run `pipelink check`)"])]
            else:
                item["contract"] = None
                lines.append("  contract  none (no .pipelink.contract section, no sidecar)")
            results.append(item)
            lines.append("")
    _werror(sink, args.werror)
    # one line each: a line break or a long value from an input (a contract's owner) is shown escaped, shortened
    return _finish(sink, args.format, {"inputs": results}, [safe_text(ln) for ln in lines], partial_ok=True)


def _inspect_manifest(path: Path, cubin: bytes, item: dict, sink: DiagnosticSink, given: bool = False,
                      cubin_name: str | None = None) -> list[str]:
    """The manifest `pipelink link -o K.cubin` writes next to it (K.json), if there is one, or the one --manifest
    names. A K.json beside it that is another of pipelink's documents (the pipeline file, a contract) is not its
    manifest: the cubin is shown alone, with a warning."""
    from .core.jsonread import read_file
    from .report import manifest_summary, manifest_text
    if not given and not path.is_file():
        return []
    doc = read_file(path, sink, "manifest")
    if doc is None:
        return []
    other = _other_document(doc.value)
    if other and not given:
        sink.warning("PL009", f"{path} beside the cubin is {other}, not its manifest: the cubin is shown alone",
                     Location(file=str(path)), hint="name the manifest: --manifest PATH (where link --manifest put it)")
        return []
    from .runtime.manifest import Manifest, ManifestError
    try:
        m = manifest_summary(Manifest.from_json(doc.value), cubin)
    except ManifestError as exc:
        sink.error("PL009", f"{path} does not describe a kernel: {exc.message}", Location(file=str(path)))
        return []
    lines = manifest_text(str(path), m)
    if not m["matches_cubin"]:
        sink.warning("PL035", f"{path} was written for another cubin than {cubin_name or path.with_suffix('.cubin').name}",
                     Location(file=str(path)))
    item["manifest"] = dict(m, path=str(path))
    return lines


def _other_document(value) -> str | None:
    """What a JSON document found where a kernel's manifest was looked for is, when it is another of pipelink's."""
    if isinstance(value, dict) and "kernel" not in value:
        if "pipeline" in value:
            return "a pipeline file"
        if "pipelink_contract" in value:
            return "a component contract"
    return None


def cmd_check(args) -> int:
    from .api import run_checks
    from .core.pipeline import load_pipeline
    from .linker.picture import map_output
    from .report import contract_summary

    sink = DiagnosticSink()
    if args.map and not args.pipeline:
        sink.error("PL001", "--map needs --pipeline: the map shows what linking as that pipeline decides")
        return _finish(sink, args.format, {}, [])
    outputs = [Output(args.map, "link map", "--map", hint="write the link map elsewhere (--map PATH)")] if args.map else []
    if not check_outputs(outputs, object_inputs(args.files, args.pipeline), sink, _report(args.format)):
        return _finish(sink, args.format, {}, [])
    from .core.pipeline import PipelineSpec
    together = args.set or args.pipeline is not None or bool(args.schedule or args.dispatch)
    spec = load_pipeline(args.pipeline, sink) if args.pipeline else None
    if (args.schedule or args.dispatch) and not sink.has_errors:  # what `link` would be told on its command line
        spec = spec or PipelineSpec()
        given = {**spec.given, **{f"/{f}": f"--{f} {getattr(args, f)}" for f in ("schedule", "dispatch")
                                  if getattr(args, f)}}
        spec = replace(spec, schedule=args.schedule or spec.schedule, dispatch=args.dispatch or spec.dispatch,
                       given=given)
    got, ctx = run_checks(args.files, sink, args.arch, spec, together) if not sink.has_errors else ([], None)
    _werror(sink, args.werror)
    if ctx is not None and args.map and not sink.has_errors:
        write_outputs({args.map: map_output(args.map, ctx.link_map, ctx.link_picture, ctx.resolved.name).encode(errors="surrogateescape")},
                      sink)
    ok = not sink.has_errors
    checked = [(c, g.target) for g in got for c in g.components]
    targets = {target for _, target in checked}
    doc = {"ok": ok, "together": together, "target": next(iter(targets)) if len(targets) == 1 else None,
           "components": [dict(contract_summary(c.contract), object=c.obj.path if c.obj else None, target=target)
                          for c, target in checked] if ok else []}
    summary = _check_summary(checked, together) if ok else f"{len(sink.errors)} error{'s' if len(sink.errors) != 1 else ''}"
    return _finish(sink, args.format, doc, [summary], to_stderr=args.map == STDOUT)


def _check_summary(checked, together: bool) -> str:
    """`ok: 3 components checked one by one: a, b, c for sm_90`; with several targets, `...: a for sm_90; b for sm_90a`."""
    n = len(checked)
    if n == 0:
        return "ok: no components"
    how = "" if n < 2 else " together" if together else " one by one"
    by_target: dict[str, list[str]] = {}
    for c, target in checked:
        by_target.setdefault(target, []).append(c.name)
    return (f"ok: {n} component{'s' if n != 1 else ''} checked{how}: "
            + "; ".join(f"{', '.join(names)} for {target}" for target, names in by_target.items()))


def _report(fmt: str) -> str | None:
    """What else a command prints on stdout, for check_outputs."""
    return f"the --format {fmt} report" if fmt != "text" else None


def cmd_header(args) -> int:
    from .authoring.header import generate_header
    from .core.loader import load_contract_file

    sink = DiagnosticSink()
    output = Output(args.output, "header", "-o", hint="write the header elsewhere (-o PATH)")
    if not check_outputs([output], [Input(args.contract, f"the contract {args.contract}")], sink):
        return _finish(sink, "text", {}, [])
    c = load_contract_file(args.contract, sink)
    if c is not None:
        write_outputs({args.output: generate_header(c).encode(errors="surrogateescape")}, sink)
    return _finish(sink, "text", {}, [])


def cmd_build(args) -> int:
    from .authoring.builder import BuildOptions, build_component
    from .core.loader import load_contract_file

    sink = DiagnosticSink()
    c = load_contract_file(args.contract, sink)
    if c is None:
        return _finish(sink, "text", {}, [])
    opts = BuildOptions(archs=tuple(args.arch) if args.arch else None, include_dirs=tuple(args.include),
                        defines=tuple(args.define), verbose=args.verbose, werror=args.werror,
                        **({"timeout_s": args.timeout} if args.timeout else {}))
    from .api import check_objects
    ok = build_component(c, read_input_bytes(args.contract), args.source, args.output, sink, opts,
                         check_object=check_objects)
    if args.verbose:
        for cmd in opts.nvcc_log:
            print(cmd, file=sys.stderr)
    cached = " (cached)" if any(line.startswith("(cached:") for line in opts.nvcc_log) else ""
    return _finish(sink, "text", {}, [f"built {args.output}{cached} ({c.name} {c.version}, contract {c.hash[:16]})"]
                   if ok else [], to_stderr=args.output == STDOUT)


def _link_options(args, sink: DiagnosticSink):
    from .core.model import is_identifier
    from .core.pipeline import PipelineSpec, load_pipeline, parse_wire
    from .linker.passes import LinkOptions

    spec = load_pipeline(args.pipeline, sink) if args.pipeline else PipelineSpec()
    if spec is None:
        return None
    from .core.diagnostics import Location

    def at_option(flag: str, value) -> Location:  # where a diagnostic about an option's value points
        return Location(option=f"{flag} {str(value)[:80]}")

    wires = []
    for text in args.wire:
        wire = parse_wire(text, sink, at_option("--wire", text))
        if wire and all((w.producer, w.out_port, w.consumer, w.in_port) !=
                        (wire.producer, wire.out_port, wire.consumer, wire.in_port) for w in (*spec.wires, *wires)):
            wires.append(wire)  # a wire the pipeline (or an earlier --wire) already has is the same wire
    specialize, geometry = dict(spec.specialize), dict(spec.geometry)
    for flag, items, into, bits, what in (("--specialize", args.specialize, specialize, 64, "a parameter's name"),
                                          ("--geometry", args.geometry, geometry, 32, "a geometry name")):
        seen: dict[str, int] = {}
        for item in items:
            name, _, value = item.partition("=")
            number = int(value) if _INTEGER.fullmatch(value) and len(value) < 40 else None  # as written: no spaces
            if number is None or not -2**(bits - 1) <= number < 2**(bits - 1) or not is_identifier(name):
                sink.error("PL001", f"{flag} {item[:80]!r}: write NAME=INTEGER ({what}, a signed {bits}-bit "
                           "decimal value)", at_option(flag, item), hint=f"for example {flag} N=128")
            elif name in seen and seen[name] != number:
                sink.error("PL001", f"{flag} gives {name} twice: {seen[name]} and {number}", at_option(flag, item),
                           hint=f"give {name} once")
            else:
                seen[name] = into[name] = number
    if args.profile_tasks is not None and not 0 <= args.profile_tasks <= 1 << 24:
        sink.error("PL001", f"--profile-tasks {args.profile_tasks}: give a number of task records, 0 to {1 << 24}",
                   at_option("--profile-tasks", args.profile_tasks), hint="for example --profile-tasks 65536")
    if args.name is not None and not is_identifier(args.name):
        sink.error("PL001", f"--name {args.name!r} is not a C identifier", at_option("--name", repr(args.name)),
                   hint="the kernel's name is a C identifier")
    if sink.has_errors:
        return None
    given = dict(spec.given)  # what the options set, for a diagnostic to name the option rather than the file
    for field_name, option in (("name", "--name"), ("schedule", "--schedule"), ("dispatch", "--dispatch"),
                               ("profile_tasks", "--profile-tasks")):
        if getattr(args, field_name) is not None:
            given[f"/{field_name}"] = f"{option} {getattr(args, field_name)}"
    for field_name, option in (("debug_events", "--debug-events"), ("dependent_launch", "--dependent-launch"),
                               ("standalone", "--standalone")):
        if getattr(args, field_name):
            given[f"/{field_name}"] = option
    for field_name, option in (("specialize", "--specialize"), ("geometry", "--geometry")):
        for item in getattr(args, field_name):
            given[f"/{field_name}/{item.partition('=')[0].strip()}"] = f"{option} {item[:80]}"
    for i, wire in enumerate(wires, start=len(spec.wires)):
        given[f"/wires/{i}"] = f"--wire {wire.text[:80]}"
    spec = replace(spec, name=args.name or spec.name, wires=tuple(spec.wires) + tuple(wires), given=given,
                   schedule=args.schedule or spec.schedule, dispatch=args.dispatch or spec.dispatch,
                   debug_events=args.debug_events or spec.debug_events, specialize=specialize, geometry=geometry,
                   dependent_launch=args.dependent_launch or spec.dependent_launch,
                   profile_tasks=args.profile_tasks if args.profile_tasks is not None else spec.profile_tasks,
                   standalone=args.standalone or spec.standalone)
    return LinkOptions(arch=args.arch, pipeline=spec, monolithic=bool(args.emit_monolithic), cache=not args.no_cache)


def cmd_link(args) -> int:
    from .linker.passes import link
    from .linker.picture import map_output

    sink = DiagnosticSink()
    options = _link_options(args, sink)
    if options is None:
        return _finish(sink, args.format, {}, [])
    outputs = _link_outputs(args, options.pipeline.name)
    if not check_outputs(list(outputs.values()), object_inputs(args.files, args.pipeline), sink,
                         _report(args.format)):
        return _finish(sink, args.format, {"ok": False}, [])
    result = link(args.files, options, extra=("loops",) if args.loops else ())
    sink.extend(result.diagnostics)
    ctx = result.context
    if args.verbose and ctx.cache_hit:
        print("pipelink: reused an identical earlier link from the link cache (--no-cache links afresh)",
              file=sys.stderr)
    if args.verbose and ctx.resolved is not None:
        r = ctx.resolved
        print(f"pipelink: {len(r.components)} components for {ctx.target}, schedule {r.schedule}, kernel {r.name}",
              file=sys.stderr)
        if ctx.nvjitlink_options:
            print(f"pipelink:   nvJitLink {' '.join(ctx.nvjitlink_options)}", file=sys.stderr)
    if args.time:
        for name, seconds in result.timings:
            print(f"pipelink: pass {name:<9} {seconds * 1000:8.1f} ms", file=sys.stderr)
    _werror(sink, args.werror)
    if sink.has_errors:
        return _finish(sink, args.format, {"ok": False}, [])
    content = {"cubin": result.cubin, "manifest": result.manifest_json(),
               "map": map_output(args.map or "", result.link_map, result.link_picture, result.manifest.kernel).encode(errors="surrogateescape"),
               "glue": (result.glue or "").encode(errors="surrogateescape"),
               "monolithic": (result.monolithic or "").encode(errors="surrogateescape")}
    if not write_outputs({o.path: content[key] for key, o in outputs.items()}, sink):
        return _finish(sink, args.format, {"ok": False}, [])
    m, output = result.manifest, outputs["cubin"].path
    # the wires from the manifest: a link from the cache ran no resolve pass
    lines = [f"wire {w.source} -> {w.target} ({'explicit' if w.explicit else 'auto'}, {w.kind})" for w in m.wires]
    lines.append(f"linked {output}{' (cached)' if ctx.cache_hit else ''}: kernel {m.kernel}, {m.block[0]} "
                 f"threads, {m.dynamic_smem} bytes of dynamic smem"
                 + (f", {m.resources.registers} registers" if m.resources is not None else ""))
    return _finish(sink, args.format, {"ok": True, "output": output, "cached": bool(ctx.cache_hit),
                                       "manifest": m.to_json()}, lines,
                   to_stderr=any(o.path == STDOUT for o in outputs.values()))


def _link_outputs(args, kernel: str) -> dict[str, Output]:
    """What a link writes, known before it runs: the kernel's name is the pipeline's or --name."""
    cubin = args.output or f"{kernel}.cubin"
    move_manifest = "move the manifest with --manifest PATH, or name the cubin differently (-o PATH)"
    outputs = {"cubin": Output(cubin, "cubin", "-o" if args.output else "default: <kernel>.cubin", binary=True,
                               hint="name the cubin differently (-o PATH)")}
    if args.manifest:
        outputs["manifest"] = Output(args.manifest, "manifest", "--manifest", hint=move_manifest)
    elif cubin == STDOUT:
        outputs["manifest"] = Output(f"{kernel}.json", "manifest", "default with -o -: <kernel>.json",
                                     hint=move_manifest)
    elif special_file(cubin) or os.path.abspath(cubin).startswith(("/dev/", "/proc/")):
        pass  # -o /dev/null, a FIFO, /dev/stdout redirected to a file: nothing beside those is a place for a file
    else:
        outputs["manifest"] = Output(str(Path(cubin).with_suffix(".json")), "manifest",
                                     f"default beside the cubin {cubin}", hint=move_manifest)
    for key, value, role, option in (("map", args.map, "link map", "--map"),
                                     ("glue", args.emit_glue, "glue source", "--emit-glue"),
                                     ("monolithic", args.emit_monolithic, "one-unit control source",
                                      "--emit-monolithic")):
        if value:
            outputs[key] = Output(value, role, option, hint=f"write the {role} elsewhere ({option} PATH)")
    return outputs


def cmd_demo(args) -> int:
    from .harness.demo import run_demo
    return run_demo(Path(args.build_dir))


def _finish(sink: DiagnosticSink, fmt: str, doc: dict, lines: list[str], partial_ok: bool = False,
            to_stderr: bool = False) -> int:
    """Print the result (lines on success, or always with partial_ok) and the diagnostics. `to_stderr`:
    an output went to stdout, so the lines go to stderr."""
    if fmt in ("json", "sarif") and isinstance(sys.stdout, _ClosedStdout):  # the document asked for goes nowhere
        _emit(sink.items + [Diagnostic("PL007", f"the --format {fmt} report cannot be written: stdout is closed",
                                       hint="give the command a stdout (a file, a pipe), or drop --format")], "text")
        return int(ExitCode.USAGE)
    if fmt == "json":  # every document says whether the command succeeded, however early it stopped
        doc = dict({"ok": not sink.has_errors}, **doc, diagnostics=[d.to_json() for d in sink.items])
        print(json_text(doc))
    elif fmt == "sarif":  # the diagnostics only: what code-scanning tools read
        from . import __version__
        print(json_text(sarif_log(sink.items, __version__, _SARIF_ARTIFACT.get())))
    else:
        # the lines say what inputs hold (names, symbols, paths): nothing in them may drive the terminal
        lines = [escape_controls(ln, lines=True) for ln in lines]
        if lines and (partial_ok or not sink.has_errors):
            print("\n".join(lines).rstrip(), file=sys.stderr if to_stderr else sys.stdout)
        _emit(sink.items, "text")
        if sink.has_errors and not partial_ok:  # every command ends a failure with its count, as check does
            n = len(sink.errors)
            print(f"{n} error{'s' if n != 1 else ''}", file=sys.stderr)
    return int(sink.exit_code())


if __name__ == "__main__":
    sys.exit(main())
