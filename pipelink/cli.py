"""The `pipelink` command: a thin shell over the library. Exit codes: 0 ok, 1 a contract or link
problem, 2 bad usage or unreadable input, 3 a bug in pipelink itself, 141 when the reader of stdout
went away (`pipelink inspect ... | head`), quietly, as a tool ended by SIGPIPE would."""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from .diagnostics import Diagnostic, DiagnosticSink, ExitCode, Location, escape_controls, render_all, safe_text
from .outputs import STDOUT, Input, Output, check_outputs, object_inputs, write_outputs
from .pipeline import DISPATCHES, SCHEDULES
from .targets import TARGETS

INTERNAL_ERROR = 3
STDOUT_CLOSED = 128 + 13  # SIGPIPE


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit 2 itself; keep our format
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pipelink", description="A contract-guided linker for fused GPU kernels.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    ins = sub.add_parser("inspect", help="show what objects and contracts hold")
    ins.add_argument("files", nargs="+", metavar="FILE")
    ins.add_argument("--format", choices=("text", "json"), default="text")

    chk = sub.add_parser("check", help="validate contracts (and objects) alone and as a set",
                         description="Validate each contract, the set, and each object against its contract. "
                                     f"Targets: {', '.join(TARGETS)}.")
    chk.add_argument("files", nargs="+", metavar="FILE", help="contracts (.json) or objects")
    chk.add_argument("--arch", help="the link target (default: the first target every component supports)")
    chk.add_argument("--pipeline", metavar="P", help="also check the set as this pipeline links it, without "
                     "compiling: wires, geometry, events (PL06x-PL08x) and the joint allocation (PL04x)")
    chk.add_argument("--map", metavar="FILE", help="with --pipeline: write the link map of what the link would "
                     "decide (everything but the linked kernel's own resources); - for stdout")
    chk.add_argument("--format", choices=("text", "json"), default="text")

    hdr = sub.add_parser("header", help="write the header a component compiles against")
    hdr.add_argument("contract")
    hdr.add_argument("-o", "--output", default=STDOUT, help="file to write (default: - for stdout)")

    bld = sub.add_parser("build", help="compile a component against its contract and embed the contract")
    bld.add_argument("source")
    bld.add_argument("--contract", required=True)
    bld.add_argument("-o", "--output", required=True, help="the object to write (- for stdout)")
    bld.add_argument("--arch", action="append", help="build only for this target (repeatable)")
    bld.add_argument("-I", dest="include", action="append", default=[], help="include directory")
    bld.add_argument("-D", dest="define", action="append", default=[], help="preprocessor definition")
    bld.add_argument("-v", "--verbose", action="store_true")

    lnk = sub.add_parser("link", help="link component objects into one fused kernel",
                         description="Check, allocate, generate the glue, link with nvJitLink LTO, verify, emit. "
                                     "Nothing is written unless the whole link succeeds. An identical earlier "
                                     "link is reused from the link cache: PIPELINK_CACHE_DIR (default "
                                     "~/.cache/pipelink); PIPELINK_CACHE=0 turns it off.")
    lnk.add_argument("files", nargs="+", metavar="FILE", help="component objects (with contracts)")
    lnk.add_argument("-o", "--output", help="the cubin (default: <kernel>.cubin; - for stdout)")
    lnk.add_argument("--pipeline", help="a pipeline file: components' order, wires, schedule, kernel name")
    lnk.add_argument("--wire", action="append", default=[], metavar="P.OUT=C.IN", help="wire two ports (repeatable)")
    lnk.add_argument("--schedule", choices=SCHEDULES)
    lnk.add_argument("--dispatch", choices=DISPATCHES, help="persistent schedule: how CTAs get tasks")
    lnk.add_argument("--specialize", action="append", default=[], metavar="NAME=VALUE",
                     help="bake an integer parameter's value into this link (one kernel per shape)")
    lnk.add_argument("--debug-events", action="store_true",
                     help="a wait that spins too long stops the kernel; the launcher raises EventTimeout")
    lnk.add_argument("--name", help="the kernel's name (default: the pipeline's, or pipelink_fused)")
    lnk.add_argument("--arch", help="the link target (default: the first target every component supports)")
    lnk.add_argument("--map", metavar="FILE", help="write the link map (- for stdout)")
    lnk.add_argument("--manifest", metavar="FILE", help="where to write the manifest (default: the cubin's path "
                     "with .json, or <kernel>.json when the cubin goes to stdout)")
    lnk.add_argument("--emit-glue", metavar="FILE", help="also write the generated glue source")
    lnk.add_argument("--emit-monolithic", metavar="FILE", help="also write the one-unit control source")
    lnk.add_argument("-v", "--verbose", action="store_true", help="say what each pass decided")
    lnk.add_argument("--time", action="store_true", help="show each pass's time")
    lnk.add_argument("--no-cache", action="store_true", help="link afresh: neither read nor write the link cache")
    lnk.add_argument("--format", choices=("text", "json"), default="text")

    demo = sub.add_parser("demo", help="build the shipped components, link the default pipeline, run it on a GPU")
    demo.add_argument("--build-dir", default="build/components")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for stream in (sys.stdout, sys.stderr):  # a name the terminal cannot encode must not end the command
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    try:
        code = _run(argv)
        sys.stdout.flush()  # a closed stdout shows here at the latest
        return code
    except UsageError as exc:
        _emit([Diagnostic("PL001", str(exc))], "text")
        return ExitCode.USAGE
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: say so plainly
        if os.environ.get("PIPELINK_TRACEBACK"):
            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {safe_text(str(exc), lines=True)}\n  = this is a bug in "
              "pipelink; rerun with PIPELINK_TRACEBACK=1 and report the output", file=sys.stderr)
        return INTERNAL_ERROR


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
    if args.command is None:
        _parser().print_help()
        return ExitCode.USAGE
    return {"inspect": cmd_inspect, "check": cmd_check, "header": cmd_header, "build": cmd_build,
            "link": cmd_link, "demo": cmd_demo}[args.command](args)


