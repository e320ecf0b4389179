"""A seeded mutator of JSON documents, for the malformed-input property test: edits of the structure
(keys deleted, renamed, repeated; values of another type, out of range, nested deep) and of the
bytes (truncated, not UTF-8, control characters, a BOM). The same seed gives the same bytes."""
from __future__ import annotations

import json
import random

# Placeholders for text that `json.dumps` cannot produce (repeated keys, NaN, integers of thousands of
# digits); replaced in the serialized bytes.
_RAW = "\x00raw{}\x00"


class Mutator:
    def __init__(self, seed: str):
        self.rng = random.Random(seed)
        self.raw: dict[str, str] = {}  # placeholder string -> the JSON text that replaces it
        self.log: list[str] = []       # what was done, for the failure message

    # --- helpers ----------------------------------------------------------------------------

    def raw_text(self, text: str) -> str:
        key = _RAW.format(len(self.raw))
        self.raw[key] = text
        return key

    def serialize(self, doc) -> bytes:
        out = json.dumps(doc, indent=self.rng.choice([None, 2]))
        for key, text in self.raw.items():
            out = out.replace(json.dumps(key), text)
        return out.encode("utf-8", "surrogatepass")

    @staticmethod
    def slots(doc) -> list[tuple[object, object]]:
        """(container, key or index) for every value below the root."""
        out, todo = [], [doc]
        while todo:
            node = todo.pop()
            items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
            for k, v in items:
                out.append((node, k))
                todo.append(v)
        return out

    def value(self, old=None):
        """A value of another kind than `old`, some hostile."""
        r = self.rng
        choices = [
            lambda: None, lambda: r.choice([True, False]), lambda: r.randint(-5, 300),
            lambda: r.choice([0, -1, 2**31, 2**63 - 1, -2**63, 2**64 - 1]),
            lambda: self.raw_text(str(2**64)), lambda: self.raw_text("9" * r.choice([30, 4301, 20000])),
            lambda: self.raw_text(r.choice(["NaN", "Infinity", "-Infinity", "1e999", "-0.0", "4.0", "1E2"])),
            lambda: r.choice([1.5, 4.0, -2.5]),
            lambda: r.choice(["", "x", "sideways", "TILE_M", "ceil_div(M, 0)", "M // 0", "1 +", "a.b->c.d"]),
            lambda: "x" * r.choice([65, 300, 5000, 200_000]),
            lambda: self.raw_text(r.choice(['"\\ud800"', '"\\udc00x"', '"\\u0000"', '"a\\qb"'])),
            lambda: [], lambda: {}, lambda: [old, old], lambda: {"description": old},
            lambda: self.nested(old, r.choice([8, 63, 64, 65, 200, 5000])),
        ]
        return r.choice(choices)()

    def nested(self, inner, depth: int):
        if depth > 500:  # a Python structure this deep would not serialize: write the text
            return self.raw_text("[" * depth + json.dumps(inner) + "]" * depth)
        for _ in range(depth):
            inner = [inner] if self.rng.random() < 0.5 else {"k": inner}
        return inner

    # --- structural edits -------------------------------------------------------------------

    def edit(self, doc, extra_strings=()) -> None:
        slots = self.slots(doc)
        if not slots:
            return
        node, key = self.rng.choice(slots)
        kind = self.rng.choice(["delete", "rename", "duplicate", "retype", "retype", "enum", "append", "string",
                                "tweak", "tweak", "tweak"])
        self.log.append(f"{kind} {key!r}")
        if kind == "delete":
            del node[key]
        elif kind == "rename" and isinstance(node, dict):
            new = self.rng.choice([key[:-1], key + "s", key.upper(), "x" + key, key + "_"])
            if new and new not in node:
                node[new] = node.pop(key)
        elif kind == "duplicate" and isinstance(node, dict):
            node[self.raw_text(json.dumps(key))] = node[key]  # a dict cannot hold the key twice: its text can
        elif kind == "enum" and isinstance(node[key], str):
            node[key] = self.rng.choice([node[key] + "x", node[key].upper(), "", "bogus", *extra_strings])
        elif kind == "append" and isinstance(node[key], list):
            node[key].append(self.rng.choice([*extra_strings, None, 1, "x"]) if extra_strings else self.value())
        elif kind == "tweak" and isinstance(node[key], int) and not isinstance(node[key], bool):
            # A plausible value: the checks after the schema see it.
            node[key] = self.rng.choice([0, 1, 2, 3, 4, 8, 16, 31, 32, 33, 64, 100, 128, 255, 256, 1024, 4096, 2**31])
        elif kind == "tweak" and isinstance(node[key], bool):
            node[key] = not node[key]
        elif kind in ("string", "tweak") and isinstance(node[key], str):
            node[key] = self.rng.choice(list(extra_strings) or ["x"])
        else:
            node[key] = self.value(node[key])

    # --- byte edits -------------------------------------------------------------------------

    def bytes_edit(self, data: bytes) -> bytes:
        r = self.rng
        kind = r.choice(["truncate", "not_utf8", "control", "bom", "garbage", "empty", "trailing"])
        self.log.append(f"bytes {kind}")
        at = r.randrange(len(data) + 1)
        if kind == "truncate":
            return data[:at]
        if kind == "not_utf8":
            return data[:at] + r.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80", b"\xf4\x90\x80\x80"]) + data[at:]
        if kind == "control":
            quote = data.find(b'"', at)
            at = quote + 1 if quote >= 0 else at
            return data[:at] + bytes([r.choice([0, 1, 7, 10, 13, 27, 31])]) + data[at:]
        if kind == "bom":
            return b"\xef\xbb\xbf" + data
        if kind == "garbage":
            return data[:at] + bytes(r.randrange(256) for _ in range(r.randint(1, 8))) + data[at:]
        if kind == "empty":
            return r.choice([b"", b" \n", b"\t"])
        return data + r.choice([b"x", b"{}", b"]", b" ,"])
