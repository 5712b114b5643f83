#!/usr/bin/env bash
# Fault harness: a standalone Spark cluster on three "hosts" — network namespaces rfA (10.202.0.1:
# Master, Worker, driver), rfB (.2) and rfC (.3), one Worker each, veths joined by a bridge — runs
# FaultJob (a shuffle whose every record is checked by digest) under Spark's sort shuffle and under
# rdma-shuffle, and injects a fault into host rfC once the reduce stage has done a given fraction of
# its tasks (read from the driver's REST API, never a fixed sleep). Prints and writes a table:
# runs, correct results, failed jobs, job time, stage retries, time from the fault to the job's end.
#
#   benchmarks/faults/run.sh [--faults "none kill stop linkcut corrupt nodefail"] [--runs N] [--managers "sort rdma"]
#                            [--records N] [--at FRACTION] [--stop-seconds S] [--cut-seconds S]
#
# Faults: none (baseline); kill (SIGKILL rfC's executor); stop (SIGSTOP it for --stop-seconds, 60,
# then SIGCONT); linkcut (rfC's veth down for --cut-seconds, 10, then up); corrupt (one byte flipped
# in every partition of one of rfC's committed map outputs, at the start of the reduce stage); nodefail
# (rfC's executor keeps running, but its rdma-shuffle transport loop is stopped: NodeFailureAgent, loaded
# into it with the JDK's attach mechanism, closes the selector its tcp requester waits on — under sort
# shuffle there is no node and nothing fails). The table counts fetch failures that named a host other
# than rfC (a healthy executor blamed).
# Both managers run with the same Spark settings (spark.network.timeout=30s, and for rdma-shuffle
# requestTimeout=30s). Needs root, iproute2, python3. RDMA_SKIP_BUILD=1 skips the build.
# Everything it starts is stopped by PID and the namespaces and bridge are deleted when it ends.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
faults="none kill stop linkcut corrupt nodefail"
managers="sort rdma"
runs=3
records=1500000
at=0.3
stop_s=60
cut_s=10
run_timeout=${FAULTS_RUN_TIMEOUT:-900}
while [ $# -gt 0 ]; do
  case $1 in
    --faults) faults=$2; shift 2 ;;
    --managers) managers=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --at) at=$2; shift 2 ;;
    --stop-seconds) stop_s=$2; shift 2 ;;
    --cut-seconds) cut_s=$2; shift 2 ;;
    *) sed -n '2,17p' "$0" >&2; exit 2 ;;
  esac
done
for f in $faults; do
  case $f in none|kill|stop|linkcut|corrupt|nodefail) ;; *) echo "unknown fault $f" >&2; exit 2 ;; esac
done
if [ "$(id -u)" != 0 ]; then echo "needs root (ip netns)" >&2; exit 1; fi
for tool in ip python3 java mvn jar; do
  command -v $tool >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
ns=(rfA rfB rfC)
ips=(10.202.0.1 10.202.0.2 10.202.0.3)
bridge=rfbr0
for n in "${ns[@]}"; do
  if ip netns list | grep -qw "$n"; then echo "namespace $n exists already; delete it first (ip netns del $n)" >&2; exit 1; fi
done
if ip link show $bridge >/dev/null 2>&1; then echo "bridge $bridge exists already; delete it first" >&2; exit 1; fi

scratch="$root/benchmarks/target/faults"
rm -rf "$scratch"; mkdir -p "$scratch"
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (mvn package, tests skipped)..."
  mvn -B -ntp -q -DskipTests -pl examples -am package
fi
version=$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' pom.xml | head -1)
examples_jar="$root/examples/target/rdma-shuffle-examples-$version.jar"
rdma_jar="$root/shuffle-manager/spark/target/rdma-shuffle-spark-4.2_2.13-$version-plugin.jar"
export SPARK_HOME="$root/examples/target/spark-home" SPARK_SCALA_VERSION=2.13
# The nodefail fault's agent: NodeFailureAgent alone, its manifest naming it as the agent class.
agent_jar="$scratch/node-failure-agent.jar"
printf 'Agent-Class: org.rdmashuffle.examples.NodeFailureAgent\n' > "$scratch/agent-manifest.txt"
jar cfm "$agent_jar" "$scratch/agent-manifest.txt" -C "$root/examples/target/classes" \
  org/rdmashuffle/examples/NodeFailureAgent.class
opens="--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
 --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
 --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
 --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
 --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED
 --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/sun.nio.cs=ALL-UNNAMED
 --add-opens=java.base/sun.security.action=ALL-UNNAMED --add-opens=java.base/sun.util.calendar=ALL-UNNAMED
 -Dio.netty.tryReflectionSetAccessible=true"