def _emit(diags, fmt: str) -> None:
    diags = list(diags)
    if diags and fmt == "text":
        print(render_all(diags), file=sys.stderr)


def cmd_inspect(args) -> int:
    from .collect import is_contract_file
    from .inputs import find_contract, read_input
    from .loader import load_contract_bytes, load_contract_file
    from .model import Source
    from .report import contract_summary, contract_text, object_summary, object_text

    sink = DiagnosticSink()
    results, lines = [], []
    for path in args.files:
        try:
            data = Path(path).read_bytes()
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
                lines += _inspect_manifest(Path(path).with_suffix(".json"), obj.data, item, sink)
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
    return _finish(sink, args.format, {"inputs": results}, lines, partial_ok=True)


def _inspect_manifest(path: Path, cubin: bytes, item: dict, sink: DiagnosticSink) -> list[str]:
    """The manifest `pipelink link -o K.cubin` writes next to it (K.json), if there is one."""
    from .jsonread import read_file
    from .report import manifest_summary, manifest_text
    if not path.is_file():
        return []
    doc = read_file(path, sink, "manifest")
    if doc is None:
        return []
    try:
        m = manifest_summary(doc.value, cubin)
        lines = manifest_text(str(path), m)  # reads the fields the launcher does not check
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        sink.error("PL009", f"{path} does not describe a kernel: {exc}", Location(file=str(path)))
        return []
    if not m["matches_cubin"]:
        sink.warning("PL035", f"{path} was written for another cubin than {path.with_suffix('.cubin').name}",
                     Location(file=str(path)))
    item["manifest"] = dict(m, path=str(path))
    return lines


