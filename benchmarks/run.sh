#!/usr/bin/env bash
# Runs the transport and pool benchmarks in one JMH run and prints the ratios that
# docs/benchmarks.md reports. Usage: benchmarks/run.sh [extra JMH options]
# Output: benchmarks/target/jmh-result.json and the ratio table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
JAVA=${JAVA:-java}
if [ ! -f benchmarks/target/benchmarks.jar ] || [ -n "${REBUILD:-}" ]; then
  mvn -q -pl benchmarks -am package -DskipTests
fi
OUT=benchmarks/target/jmh-result.json
"$JAVA" -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -jar benchmarks/target/benchmarks.jar \
  'TcpReadBenchmark|NioSocketBenchmark|BufferPoolBenchmark|FetchPathBenchmark' \
  -f "${FORKS:-1}" -wi "${WARMUPS:-3}" -w 2s -i "${ITERATIONS:-5}" -r 3s -prof gc \
  -rf json -rff "$OUT" "$@"
python3 - "$OUT" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))
score, alloc = {}, {}
for r in runs:
    name = r["benchmark"].rsplit(".", 2)
    key = (name[-2], name[-1], tuple(sorted(r.get("params", {}).items())))
    score[key] = (r["primaryMetric"]["score"], r["primaryMetric"]["scoreError"], r["primaryMetric"]["scoreUnit"])
    sec = r.get("secondaryMetrics", {}).get("gc.alloc.rate.norm")
    if sec:
        alloc[key] = sec["score"]
MIB = 16  # each throughput operation moves 16 MiB
print("\n| benchmark | size | result | allocated B/op |")
print("| --- | --- | --- | --- |")
for k in sorted(score):
    s, e, unit = score[k]
    params = dict(k[2])
    size = params.get("readBytes") or params.get("bufferBytes")
    if "leakDetection" in params:
        size = f"{size}, leaks {params['leakDetection']}"
    shown = f"{s * MIB:.0f} ± {e * MIB:.0f} MiB/s" if unit == "ops/s" else f"{s:.1f} ± {e:.1f} {unit}"
    print(f"| {k[0]}.{k[1]} | {size} | {shown} | {alloc.get(k, float('nan')):.3f} |")
print("\n| ratio | value |")
print("| --- | --- |")
for size in ("65536", "1048576"):
    t = score.get(("TcpReadBenchmark", "readSixteenMiB", (("readBytes", size),)))
    n = score.get(("NioSocketBenchmark", "readSixteenMiB", (("readBytes", size),)))
    if t and n:
        print(f"| tcp READ / NIO socket loop, {int(size) // 1024} KiB | {t[0] / n[0]:.2f} |")
for leaks in ("disabled", "sampled"):
    pk = ("BufferPoolBenchmark", "pooledAcquireRelease", (("bufferBytes", "65536"), ("leakDetection", leaks)))
    ak = ("BufferPoolBenchmark", "allocateDirectAndRegister", (("bufferBytes", "65536"), ("leakDetection", leaks)))
    if pk in score and ak in score:
        print(f"| allocateDirect+register time / pool acquire+release time, 64 KiB, leaks {leaks} | {score[ak][0] / score[pk][0]:.1f} |")
        print(f"| pool acquire+release allocation, leaks {leaks} | {alloc.get(pk, float('nan')):.3f} B/op |")
PY
