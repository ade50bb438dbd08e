#!/usr/bin/env python3
"""Turns one run of mixprec_rows_benchmark (or, with --decode, of mixprec_decode_benchmark) into the
issue 9 tables of docs/performance.md.

Usage (from the repository root, with a Release build of the benchmarks in build-bench/):

    build-bench/benchmarks/mixprec_rows_benchmark --benchmark_filter='threads:[12]/real_time$' \\
        --benchmark_repetitions=3 --benchmark_report_aggregates_only=true --benchmark_format=json > rows.json
    python3 benchmarks/rows_report.py rows.json docs/performance.md
    build-bench/benchmarks/mixprec_decode_benchmark --benchmark_repetitions=3 \
        --benchmark_report_aggregates_only=true --benchmark_format=json > decode.json
    python3 benchmarks/rows_report.py --decode decode.json docs/performance.md

The table replaces the text between <!-- rows-benchmark:begin --> and <!-- rows-benchmark:end -->
(<!-- decode-benchmark:begin/end --> with --decode) of the markdown file (printed to stdout when no file is given). Every ratio is between two figures of
the same run: each kernel against a memcpy moving the same bytes, and against oneDNN where it has the
operation. Standard library only.
"""
import platform
import sys

from matmul_report import cpu_flags, fmt, medians, package_version, ratio, replace_between

BEGIN = "<!-- rows-benchmark:begin -->"
END = "<!-- rows-benchmark:end -->"
DECODE_BEGIN = "<!-- decode-benchmark:begin -->"
DECODE_END = "<!-- decode-benchmark:end -->"
DECODE = [("decode/p=f32", "f32"), ("decode/p=bf16", "bf16"), ("decode/p=f16", "f16"),
          ("decode/float8_weights", "float8 e4m3fn weight-only (per-channel scales, c=bf16)")]

# (kernel, label, the memcpy moving the same bytes, the oneDNN peer or None)
ROWS = [
    ("layer_norm/f32", "layer_norm f32", "memcpy/4B", "onednn_f32"),
    ("layer_norm/bf16", "layer_norm p=f32,c=bf16,o=bf16 (bf16 in/out)", "memcpy/2B", "onednn_bf16"),
    ("rms_norm_residual/f32", "rms_norm + residual f32 (stream in place)", "memcpy/8B", None),
    ("softmax/f32", "softmax f32", "memcpy/4B", None),
    ("softmax/bf16", "softmax bf16 in/out", "memcpy/2B", None),
    ("silu/f32", "SiLU f32 (range, on the calling thread)", "memcpy/4B", None),
    ("silu/bf16", "SiLU bf16 in/out (range, on the calling thread)", "memcpy/2B", None),
    ("gelu_tanh/f32", "tanh-GELU f32 (range, on the calling thread)", "memcpy/4B", None),
    ("silu/f32/portable", "SiLU f32 at the portable level (std::exp)", "memcpy/4B", None),
    ("silu_derivative/f32", "SiLU' f32 (range, on the calling thread)", "memcpy/4B", None),
    ("silu_derivative/f32/portable", "SiLU' f32 at the portable level (std::exp)", "memcpy/4B", None),
    ("gelu_erf/f32", "erf-GELU f32 (range, on the calling thread)", "memcpy/4B", None),
    ("gelu_erf/f32/portable", "erf-GELU f32 at the portable level (std::erfc)", "memcpy/4B", None),
    ("gelu_erf_derivative/f32", "erf-GELU' f32 (range, on the calling thread)", "memcpy/4B", None),
]


def load(path):
    context, found = medians(path, r"(.+?)/rows:(\d+)/features:(\d+)/threads:(\d+)")
    return context, {(g[0], tuple(int(x) for x in g[1:])): b.get("bytes/s", 0.0) / 1e9 for g, b in found.items()}


def table(context, r):
    shapes = sorted({k[1] for k in r if k[1][0] > 3}, key=lambda s: (s[0] * s[1], s[2]))
    lines = [
        f"Machine: {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz, flags `{cpu_flags()}`; "
        f"{platform.python_implementation()} report of a Google Benchmark run on {context.get('date')}; "
        f"oneDNN {package_version('libdnnl2')}. GB/s of bytes read + written, medians of the repetitions; "
        "target: at least 0.8× the memcpy of the same bytes.",
        "",
        "| work | rows×features | threads | mixprec GB/s | memcpy GB/s | mixprec / memcpy | oneDNN GB/s | oneDNN / memcpy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, label, copy, peer in ROWS:
        for s in shapes:
            ours, mem = r.get((name, s), 0.0), r.get((copy, s), 0.0)
            theirs = r.get((peer, s), 0.0) if peer else 0.0
            peer_cells = f"{fmt(theirs)} | {ratio(theirs, mem)}" if peer else "(no peer) | —"
            lines.append(f"| {label} | {s[0]}×{s[1]} | {s[2]} | {fmt(ours)} | {fmt(mem)} | {ratio(ours, mem)} | "
                         f"{peer_cells} |")
    return "\n".join(lines)


def decode_table(path):
    context, found = medians(path, r"(.+?)/threads:(\d+)")
    r = {(g[0], int(g[1])): (b.get("tokens/s", 0.0), b.get("W_bytes/s", 0.0) / 1e9) for g, b in found.items()}
    lines = [
        f"Machine: {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz, flags `{cpu_flags()}`; "
        f"run on {context.get('date')}; medians of the repetitions. Targets: weight GB/s at least 0.8× the read "
        "bandwidth; tokens/s at least 1.8× f32 with bf16 weights and 3.5× with float8 weights.",
        "",
        "| weights | threads | tokens/s | tokens/s ÷ f32 | weight GB/s | read GB/s | weight ÷ read |",
        "|---|---|---|---|---|---|---|",
    ]
    for threads in (1, 2):
        read = r.get(("read_bandwidth", threads), (0.0, 0.0))[1]
        f32 = r.get(("decode/p=f32", threads), (0.0, 0.0))[0]
        for name, label in DECODE:
            tokens, gbs = r.get((name, threads), (0.0, 0.0))
            lines.append(f"| {label} | {threads} | {fmt(tokens)} | {ratio(tokens, f32)} | {fmt(gbs)} | {fmt(read)} | "
                         f"{ratio(gbs, read)} |")
    return "\n".join(lines)


def main():
    args = sys.argv[1:]
    decode = bool(args) and args[0] == "--decode"
    if decode:
        args = args[1:]
    if not args:
        sys.exit(__doc__)
    if decode:
        text, begin, end = decode_table(args[0]), DECODE_BEGIN, DECODE_END
    else:
        text, begin, end = table(*load(args[0])), BEGIN, END
    if len(args) < 2:
        print(text)
    else:
        replace_between(args[1], begin, end, text)


if __name__ == "__main__":
    main()
