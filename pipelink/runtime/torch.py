"""A linked kernel as a torch operator: `torch.compile(fullgraph=True)` traces it, CUDA graphs capture it.

    import pipelink.runtime.torch
    kernel = pipelink.load("build/rowsum")
    rowsum = pipelink.runtime.torch.register(kernel, "rowsum", shapes={"x": ("M", "N"), "out": ("M", "ceil_div(N, 128)")})
    rowsum(x, out, M, N, 0.5)          # or torch.ops.pipelink.rowsum(...), inside a compiled model too

`register` defines `<namespace>::<name>` with `torch.library`, its schema from the manifest: a tensor for
each pointer or tensor-map parameter, `int`, `float` or `bool` for each scalar, in the kernel's order.
The kernel writes its outputs in place, so every tensor it may write (a pointer that is not `const`, a
tensor map) is declared mutated and the op returns nothing; torch.compile functionalizes it. The fake
(meta) implementation checks what the manifest knows (dtypes, devices, contiguity, tensor-map extents)
and the shapes given to `register` (expressions over the integer parameters), so a wrong argument is a
clear error while tracing and before any driver call. The CUDA implementation launches on the current
stream (the capture stream under `torch.cuda.graph`), with the arguments checked and packed once per
set of tensors; a persistent kernel's event workspace is allocated by its first call, so run the model
once before capturing it (torch's own warm-up does).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

try:
    import torch
except ImportError as exc:  # pragma: no cover - the package imports without torch; this module needs it
    raise ImportError("pipelink.runtime.torch needs PyTorch (import torch failed)") from exc

from ..core import expr as _expr
from ..core.model import INTEGER_DTYPES
from .launch import ArgumentError, Kernel
from .manifest import ParamSpec

# torch dtype of each pipelink dtype (those torch has)
TORCH_DTYPES = {"f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "fp8_e4m3": "float8_e4m3fn",
                "fp8_e5m2": "float8_e5m2", "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8",
                "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "bool": "bool"}
PREPARED_PER_OP = 8  # prepared launches kept per op (by the tensors' addresses, not the tensors)


def _is_tensor(p: ParamSpec) -> bool:
    return p.pointer or p.tensor_map is not None


def _written(p: ParamSpec) -> bool:
    """A tensor the kernel may write: a pointer that is not const, or a tensor map (a TMA store writes
    through one; declaring a read-only one mutated costs a copy at most, never a wrong result)."""
    return (p.pointer and not p.const) or p.tensor_map is not None


def _scalar_type(p: ParamSpec) -> str:
    if p.dtype in INTEGER_DTYPES:
        return "int"
    return "bool" if p.dtype == "bool" else "float"


def schema(kernel: Kernel, name: str) -> str:
    """The operator's schema: `rowsum(Tensor x, Tensor(a!) out, int M, int N, float scale) -> ()`."""
    args, alias = [], 0
    for p in kernel.user_params:
        if _is_tensor(p):
            if _written(p):
                args.append(f"Tensor({_alias_name(alias)}!) {p.name}")
                alias += 1
            else:
                args.append(f"Tensor {p.name}")
        else:
            args.append(f"{_scalar_type(p)} {p.name}")
    return f"{name}({', '.join(args)}) -> ()"


