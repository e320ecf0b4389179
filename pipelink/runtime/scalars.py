"""Python floats as the bit patterns of the small float formats a kernel parameter may have.

Pure: a kernel argument of dtype f16, bf16 or fp8 travels as its bits, rounded to nearest even
from the double itself (no detour through f32, which could round twice).
"""
from __future__ import annotations

import math
import struct


def _round_to_small_float(x: float, exp_bits: int, man_bits: int, max_bits: int,
                          inf_bits: int | None, nan_bits: int) -> int:
    """The bit pattern of `x` in a small binary float format, rounded to nearest even.

    Works from the double directly (no detour through f32, which could round twice). Raises
    OverflowError for a finite value beyond the largest finite one, and for an infinity where the
    format has none (fp8 e4m3fn).
    """
    if math.isnan(x):
        return nan_bits
    sign = 1 << (exp_bits + man_bits) if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if math.isinf(a):
        if inf_bits is None:
            raise OverflowError("the format has no infinity")
        return sign | inf_bits
    if a == 0:
        return sign
    bias = (1 << (exp_bits - 1)) - 1
    emin = 1 - bias
    _, e = math.frexp(a)  # a = m * 2**e with 0.5 <= m < 1: the leading bit is worth 2**(e-1)
    ulp_exp = max(e - 1, emin) - man_bits
    n = round(math.ldexp(a, -ulp_exp))  # exact scaling; round() on a float ties to even
    if e - 1 < emin:
        bits = n  # subnormal; n == 2**man_bits carries into the smallest normal by itself
    else:
        bits = ((e - 1 + bias) << man_bits) + n - (1 << man_bits)  # a mantissa carry bumps the exponent
    if bits > max_bits:
        raise OverflowError(f"{x!r} is beyond the largest finite value")
    return sign | bits


def float_to_bf16_bits(x: float) -> int:
    """bfloat16 bits of `x`, round to nearest even (1.0 -> 0x3f80)."""
    return _round_to_small_float(x, 8, 7, 0x7F7F, 0x7F80, 0x7FC0)


def float_to_f16_bits(x: float) -> int:
    """IEEE half bits of `x` (1.0 -> 0x3c00), via struct's 'e', which rounds to nearest even."""
    return struct.unpack("<H", struct.pack("<e", x))[0]


def float_to_fp8_e4m3_bits(x: float) -> int:
    """float8_e4m3fn bits (no infinity, max 448, NaN 0x7f), round to nearest even."""
    return _round_to_small_float(x, 4, 3, 0x7E, None, 0x7F)


def float_to_fp8_e5m2_bits(x: float) -> int:
    """float8_e5m2 bits (IEEE-like, max 57344), round to nearest even."""
    return _round_to_small_float(x, 5, 2, 0x7B, 0x7C, 0x7E)