pids=()
log() { echo "[faults $(date +%H:%M:%S)] $*"; }
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 2
  for n in "${ns[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
  done
  ip link del $bridge 2>/dev/null
  log "namespaces and bridge deleted; logs in $scratch"
}
trap cleanup EXIT

ip link add $bridge type bridge
ip link set $bridge up
for i in 0 1 2; do
  n=${ns[$i]}
  ip netns add "$n"
  ip link add "veth-$n" type veth peer name "br-$n"
  ip link set "veth-$n" netns "$n"
  ip link set "br-$n" master $bridge
  ip link set "br-$n" up
  ip -n "$n" addr add "${ips[$i]}/24" dev "veth-$n"
  ip -n "$n" link set lo up
  ip -n "$n" link set "veth-$n" up
done
# A bridge may hand frames to the host's iptables; keep it a plain switch.
sysctl -qw net.bridge.bridge-nf-call-iptables=0 2>/dev/null || true
# Reachability over the bridge (bash's /dev/tcp: no ping needed); a refused connect proves the path.
reachable=0
for _ in $(seq 20); do
  said=$(ip netns exec rfA timeout 2 bash -c 'exec 3<>/dev/tcp/10.202.0.3/9' 2>&1 || true)
  if [[ $said == *refused* ]]; then
    reachable=1; break
  fi
  sleep 0.5
done
[ $reachable = 1 ] || { echo "rfA cannot reach rfC over the bridge" >&2; exit 1; }

start() { # namespace, ip, log name, main class, args...
  local n=$1 ip=$2 name=$3; shift 3
  # shellcheck disable=SC2086
  ip netns exec "$n" env SPARK_LOCAL_IP="$ip" SPARK_LOCAL_DIRS="$scratch/local-$n" \
    java -Xmx512m $opens -cp "$SPARK_HOME/jars/*" "$@" > "$scratch/$name.log" 2>&1 &
  pids+=($!)
}
master=spark://10.202.0.1:7077
start rfA 10.202.0.1 master org.apache.spark.deploy.master.Master --host 10.202.0.1 --port 7077 --webui-port 8080
for _ in $(seq 60); do grep -q "I have been elected leader" "$scratch/master.log" 2>/dev/null && break; sleep 1; done
for i in 0 1 2; do
  start "${ns[$i]}" "${ips[$i]}" "worker-${ns[$i]}" org.apache.spark.deploy.worker.Worker --host "${ips[$i]}" \
    --cores 1 --memory 1536m --work-dir "$scratch/work-${ns[$i]}" --webui-port 8081 $master
done
for _ in $(seq 60); do
  [ "$(grep -l "Successfully registered with master" "$scratch"/worker-*.log 2>/dev/null | wc -l)" = 3 ] && break; sleep 1
done
log "cluster up: master $master, workers on ${ips[*]}"

# The driver's REST API, from inside rfA: fraction of the newest active stage's tasks that are done,
# when that stage reads shuffle data (the reduce stage); empty when there is none yet.
reduce_progress() {
  ip netns exec rfA python3 -c '
import json, sys, urllib.request
try:
    apps = json.load(urllib.request.urlopen("http://10.202.0.1:4040/api/v1/applications", timeout=2))
    app = apps[0]["id"]
    stages = json.load(urllib.request.urlopen("http://10.202.0.1:4040/api/v1/applications/%s/stages?status=active" % app, timeout=2))
    best = None
    for s in stages:
        if s.get("shuffleReadBytes", 0) > 0 or s.get("shuffleReadRecords", 0) > 0 or "reduce" in s.get("name", ""):
            frac = s["numCompleteTasks"] / max(1, s["numTasks"])
            best = frac if best is None else max(best, frac)
    print("" if best is None else "%.3f" % best)
except Exception:
    print("")
' 2>/dev/null || true
}

executor_pid() { # the executor JVM in namespace $1
  local p
  for p in $(ip netns pids "$1"); do
    if tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q CoarseGrainedExecutorBackend; then echo "$p"; return; fi
  done
}