def _alias_name(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[i] if i < len(letters) else f"a{i}"


class PipelinkOp:
    """A registered kernel: call it like the op (`op(x, out, M, N, scale)`), or through `torch.ops`."""

    def __init__(self, kernel: Kernel, name: str, namespace: str, shapes: Mapping[str, tuple]):
        self.kernel, self.name, self.namespace = kernel, name, namespace
        self.shapes = {k: tuple(_expr.parse(e) for e in v) for k, v in shapes.items()}
        self._prepared: OrderedDict = OrderedDict()
        params = {p.name: p for p in kernel.user_params}
        unknown = sorted(set(self.shapes) - {n for n, p in params.items() if _is_tensor(p)})
        if unknown:
            raise ValueError(f"shapes name {', '.join(unknown)}, which are not tensor parameters of kernel "
                             f"'{kernel.name}' ({', '.join(n for n, p in params.items() if _is_tensor(p))})")

    @property
    def op(self):
        return getattr(getattr(torch.ops, self.namespace), self.name)

    def __call__(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    # --- the checks both implementations run, before any driver call ---------------------------

    def check(self, values: list) -> None:
        k = self.kernel
        env = {}
        for p, v in zip(k.user_params, values):
            if not _is_tensor(p) and p.dtype in INTEGER_DTYPES:
                env[p.name] = v
        for p, v in zip(k.user_params, values):
            if not _is_tensor(p):
                continue
            want = TORCH_DTYPES.get(p.dtype)
            if str(v.dtype).removeprefix("torch.") != want:
                raise ArgumentError(f"{self.namespace}::{self.name}: argument '{p.name}' must be a torch.{want} "
                                    f"tensor ({p.describe()}), got {v.dtype}")
            if v.device.type != "cuda" or (v.device.index is not None and v.device.index != k.device):
                raise ArgumentError(f"{self.namespace}::{self.name}: argument '{p.name}' is on {v.device}; kernel "
                                    f"'{k.name}' runs on cuda:{k.device}")
            if p.tensor_map is None and not v.is_contiguous():
                raise ArgumentError(f"{self.namespace}::{self.name}: argument '{p.name}' is not contiguous; the "
                                    "kernel indexes it densely (pass .contiguous())")
            extents = self.shapes.get(p.name) or (p.tensor_map.shape if p.tensor_map is not None else None)
            if extents is not None:
                try:
                    want_shape = tuple(e.evaluate(env) for e in extents)
                except _expr.ExprError as exc:
                    raise ArgumentError(f"{self.namespace}::{self.name}: the shape of '{p.name}' "
                                        f"[{', '.join(e.text for e in extents)}]: {exc}") from None
                if tuple(v.shape) != want_shape:
                    shown = ", ".join(f"{e.text}={n}" if not e.is_constant else str(n)
                                      for e, n in zip(extents, want_shape))
                    raise ArgumentError(f"{self.namespace}::{self.name}: argument '{p.name}' must have shape "
                                        f"[{shown}]; got {list(v.shape)}")

    def fake(self, *values) -> None:
        """The meta implementation: the checks, nothing to compute (the outputs are written in place)."""
        self.check(list(values))

    def cuda(self, *values) -> None:
        """Launch on the current stream; the arguments checked and packed once per set of tensors."""
        values = list(values)
        self.check(values)
        key = tuple((v.data_ptr(), tuple(v.shape), tuple(v.stride())) if isinstance(v, torch.Tensor) else v
                    for v in values)
        prepared = self._prepared.get(key)
        if prepared is None:
            prepared = self.kernel.prepare(*values)
            # The key holds the addresses, not the tensors: a cached launch must not keep a caller's
            # tensors alive (CUDA-graph trees count every live tensor of their pool). A hit means the
            # caller passes tensors at the same addresses, alive for this call.
            prepared.keep = None
            self._prepared[key] = prepared
            if len(self._prepared) > PREPARED_PER_OP:
                self._prepared.popitem(last=False)
        else:
            self._prepared.move_to_end(key)
        prepared.launch(torch.cuda.current_stream(self.kernel.device))


_LIBRARIES: dict[str, object] = {}


def register(kernel: Kernel, name: str | None = None, *, namespace: str = "pipelink",
             shapes: Mapping[str, tuple] | None = None) -> PipelinkOp:
    """Define `namespace::name` (default: the kernel's name) as a torch operator running `kernel`.
    `shapes` maps tensor parameters to their extents, expressions over the integer parameters
    (`{"out": ("M", "ceil_div(N, 128)")}`); tensors not named there are checked for dtype, device and
    contiguity only (tensor maps always for their declared extents)."""
    name = name or kernel.name
    op = PipelinkOp(kernel, name, namespace, shapes or {})
    lib = _LIBRARIES.get(namespace)
    if lib is None:
        lib = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")
    lib.define(schema(kernel, name))
    lib.impl(name, op.cuda, "CUDA")
    torch.library.register_fake(f"{namespace}::{name}", op.fake, lib=lib)
    return op


__all__ = ["PipelinkOp", "register", "schema"]
