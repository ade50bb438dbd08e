#!/usr/bin/env python3
"""Turns one run of mixprec_matmul_benchmark into the matrix-product tables of docs/performance.md.

Usage (from the repository root, with a Release build of the benchmarks in build-bench/):

    build-bench/benchmarks/mixprec_matmul_benchmark --benchmark_repetitions=3 \
        --benchmark_enable_random_interleaving=true \
        --benchmark_report_aggregates_only=true --benchmark_format=json > matmul.json
    python3 benchmarks/matmul_report.py matmul.json docs/performance.md

The tables replace the text between the markers <!-- matmul-benchmark:begin --> and
<!-- matmul-benchmark:end --> of the markdown file (printed to stdout when no file is given). Every
ratio is between two figures of the same run. Standard library only.
"""
import json
import platform
import re
import subprocess
import sys

BEGIN = "<!-- matmul-benchmark:begin -->"
END = "<!-- matmul-benchmark:end -->"


def medians(path, pattern):
    """The context of a Google Benchmark JSON run and, for each benchmark whose name matches the regular
    expression `pattern` (the medians of repeated runs, or single runs), its JSON record keyed by the
    tuple of the pattern's groups."""
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    results = {}
    for b in run["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        m = re.match(pattern, b["name"])
        if m and not b.get("error_occurred"):
            results[m.groups()] = b
    return run["context"], results


def load(path):
    context, found = medians(path, r"(.+?)/m:(\d+)/k:(\d+)/n:(\d+)/threads:(\d+)")
    results = {}
    for groups, b in found.items():
        results[(groups[0], tuple(int(g) for g in groups[1:]))] = {
            "gflops": b.get("FLOP/s", 0.0) / 1e9,
            "gbs": b.get("W_bytes/s", 0.0) / 1e9,
            "label": b.get("label", ""),
        }
    return context, results


def cpu_flags():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = line.split(":", 1)[1].split()
                    keep = [x for x in flags if x.startswith(("avx", "fma", "f16c", "amx"))]
                    return " ".join(sorted(keep))
    except OSError:
        pass
    return "unknown"


def package_version(name):
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True, check=False)
        return out.stdout.strip() or "not installed"
    except OSError:
        return "unknown"


def fmt(x):
    return f"{x:.1f}" if x else "—"


def ratio(a, b):
    return f"{a / b:.2f}×" if a and b else "—"


def tables(context, r):
    def g(name, shape, key="gflops"):
        return r.get((name, shape), {}).get(key, 0.0)

    # (The tiny ctest smoke shape is left out.)
    shapes = [s for s in sorted({k[1] for k in r}, key=lambda s: (s[3], -s[0] * s[1] * s[2])) if s[1] > 40]
    lines = []
    lines.append(
        f"Machine: {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz, flags `{cpu_flags()}`; "
        f"{platform.python_implementation()} report of a Google Benchmark run on {context.get('date')}; "
        f"oneDNN {package_version('libdnnl2')}, Eigen {package_version('libeigen3-dev')}, "
        f"Google Benchmark {package_version('libbenchmark-dev')}. GFLOP/s, medians of the repetitions.")
    lines.append("")
    lines.append("| shape m·k·n | threads | dense p=f32 | oneDNN f32 | ratio | dense c=bf16 | oneDNN bf16 | ratio to best peer "
                 "| dense p=f16 / our f32 | e4m3 weights, c=bf16 / our bf16 | Eigen f32 | matmul p=f32 (unpacked) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in shapes:
        f32, bf16 = g("dense/p=f32", s), g("dense/p=f32,c=bf16", s)
        f16, f8 = g("dense/p=f16", s), g("float8_weights/c=bf16", s)
        d32, dbf = g("onednn_f32", s), g("onednn_bf16", s)
        best_bf16_peer = max(d32, dbf)
        lines.append(
            f"| {s[0]}·{s[1]}·{s[2]} | {s[3]} | {fmt(f32)} | {fmt(d32)} | {ratio(f32, d32)} | {fmt(bf16)} | "
            f"{fmt(dbf)} | {ratio(bf16, best_bf16_peer)} | {ratio(f16, f32)} | {ratio(f8, bf16)} | "
            f"{fmt(g('eigen_f32', s))} | {fmt(g('matmul/p=f32', s))} |")
    lines.append("")
    lines.append("Single-row product (m = 1): weights streamed per second (GB/s) and the ratio of token rates to "
                 "float32 weights.")
    lines.append("")
    lines.append("| shape | threads | dense p=f32 GB/s | dense c=bf16 GB/s | bf16 / f32 | e4m3 weights GB/s "
                 "| e4m3 / f32 | oneDNN f32 GB/s |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for s in [s for s in shapes if s[0] == 1]:
        f32, bf16, f8 = g("dense/p=f32", s), g("dense/p=f32,c=bf16", s), g("float8_weights/c=bf16", s)
        lines.append(f"| {s[0]}·{s[1]}·{s[2]} | {s[3]} | {fmt(g('dense/p=f32', s, 'gbs'))} | "
                     f"{fmt(g('dense/p=f32,c=bf16', s, 'gbs'))} | {ratio(bf16, f32)} | "
                     f"{fmt(g('float8_weights/c=bf16', s, 'gbs'))} | {ratio(f8, f32)} | "
                     f"{fmt(g('onednn_f32', s, 'gbs'))} |")
    lines.append("")
    lines.append("Two threads against one (same shape, same run):")
    lines.append("")
    lines.append("| shape | dense p=f32 | dense c=bf16 | oneDNN f32 |")
    lines.append("|---|---|---|---|")
    for s in [s for s in shapes if s[3] == 1 and (s[0], s[1], s[2], 2) in {k[1] for k in r}]:
        t2 = (s[0], s[1], s[2], 2)
        lines.append(f"| {s[0]}·{s[1]}·{s[2]} | {ratio(g('dense/p=f32', t2), g('dense/p=f32', s))} | "
                     f"{ratio(g('dense/p=f32,c=bf16', t2), g('dense/p=f32,c=bf16', s))} | "
                     f"{ratio(g('onednn_f32', t2), g('onednn_f32', s))} |")
    return "\n".join(lines)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    context, results = load(sys.argv[1])
    text = tables(context, results)
    if len(sys.argv) < 3:
        print(text)
        return
    replace_between(sys.argv[2], BEGIN, END, text)


def replace_between(path, begin, end, text):
    """Replaces the text between the markers `begin` and `end` of the file at `path` by `text`."""
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    if begin not in doc or end not in doc:
        sys.exit(f"{path} has no {begin} ... {end} markers")
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + begin + "\n" + text + "\n" + end + tail)


if __name__ == "__main__":
    main()