def cmd_check(args) -> int:
    from .collect import collect
    from .report import contract_summary

    sink = DiagnosticSink()
    if args.map and not args.pipeline:
        sink.error("PL001", "--map needs --pipeline: the map shows what linking as that pipeline decides")
        return _finish(sink, args.format, {}, [])
    outputs = [Output(args.map, "link map", "--map", hint="write the link map elsewhere (--map PATH)")] if args.map else []
    if not check_outputs(outputs, object_inputs(args.files, args.pipeline), sink, _report(args.format)):
        return _finish(sink, args.format, {}, [])
    got = collect(args.files, sink, args.arch)
    if args.pipeline and not sink.has_errors:
        text = _check_as_pipeline(got, args.pipeline, sink)
        if text is not None and args.map and not sink.has_errors:
            write_outputs({args.map: text.encode()}, sink)
    ok = not sink.has_errors
    names = [c.name for c in got.components]
    summary = (f"ok: {len(names)} component{'s' if len(names) != 1 else ''} ({', '.join(names)}) "
               f"checked for {got.target}" if ok else
               f"{len(sink.errors)} error{'s' if len(sink.errors) != 1 else ''}")
    doc = {"ok": ok, "target": got.target,
           "components": [dict(contract_summary(c.contract), object=c.obj.path if c.obj else None)
                          for c in got.components] if ok else []}
    return _finish(sink, args.format, doc, [summary], to_stderr=args.map == STDOUT)


def _report(fmt: str) -> str | None:
    """What else a command prints on stdout, for check_outputs."""
    return "the --format json report" if fmt == "json" else None


def _check_as_pipeline(got, pipeline: str, sink: DiagnosticSink) -> str | None:
    """The link's decisions up to the glue, over contracts alone: what CI can know before any build.
    Returns the link map of those decisions (None after an error)."""
    from .allocate import allocate
    from .emit import link_map
    from .pipeline import load_pipeline
    from .resolve import resolve
    spec = load_pipeline(pipeline, sink)
    if spec is None:
        return None
    r = resolve(got.components, spec, sink)
    if r is None or sink.has_errors:
        return None
    a = allocate(r, got.target, sink)
    return None if a is None or sink.has_errors else link_map(r, a, got.target)


def cmd_header(args) -> int:
    from .header import generate_header
    from .loader import load_contract_file

    sink = DiagnosticSink()
    output = Output(args.output, "header", "-o", hint="write the header elsewhere (-o PATH)")
    if not check_outputs([output], [Input(args.contract, f"the contract {args.contract}")], sink):
        return _finish(sink, "text", {}, [])
    c = load_contract_file(args.contract, sink)
    if c is not None:
        write_outputs({args.output: generate_header(c).encode()}, sink)
    return _finish(sink, "text", {}, [])


def cmd_build(args) -> int:
    from .build import BuildOptions, build_component
    from .loader import load_contract_file

    sink = DiagnosticSink()
    c = load_contract_file(args.contract, sink)
    if c is None:
        return _finish(sink, "text", {}, [])
    opts = BuildOptions(archs=tuple(args.arch) if args.arch else None, include_dirs=tuple(args.include),
                        defines=tuple(args.define), verbose=args.verbose)
    ok = build_component(c, Path(args.contract).read_bytes(), args.source, args.output, sink, opts)
    if args.verbose:
        for cmd in opts.nvcc_log:
            print(cmd, file=sys.stderr)
    return _finish(sink, "text", {}, [f"built {args.output} ({c.name} {c.version}, contract {c.hash[:16]})"]
                   if ok else [], to_stderr=args.output == STDOUT)


def _link_options(args, sink: DiagnosticSink):
    from .linker import LinkOptions
    from .model import is_identifier
    from .pipeline import PipelineSpec, load_pipeline, parse_wire

    spec = load_pipeline(args.pipeline, sink) if args.pipeline else PipelineSpec()
    if spec is None:
        return None
    wires = [w for w in (parse_wire(t, sink) for t in args.wire) if w]
    if sink.has_errors:
        return None
    spec.wires = tuple(spec.wires) + tuple(wires)
    spec.schedule = args.schedule or spec.schedule
    spec.dispatch = args.dispatch or spec.dispatch
    spec.debug_events = args.debug_events or spec.debug_events
    for item in args.specialize:
        name, _, value = item.partition("=")
        try:
            number = int(value)  # a string of thousands of digits is a ValueError too
        except ValueError:
            number = None
        if number is None or not -2**63 <= number < 2**63:  # the range the pipeline file's schema allows
            sink.error("PL001", f"--specialize {item[:80]!r}: write NAME=INTEGER (a signed 64-bit value)")
        else:
            spec.specialize[name.strip()] = number
    if sink.has_errors:
        return None
    if args.name is not None and not is_identifier(args.name):
        sink.error("PL001", f"--name {args.name!r} is not a C identifier", hint="the kernel's name is a C identifier")
        return None
    spec.name = args.name or spec.name
    return LinkOptions(arch=args.arch, pipeline=spec, monolithic=bool(args.emit_monolithic), cache=not args.no_cache)


