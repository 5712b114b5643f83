#!/usr/bin/env bash
# Fetch-bound benchmark: FetchBoundJob (a shuffle of 64 KiB incompressible records whose reduce stage
# only fetches and checks them) on a standalone cluster of two "hosts" — network namespaces fbA
# (10.224.0.1: Master, Worker, driver) and fbB (10.224.0.2: Worker), one 1-core executor each, joined
# by a veth pair — under Spark's sort shuffle and rdma-shuffle (tcp provider) alternately, in two modes:
# oneway (every map output on fbA's executor, every reduce task on fbB's) and bothways (each executor
# serves half of what the other reads). Every run is bracketed by iperf3 on the same link (oneway: one
# stream fbA->fbB; bothways: --bidir), so each run has a measurement of the link before and after it.
# Prints and writes a table (fetch MB/s, fraction of iperf3, process CPU per GB of the serving and the
# receiving executor) to benchmarks/target/fetch-bound/results.md.
#
#   benchmarks/fetch-bound/run.sh [--rounds 3] [--modes "oneway bothways"] [--managers "sort rdma"]
#       [--records 32768] [--cold] [--iperf-seconds 5] [--profiler PATH/libasyncProfiler.so] [--out DIR]
#       [--conf key=value ...]
#
# --cold drops the page cache between the map and the reduce stage (sync; echo 3 > drop_caches), so
# the serving executor reads its map outputs from disk. --profiler profiles both executors during the
# reduce stage with async-profiler (collapsed stacks next to the results). Needs root, iproute2,
# iperf3, python3. RDMA_SKIP_BUILD=1 skips the build. Wrap it in `flock /tmp/bench.lock` on a shared
# machine. Everything it starts is stopped by PID and the namespaces are deleted when it ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
rounds=3
modes="oneway bothways"
managers="sort rdma"
records=32768
cold=false
iperf_s=5
profiler=""
scratch="$root/benchmarks/target/fetch-bound"
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --managers) managers=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --cold) cold=true; shift ;;
    --iperf-seconds) iperf_s=$2; shift 2 ;;
    --profiler) profiler=$2; shift 2 ;;
    --out) scratch=$2; shift 2 ;;
    --conf) extra+=(--conf "$2"); shift 2 ;;
    *) sed -n '2,21p' "$0" >&2; exit 2 ;;
  esac
done
for m in $modes; do case $m in oneway|bothways) ;; *) echo "unknown mode $m" >&2; exit 2 ;; esac; done
for m in $managers; do case $m in sort|rdma) ;; *) echo "unknown manager $m" >&2; exit 2 ;; esac; done
if [ "$(id -u)" != 0 ]; then echo "needs root (ip netns, drop_caches)" >&2; exit 1; fi
for tool in ip iperf3 python3 java mvn; do
  command -v $tool >/dev/null || { echo "needs $tool (apt-get install -y iproute2 iperf3 python3)" >&2; exit 1; }
done
ns=(fbA fbB)
ips=(10.224.0.1 10.224.0.2)
for n in "${ns[@]}"; do
  if ip netns list | grep -qw "$n"; then echo "namespace $n exists already; delete it first (ip netns del $n)" >&2; exit 1; fi
done

rm -rf "$scratch"; mkdir -p "$scratch"
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (mvn package, tests skipped)..."
  mvn -B -ntp -q -DskipTests -pl examples -am package
fi
version=$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' pom.xml | head -1)
examples_jar="$root/examples/target/rdma-shuffle-examples-$version.jar"
rdma_jar="$root/shuffle-manager/spark/target/rdma-shuffle-spark-4.2_2.13-$version-plugin.jar"
export SPARK_HOME="$root/examples/target/spark-home" SPARK_SCALA_VERSION=2.13
opens="--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
 --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
 --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
 --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
 --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED
 --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/sun.nio.cs=ALL-UNNAMED
 --add-opens=java.base/sun.security.action=ALL-UNNAMED --add-opens=java.base/sun.util.calendar=ALL-UNNAMED
 -Dio.netty.tryReflectionSetAccessible=true"

pids=()
log() { echo "[fetch-bound $(date +%H:%M:%S)] $*"; }
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 2
  for n in "${ns[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
  done
  log "namespaces deleted; logs in $scratch"
}
trap cleanup EXIT

ip netns add fbA
ip netns add fbB
ip link add veth-fbA type veth peer name veth-fbB
ip link set veth-fbA netns fbA
ip link set veth-fbB netns fbB
for i in 0 1; do
  ip -n "${ns[$i]}" addr add "${ips[$i]}/24" dev "veth-${ns[$i]}"
  ip -n "${ns[$i]}" link set lo up
  ip -n "${ns[$i]}" link set "veth-${ns[$i]}" up
done

