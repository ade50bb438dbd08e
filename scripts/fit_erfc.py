#!/usr/bin/env python3
"""Derives the polynomial of the vectorised erfc (include/mixprec/kernels/detail/erfc_fit.hpp).

For a >= 0 the kernels write

    erfc(a) = e^(-a^2) (1 + p(a)) / (1 + 2a),    p(a) = s P(s - m),    s = 2a / (a + k),

so that p(0) = 0 exactly and, as a grows, (1 + p) / (1 + 2a) follows erfc(a) e^(a^2) ~ 1 / (a sqrt(pi)).
s maps [0, a_max] onto [0, s_max] (s_max < 2); P is a polynomial in the centred variable u = s - m,
m = s_max / 2, whose monomial coefficients stay small (a monomial basis in s itself, or in
t = (a - k) / (a + k), loses up to 5 ulps to cancellation in float32 Horner steps). P interpolates
p(s) / s at the Chebyshev nodes of [-m, s_max - m] (near-minimax for a function this smooth),
converted to monomials in u. a_max = 10.1 is where erfc leaves float32's subnormal range
(erfc(10.06) < 2^-149); beyond, e^(-a^2) is 0 in float32 and so is the result.

Only Python's standard library: math.erfc and math.exp are double precision, ~10^-16 relative, far
below the float32 resolution the fit is for. Prints the fit's maximum absolute error in p over a
dense grid and the C++ constants.

    python3 scripts/fit_erfc.py            # k = 2, degree 10: the constants in the header
"""

import math
import struct
import sys

A_MAX = 10.1


def to_float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def p_of_a(a):
    """p(a) = erfc(a) e^(a^2) (1 + 2a) - 1, in double."""
    return math.erfc(a) * math.exp(a * a) * (1.0 + 2.0 * a) - 1.0


def chebyshev_interpolant(f, lo, hi, degree):
    """Monomial coefficients (in the variable itself, lowest first) of the degree-`degree`
    polynomial interpolating f at the Chebyshev nodes of [lo, hi]."""
    n = degree + 1
    nodes = [math.cos(math.pi * (j + 0.5) / n) for j in range(n)]
    values = [f(lo + (hi - lo) * (x + 1.0) / 2.0) for x in nodes]
    cheb = [2.0 / n * sum(values[j] * math.cos(math.pi * i * (j + 0.5) / n) for j in range(n)) for i in range(n)]
    cheb[0] /= 2.0
    # T_i as monomials in w in [-1, 1]: T_0 = 1, T_1 = w, T_i = 2 w T_(i-1) - T_(i-2).
    basis = [[1.0], [0.0, 1.0]]
    for i in range(2, n):
        doubled = [0.0] + [2.0 * c for c in basis[i - 1]]
        previous = basis[i - 2] + [0.0] * (len(doubled) - len(basis[i - 2]))
        basis.append([x - y for x, y in zip(doubled, previous)])
    in_w = [0.0] * n
    for i in range(n):
        for j, c in enumerate(basis[i]):
            in_w[j] += cheb[i] * c
    # w = scale v + offset for v in [lo, hi]; expand (scale v + offset)^i.
    scale = 2.0 / (hi - lo)
    offset = -(lo + hi) / (hi - lo)
    in_v = [0.0] * n
    for i in range(n):
        for j in range(i + 1):
            in_v[j] += in_w[i] * math.comb(i, j) * scale**j * offset ** (i - j)
    return in_v


def hex_float(x):
    """x as a C++ hexadecimal float literal's digits, without trailing zeros."""
    mantissa, exponent = float.hex(x).split("p")
    return mantissa.rstrip("0").rstrip(".") + "p" + exponent


def horner(coefficients, v):
    r = 0.0
    for c in reversed(coefficients):
        r = r * v + c
    return r


def main():
    k = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    degree = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    s_max = 2.0 * A_MAX / (A_MAX + k)
    m = to_float32(s_max / 2.0)
    coefficients = chebyshev_interpolant(lambda u: p_of_a(k * (u + m) / (2.0 - (u + m))) / (u + m), -m, s_max - m,
                                         degree)
    coefficients = [to_float32(c) for c in coefficients]
    worst = 0.0
    for i in range(1, 20001):
        a = A_MAX * i / 20000
        s = 2.0 * a / (a + k)
        worst = max(worst, abs(s * horner(coefficients, s - m) - p_of_a(a)))
    print(f"// scripts/fit_erfc.py {k:g} {degree}: max |s P(s - m) - p| = {worst:.2e} over (0, {A_MAX}]"
          " (float32 coefficients, evaluated in double)")
    print(f"inline constexpr float erfc_fit_k = {hex_float(k)}F;  // {k!r}")
    print(f"inline constexpr float erfc_fit_centre = {hex_float(m)}F;  // {m!r}")
    print(f"inline constexpr std::array<float, {len(coefficients)}> erfc_fit_coefficients = {{")
    for c in coefficients:
        print(f"    {hex_float(c)}F,  // {c!r}")
    print("};")


if __name__ == "__main__":
    main()
