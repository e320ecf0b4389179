"""The one JSON reader: every JSON document pipelink reads (contracts, pipeline files, manifests,
link-cache entries, its own schemas) goes through `parse`.

Python's `json` accepts what JSON does not (NaN, Infinity, repeated keys, lone surrogates), recurses
in C until RecursionError, and turns an integer of thousands of digits into ValueError. This reader
lexes with regular expressions and builds values with an explicit stack, so that each of those is
a `JSONError` with a stable code, a line and column, and (inside objects) a JSON pointer.

Limits (docs/contract.md, "Reading JSON"): MAX_BYTES per document, MAX_DEPTH nested arrays and
objects, integers within 64 bits, floats finite.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from .diagnostics import DiagnosticSink, Location

MAX_BYTES = 2 * 1024 * 1024  # contracts, pipelines and manifests are kilobytes; parsing and checking scale with it
MAX_DEPTH = 64
INT_MIN, INT_MAX = -2**63, 2**64 - 1  # i64 and u64 values; no pipelink field needs more
_MAX_INT_DIGITS = 20  # len(str(2**64 - 1)): longer digit strings are rejected before int() sees them

BOM = b"\xef\xbb\xbf"
_WS = re.compile(r"[ \t\n\r]*")
# A string token: no raw control characters, any escape (json.loads validates the escapes).
_STRING = re.compile(r'"[^"\\\x00-\x1f]*(?:\\[^\x00-\x1f][^"\\\x00-\x1f]*)*"')
_STRING_PREFIX = re.compile(r'"[^"\\\x00-\x1f]*(?:\\[^\x00-\x1f][^"\\\x00-\x1f]*)*')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = (("true", True), ("false", False), ("null", None))
_NOT_JSON_WORDS = ("NaN", "Infinity", "-Infinity")
_CLOSE = {"{": "}", "[": "]"}


class JSONError(ValueError):
    """Input that is not a JSON document pipelink reads. `code` is PL003, PL006 or PL130..PL132."""

    def __init__(self, code: str, message: str, line: int | None = None, column: int | None = None,
                 pointer: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.code, self.message, self.hint = code, message, hint
        self.line, self.column, self.pointer = line, column, pointer

    def location(self, file: str | None) -> Location:
        return Location(file=file, pointer=self.pointer, line=self.line, column=self.column)

    def report(self, sink: DiagnosticSink, file: str | None) -> None:
        sink.error(self.code, self.message, self.location(file), self.hint)


@dataclass(frozen=True)
class Document:
    """A parsed document (`value` may be None: the document `null`)."""
    value: object


OBJECT_NOT_JSON_HINT = "an object's embedded contract is what `pipelink inspect` shows; give the .json here"


def is_object_file(data: bytes) -> bool:
    """An ELF object or an archive of them, where a JSON document belongs."""
    return data.startswith((b"\x7fELF", b"!<arch>\n"))


def read_file(path: str | Path, sink: DiagnosticSink, what: str = "file") -> Document | None:
    """Read and parse one file (`what` it is, for a file that cannot be read); every failure is a
    diagnostic (exit 2) and None."""
    try:
        data = read_bytes(path)
        if is_object_file(data):
            sink.error("PL004", f"{path} is an object file, not a {what} (JSON)", Location(file=str(path)),
                       hint=OBJECT_NOT_JSON_HINT)
            return None
        return Document(parse(data))
    except OSError as exc:
        sink.error("PL002", f"cannot read {what} {path}: {exc.strerror or exc}", Location(file=str(path)))
    except JSONError as exc:
        exc.report(sink, str(path))
    return None


def parse_bytes(data: bytes, file: str | None, sink: DiagnosticSink) -> Document | None:
    try:
        return Document(parse(data))
    except JSONError as exc:
        exc.report(sink, file)
        return None


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, reading no more than the limit (a multi-GB file is refused, not loaded; a stream
    such as a pipe is read once: files.read_input_bytes)."""
    from .files import TooLarge, read_input_bytes
    try:
        return read_input_bytes(path, MAX_BYTES)
    except TooLarge:
        raise _too_large() from None


def _too_large() -> JSONError:
    return JSONError("PL130", f"the file is larger than {MAX_BYTES // (1024 * 1024)} MiB, the limit for a JSON "
                     "document", hint="pipelink's JSON inputs are a few kilobytes; is this the right file?")


def parse(data: bytes) -> object:
    """The value of one JSON document (RFC 8259, UTF-8, within the limits above), or JSONError."""
    if len(data) > MAX_BYTES:
        raise _too_large()
    if not data.strip():
        raise JSONError("PL003", "the file is empty" if not data else "the file holds only whitespace", 1, 1)
    if data.startswith(BOM):
        raise JSONError("PL006", "the file starts with a UTF-8 byte order mark, which JSON does not allow", 1, 1,
                        hint="save the file as UTF-8 without a BOM")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        start = data.rfind(b"\n", 0, exc.start) + 1
        column = len(data[start:exc.start].decode("utf-8", "replace")) + 1
        raise JSONError("PL006", f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8", line, column,
                        hint="JSON files are UTF-8 text") from None
    return _Parser(text).document()