start() { # namespace, ip, log name, main class, args...
  local n=$1 ip=$2 name=$3; shift 3
  # shellcheck disable=SC2086
  ip netns exec "$n" env SPARK_LOCAL_IP="$ip" SPARK_LOCAL_DIRS="$scratch/local-$n" \
    java -Xmx512m $opens -cp "$SPARK_HOME/jars/*" "$@" > "$scratch/$name.log" 2>&1 &
  pids+=($!)
}
master=spark://10.224.0.1:7077
start fbA 10.224.0.1 master org.apache.spark.deploy.master.Master --host 10.224.0.1 --port 7077 --webui-port 8080
for _ in $(seq 60); do grep -q "I have been elected leader" "$scratch/master.log" 2>/dev/null && break; sleep 1; done
for i in 0 1; do
  start "${ns[$i]}" "${ips[$i]}" "worker-${ns[$i]}" org.apache.spark.deploy.worker.Worker --host "${ips[$i]}" \
    --cores 1 --memory 1536m --work-dir "$scratch/work-${ns[$i]}" --webui-port 8081 $master
done
for _ in $(seq 60); do
  [ "$(grep -l "Successfully registered with master" "$scratch"/worker-*.log 2>/dev/null | wc -l)" = 2 ] && break; sleep 1
done
ip netns exec fbB iperf3 -s -B 10.224.0.2 > "$scratch/iperf3-server.log" 2>&1 &
pids+=($!)
sleep 1
log "cluster up: master $master, workers on ${ips[*]}; iperf3 server on 10.224.0.2"

iperf_json="$scratch/iperf3.jsonl"
: > "$iperf_json"
last_iperf_mode="" last_iperf=""
iperf() { # mode, label: one iperf3 measurement fbA -> fbB (bothways: --bidir); sets last_iperf (MB/s)
  local mode=$1 label=$2 flags=()
  [ "$mode" = bothways ] && flags=(--bidir)
  ip netns exec fbA iperf3 -c 10.224.0.2 -t "$iperf_s" -J "${flags[@]}" > "$scratch/iperf3-last.json" 2>&1 || true
  last_iperf=$(python3 - "$scratch/iperf3-last.json" "$mode" "$label" "$iperf_json" <<'PY'
import json, sys
path, mode, label, log = sys.argv[1:]
try:
    e = json.load(open(path))["end"]
    bps = e["sum_received"]["bits_per_second"] + e.get("sum_received_bidir_reverse", {}).get("bits_per_second", 0)
    cpu = e.get("cpu_utilization_percent", {})
    row = {"mode": mode, "label": label, "MBps": bps / 8e6, "senderCpu": cpu.get("host_total"),
           "receiverCpu": cpu.get("remote_total")}
except Exception as ex:
    row = {"mode": mode, "label": label, "MBps": None, "error": str(ex)[:200]}
open(log, "a").write(json.dumps(row) + "\n")
print("" if row["MBps"] is None else "%.1f" % row["MBps"])
PY
)
  last_iperf_mode=$mode
}

results="$scratch/results.jsonl"
: > "$results"
run_one() { # mode manager round
  local mode=$1 manager=$2 k=$3 out="$scratch/run-$1-$2-$3" prof=()
  mkdir -p "$out"
  [ -n "$profiler" ] && prof=(--profiler "$profiler" --profile-dir "$out")
  # the measurement after the previous run brackets this one too when it was of the same mode
  [ "$last_iperf_mode" = "$mode" ] || iperf "$mode" "before $mode-$manager-$k"
  local iperf_before=$last_iperf
  local conf=(--conf spark.shuffle.rdma.provider=tcp --conf spark.driver.host=10.224.0.1
    --conf spark.executor.memory=1g --conf spark.ui.enabled=false "${extra[@]}")
  local rc=0
  # shellcheck disable=SC2086
  ip netns exec fbA env SPARK_LOCAL_IP=10.224.0.1 SPARK_LOCAL_DIRS="$scratch/local-driver" \
    timeout 600 java -Xmx2g $opens -Dspark.driver.bindAddress=10.224.0.1 \
    -cp "$examples_jar:$rdma_jar:$root/examples/target/lib/*:$SPARK_HOME/jars/*" org.rdmashuffle.examples.FetchBoundJob \
    --master $master --executors 2 --jars "$examples_jar,$rdma_jar" --manager "$manager" --mode "$mode" \
    --records "$records" --cold "$cold" --serve-host 10.224.0.1 --result "$out/result.json" "${prof[@]}" "${conf[@]}" \
    > "$out/driver.log" 2>&1 || rc=$?
  iperf "$mode" "after $mode-$manager-$k"
  python3 - "$out/result.json" "$k" "$rc" "$mode" "$manager" "$iperf_before" "$last_iperf" >> "$results" <<'PY'
import json, sys
path, k, rc, mode, manager, before, after = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception:
    r = {"outcome": "failed", "mode": mode, "manager": manager}
r.update({"round": int(k), "exitCode": int(rc), "iperfBeforeMBps": float(before) if before else None,
          "iperfAfterMBps": float(after) if after else None})
print(json.dumps(r))
PY
  log "$mode/$manager round $k: $(tail -1 "$results" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["outcome"], "reduce stage", r.get("reduceStageMs"), "ms, remote", r.get("remoteBytes"), "B")')"
}

for k in $(seq "$rounds"); do
  for mode in $modes; do
    for manager in $managers; do
      run_one "$mode" "$manager" "$k"
    done
  done
  # alternate which manager goes first from round to round
  managers=$(echo "$managers" | awk '{for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "\n")}')
done

python3 "$root/benchmarks/fetch-bound/table.py" "$results" "$iperf_json" | tee "$scratch/results.md"