def cmd_link(args) -> int:
    from .linker import link

    sink = DiagnosticSink()
    options = _link_options(args, sink)
    if options is None:
        return _finish(sink, args.format, {}, [])
    outputs = _link_outputs(args, options.pipeline.name)
    if not check_outputs(list(outputs.values()), object_inputs(args.files, args.pipeline), sink,
                         _report(args.format)):
        return _finish(sink, args.format, {"ok": False}, [])
    result = link(args.files, options)
    sink.extend(result.diagnostics)
    ctx = result.context
    if args.verbose and ctx.cache_hit:
        print("pipelink: reused an identical earlier link from the link cache (--no-cache links afresh)",
              file=sys.stderr)
    if args.verbose and ctx.resolved is not None:
        r = ctx.resolved
        print(f"pipelink: {len(r.components)} components for {ctx.target}, schedule {r.schedule}, kernel {r.name}",
              file=sys.stderr)
        for w in r.wires:
            print(f"pipelink:   wire {w} ({w.kind}, {'explicit' if w.explicit else 'auto'})", file=sys.stderr)
        if ctx.nvjitlink_options:
            print(f"pipelink:   nvJitLink {' '.join(ctx.nvjitlink_options)}", file=sys.stderr)
    if args.time:
        for name, seconds in result.timings:
            print(f"pipelink: pass {name:<9} {seconds * 1000:8.1f} ms", file=sys.stderr)
    if not result.ok:
        return _finish(sink, args.format, {"ok": False}, [])
    content = {"cubin": result.cubin, "manifest": (json.dumps(result.manifest, indent=2) + "\n").encode(),
               "map": result.link_map.encode(), "glue": (result.glue or "").encode(),
               "monolithic": (result.monolithic or "").encode()}
    if not write_outputs({o.path: content[key] for key, o in outputs.items()}, sink):
        return _finish(sink, args.format, {"ok": False}, [])
    m, output = result.manifest, outputs["cubin"].path
    summary = (f"linked {output}: kernel {m['kernel']}, {m['block'][0]} threads, {m['dynamic_smem']} bytes of "
               "dynamic smem" + (f", {m['resources']['registers']} registers" if "resources" in m else ""))
    return _finish(sink, args.format, {"ok": True, "output": output, "manifest": m}, [summary],
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
    from .demo import run_demo
    return run_demo(Path(args.build_dir))


def _finish(sink: DiagnosticSink, fmt: str, doc: dict, lines: list[str], partial_ok: bool = False,
            to_stderr: bool = False) -> int:
    """Print the result (lines on success, or always with partial_ok) and the diagnostics. `to_stderr`:
    an output went to stdout, so the lines go to stderr."""
    if fmt == "json":
        doc = dict(doc, diagnostics=[d.to_json() for d in sink.items])
        print(json.dumps(doc, indent=2))
    else:
        # the lines say what inputs hold (names, symbols, paths): nothing in them may drive the terminal
        lines = [escape_controls(ln, lines=True) for ln in lines]
        if lines and (partial_ok or not sink.has_errors):
            print("\n".join(lines).rstrip(), file=sys.stderr if to_stderr else sys.stdout)
        _emit(sink.items, "text")
        if lines and sink.has_errors and not partial_ok:
            print(lines[-1], file=sys.stderr)
    return int(sink.exit_code())


if __name__ == "__main__":
    sys.exit(main())