corrupt_outputs() { # flips one byte in every partition of one committed map output under $1
  python3 - "$1" <<'PY'
import os, struct, sys
best = None
for d, _, files in os.walk(sys.argv[1]):
    for f in files:
        if f.startswith("shuffle_") and f.endswith(".data") and os.path.getsize(os.path.join(d, f)) > 0:
            best = best or (d, f)
if not best:
    print("no map output found"); sys.exit(0)
name = best[1]
idx = None
for d, _, files in os.walk(sys.argv[1]):
    if name[:-5] + ".index" in files:
        idx = os.path.join(d, name[:-5] + ".index")
offs = []
with open(idx, "rb") as fh:
    raw = fh.read()
    offs = [struct.unpack(">q", raw[i:i + 8])[0] for i in range(0, len(raw), 8)]
n = 0
with open(os.path.join(*best), "r+b") as fh:
    for a, b in zip(offs, offs[1:]):
        if b - a > 64:
            fh.seek(a + (b - a) // 2); c = fh.read(1); fh.seek(a + (b - a) // 2)
            fh.write(bytes([c[0] ^ 0x5A])); n += 1
    fh.flush(); os.fsync(fh.fileno())
print("flipped %d bytes in %s" % (n, name))
PY
}

results="$scratch/results.jsonl"
: > "$results"
run_one() { # fault manager index
  local fault=$1 manager=$2 k=$3 out="$scratch/run-$1-$2-$3"
  mkdir -p "$out"
  local conf=(--conf spark.network.timeout=30s --conf spark.network.timeoutInterval=10s
    --conf spark.executor.heartbeatInterval=5s
    --conf spark.shuffle.rdma.requestTimeout=30s --conf spark.shuffle.rdma.provider=tcp
    --conf spark.task.maxFailures=4 --conf spark.stage.maxConsecutiveAttempts=8
    --conf spark.driver.host=10.202.0.1 --conf spark.executor.memory=1g --conf spark.ui.enabled=true)
  # shellcheck disable=SC2086
  ip netns exec rfA env SPARK_LOCAL_IP=10.202.0.1 SPARK_LOCAL_DIRS="$scratch/local-driver" \
    timeout "$run_timeout" java -Xmx2g $opens -Dspark.driver.bindAddress=10.202.0.1 \
    -cp "$examples_jar:$rdma_jar:$root/examples/target/lib/*:$SPARK_HOME/jars/*" org.rdmashuffle.examples.FaultJob \
    --master $master --executors 3 --jars "$examples_jar,$rdma_jar" --manager "$manager" --records "$records" \
    --result "$out/result.json" "${conf[@]}" > "$out/driver.log" 2>&1 &
  local driver=$!
  local injected=0 what="-"
  if [ "$fault" != none ]; then
    local want=$at
    [ "$fault" = corrupt ] && want=0
    while kill -0 $driver 2>/dev/null; do
      local p; p=$(reduce_progress || true)
      if [ -n "$p" ] && python3 -c "import sys; sys.exit(0 if float('$p') >= $want else 1)"; then break; fi
      sleep 0.2
    done
    if kill -0 $driver 2>/dev/null; then
      injected=$(date +%s%3N)
      case $fault in
        kill) local e; e=$(executor_pid rfC || true); what="SIGKILL executor $e"; [ -n "$e" ] && kill -9 "$e" ;;
        stop) local e; e=$(executor_pid rfC || true); what="SIGSTOP executor $e for ${stop_s}s"
              if [ -n "$e" ]; then kill -STOP "$e"; sleep "$stop_s"; kill -CONT "$e" 2>/dev/null || true; fi ;;
        linkcut) what="veth-rfC down ${cut_s}s"; ip -n rfC link set veth-rfC down; sleep "$cut_s"
                 ip -n rfC link set veth-rfC up ;;
        corrupt) what=$(corrupt_outputs "$scratch/local-rfC") ;;
        nodefail) local e; e=$(executor_pid rfC || true); what="transport loop of executor $e stopped"
                  if [ -n "$e" ]; then
                    java -cp "$examples_jar" org.rdmashuffle.examples.NodeFailureAgent "$e" "$agent_jar" \
                      >> "$out/agent.log" 2>&1 || what="attaching to executor $e failed (see agent.log)"
                  fi ;;
      esac
    else
      what="job ended before the reduce stage reached $want"
    fi
  fi
  local rc=0
  wait $driver || rc=$?
  python3 - "$out/result.json" "$fault" "$k" "$injected" "$what" "$rc" >> "$results" <<'PY'
import json, sys
path, fault, k, injected, what, rc = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception:
    r = {"manager": "?", "outcome": "failed" if rc != "124" else "timeout", "jobMs": 0, "endEpochMs": 0,
         "stageRetries": 0, "fetchFailures": 0, "executorsLost": 0}
r.update({"fault": fault, "run": int(k), "injectedEpochMs": int(injected), "injected": what, "exitCode": int(rc)})
print(json.dumps(r))
PY
  log "$fault/$manager run $k: $(tail -1 "$results" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r["outcome"], "job", r["jobMs"]/1000, "s, stage retries", r["stageRetries"], ", fault:", r["injected"])')"
}

for fault in $faults; do
  for k in $(seq "$runs"); do
    for manager in $managers; do
      run_one "$fault" "$manager" "$k"
    done
  done
done

python3 "$root/benchmarks/faults/table.py" "$results" "$scratch/results.md"