class _Parser:
    def __init__(self, text: str):
        self.text = text
        # One frame per open array or object: [container, key of the member being read or None].
        self.stack: list[list] = []

    def error(self, message: str, pos: int, code: str = "PL006", hint: str | None = None) -> JSONError:
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return JSONError(code, message, line, column, self.pointer(), hint)

    def pointer(self) -> str | None:
        """Where the parser is, as a JSON pointer: the member being read (or, between members, the object)."""
        if not self.stack:
            return None
        parts = []
        for container, key in self.stack:
            if isinstance(container, dict) and key is None:
                break
            parts.append("/" + _escape(key if isinstance(container, dict) else str(len(container))))
        return "".join(parts)

    def ws(self, pos: int) -> int:
        return _WS.match(self.text, pos).end()

    def document(self) -> object:
        text, stack = self.text, self.stack
        pos = self.ws(0)
        while True:
            # Read a value at pos: open a container, or read a scalar.
            ch = text[pos:pos + 1]
            if ch in ("{", "["):
                if len(stack) >= MAX_DEPTH:
                    raise self.error(f"arrays and objects nest deeper than {MAX_DEPTH} levels", pos, "PL131")
                stack.append([{} if ch == "{" else [], None])
                pos = self.ws(pos + 1)
                if text[pos:pos + 1] != _CLOSE[ch]:
                    if ch == "{":
                        pos = self.key(pos)
                    continue
                value, pos = stack.pop()[0], pos + 1
            else:
                value, pos = self.scalar(pos)
            # Hand the value to its container; close every container that ends here.
            while True:
                pos = self.ws(pos)
                if not stack:
                    if pos != len(text):
                        raise self.error("more data after the JSON document", pos)
                    return value
                frame = stack[-1]
                container = frame[0]
                if isinstance(container, dict):
                    container[frame[1]] = value
                else:
                    container.append(value)
                close = "}" if isinstance(container, dict) else "]"
                ch = text[pos:pos + 1]
                if ch == ",":
                    pos = self.ws(pos + 1)
                    if isinstance(container, dict):
                        pos = self.key(pos)
                    break
                if ch != close:
                    raise self.error(f"expected ',' or '{close}', found {self.found(pos)}", pos)
                stack.pop()
                value, pos = container, pos + 1

    def key(self, pos: int) -> int:
        """Read `"key" :` for the innermost object; returns where its value starts."""
        if self.text[pos:pos + 1] != '"':
            raise self.error(f"expected a key (a string), found {self.found(pos)}", pos)
        key, end = self.string(pos)
        frame = self.stack[-1]
        if key in frame[0]:
            frame[1] = None
            shown = key if len(key) <= 64 else key[:64] + "..."
            raise self.error(f"key {shown!r} appears twice in one JSON object", pos,
                             hint="JSON readers disagree on which copy wins; keep one")
        frame[1] = key
        end = self.ws(end)
        if self.text[end:end + 1] != ":":
            raise self.error(f"expected ':' after the key, found {self.found(end)}", end)
        return self.ws(end + 1)

    def scalar(self, pos: int) -> tuple[object, int]:
        text = self.text
        ch = text[pos:pos + 1]
        if ch == '"':
            return self.string(pos)
        if ch == "-" or ch.isdigit():
            m = _NUMBER.match(text, pos)
            if m:
                return self.number(m), m.end()
        for word, value in _LITERALS:
            if text.startswith(word, pos):
                return value, pos + len(word)
        for word in _NOT_JSON_WORDS:
            if text.startswith(word, pos):
                raise self.error(f"{word} is not a JSON number", pos, hint="JSON numbers are finite")
        raise self.error(f"expected a value, found {self.found(pos)}", pos)

    def string(self, pos: int) -> tuple[str, int]:
        text = self.text
        m = _STRING.match(text, pos)
        if not m:
            bad = _STRING_PREFIX.match(text, pos).end()
            if bad >= len(text) or (text[bad] == "\\" and bad + 1 >= len(text)):
                raise self.error("the string is not closed before the end of the file", pos)
            if text[bad] == "\\":
                bad += 1
            raise self.error(f"control character U+{ord(text[bad]):04X} inside a string", bad,
                             hint="write it escaped (\\n, \\t, \\u0000)")
        token = m.group()
        if "\\" not in token:
            return token[1:-1], m.end()
        try:
            value = json.loads(token)
        except json.JSONDecodeError as exc:
            raise self.error(f"bad escape in a string: {exc.msg}", pos + exc.pos) from None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise self.error(f"the string holds a lone surrogate \\u{ord(value[exc.start]):04x}, which is not "
                             "a character", pos, hint="escape a character outside the BMP as a surrogate pair") \
                from None
        return value, m.end()

    def number(self, m: re.Match) -> int | float:
        token = m.group()
        if m.group(1) is None and m.group(2) is None:
            if len(token.lstrip("-")) <= _MAX_INT_DIGITS:
                value = int(token)
                if INT_MIN <= value <= INT_MAX:
                    return value
            shown = token if len(token) <= 24 else f"{token[:12]}...({len(token)} characters)"
            raise self.error(f"integer {shown} is outside the 64-bit range pipelink reads", m.start(), "PL132")
        value = float(token)
        if not math.isfinite(value):
            raise self.error(f"number {token[:24]} is too large for a double", m.start(), "PL132")
        return value

    def found(self, pos: int) -> str:
        if pos >= len(self.text):
            return "the end of the file (is it truncated?)"
        return repr(self.text[pos])


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
