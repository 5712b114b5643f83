#!/usr/bin/env bash
# Standalone deploy check (issue 12): rdma-shuffle submitted with Spark's own spark-submit to a
# standalone Master in *cluster* deploy mode, so the driver runs on a Worker, not in the submitting
# process; client deploy mode is run too, for comparison.
#
# Three "hosts" — network namespaces saA (10.213.0.1: Master, Worker, where spark-submit runs), saB
# (.2) and saC (.3), one Worker each (2 cores, 3 GiB), veths joined by the bridge sabr0. The Workers'
# classpath is Spark's jars only; rdma-shuffle reaches the driver and the executors only through
# --jars (the shaded shuffle-manager/spark/target/rdma-shuffle-spark-4.2_2.13-<version>-plugin.jar). Submission is
# the legacy (RPC) one: spark.master.rest.enabled stays false, spark-submit talks to spark://…:7077.
#
# For each deploy mode it submits org.rdmashuffle.examples.SubmitCheckJob (a partitionBy of
# deterministic records checked by digest, then a SQL join + aggregation + ORDER BY) once with Spark's
# sort shuffle and once with spark.shuffle.manager=org.rdmashuffle.shuffle.RdmaShuffleManager and
# spark.shuffle.rdma.provider=tcp, waits for the driver's end on the Master's JSON (cluster mode) or
# for spark-submit (client mode), and checks:
#   - the application finished (cluster: the Master records the driver FINISHED, and the driver ran
#     under org.apache.spark.deploy.worker.DriverWrapper on a Worker);
#   - the RDD job's records arrived intact (digest against the driver's own, no shuffle);
#   - rdma results equal sort results: every reduce partition's digest, and the SQL result's SHA-256;
#   - two executors, on two different hosts;
#   - with rdma-shuffle: its manager class on the driver and every executor, and READs completed > 0
#     summed over the executors, after the RDD job and more after the SQL job.
# Prints a table and PASS/FAIL; exit code 0 only when every check passed.
#
#   benchmarks/deploy/standalone-cluster.sh [--modes "cluster client"] [--records N] [--sql-rows N]
#
# Needs root, iproute2, python3, a JDK 17 and Maven (RDMA_SKIP_BUILD=1 skips the build). spark-submit
# is $SPARK_SUBMIT if set (e.g. a Spark 4.2 distribution's bin/spark-submit), else the same command
# that bin/spark-submit runs (org.apache.spark.launcher.Main building the SparkSubmit command line)
# over the SPARK_HOME the build assembles (examples/target/spark-home, Spark's jars only).
# Everything it starts is stopped by PID; the namespaces and the bridge are deleted when it ends,
# also when it fails. Logs, results and the Workers' driver/executor dirs: benchmarks/target/deploy-standalone.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
modes="cluster client"
records=1000000
sql_rows=1000000
run_timeout=${DEPLOY_RUN_TIMEOUT:-600}
while [ $# -gt 0 ]; do
  case $1 in
    --modes) modes=$2; shift 2 ;;
    --records) records=$2; shift 2 ;;
    --sql-rows) sql_rows=$2; shift 2 ;;
    *) sed -n '2,33p' "$0" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" != 0 ]; then echo "needs root (ip netns)" >&2; exit 1; fi
for tool in ip python3 java; do
  command -v $tool >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
ns=(saA saB saC)
ips=(10.213.0.1 10.213.0.2 10.213.0.3)
bridge=sabr0
for n in "${ns[@]}"; do
  if ip netns list | grep -qw "$n"; then echo "namespace $n exists already; delete it first (ip netns del $n)" >&2; exit 1; fi
done
if ip link show $bridge >/dev/null 2>&1; then echo "bridge $bridge exists already; delete it first" >&2; exit 1; fi

scratch="$root/benchmarks/target/deploy-standalone"
rm -rf "$scratch"; mkdir -p "$scratch"
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (mvn package, tests skipped)..."
  mvn -B -ntp -q -DskipTests -pl examples -am package
fi
version=$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' pom.xml | head -1)
app_jar="$root/examples/target/rdma-shuffle-examples-$version.jar"
rdma_jar="$root/shuffle-manager/spark/target/rdma-shuffle-spark-4.2_2.13-$version-plugin.jar"
export SPARK_HOME="${SPARK_HOME:-$root/examples/target/spark-home}" SPARK_SCALA_VERSION=2.13
for f in "$app_jar" "$rdma_jar" "$SPARK_HOME/jars"; do
  [ -e "$f" ] || { echo "missing $f (build first)" >&2; exit 1; }
done
# The point of the check: the plugin is not on the Workers' (nor the driver's) classpath.
if ls "$SPARK_HOME/jars" | grep -qi rdma; then echo "$SPARK_HOME/jars holds an rdma-shuffle jar; this check needs it absent" >&2; exit 1; fi
if unzip -l "$app_jar" | grep -q 'org/rdmashuffle/shuffle/'; then echo "$app_jar holds the shuffle manager itself" >&2; exit 1; fi
opens="--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
 --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
 --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
 --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
 --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED
 --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/sun.nio.cs=ALL-UNNAMED
 --add-opens=java.base/sun.security.action=ALL-UNNAMED --add-opens=java.base/sun.util.calendar=ALL-UNNAMED
 -Dio.netty.tryReflectionSetAccessible=true"

pids=()
log() { echo "[deploy $(date +%H:%M:%S)] $*"; }
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 2
  for n in "${ns[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
  done
  ip link del $bridge 2>/dev/null
  log "processes stopped, namespaces and bridge deleted; logs in $scratch"
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
sysctl -qw net.bridge.bridge-nf-call-iptables=0 2>/dev/null || true
reachable=0
for _ in $(seq 20); do
  said=$(ip netns exec saA timeout 2 bash -c "exec 3<>/dev/tcp/${ips[2]}/9" 2>&1 || true)
  if [[ $said == *refused* ]]; then reachable=1; break; fi
  sleep 0.5
done
[ $reachable = 1 ] || { echo "saA cannot reach saC over the bridge" >&2; exit 1; }

start() { # namespace, ip, log name, main class, args...
  local n=$1 ip=$2 name=$3; shift 3
  # shellcheck disable=SC2086
  ip netns exec "$n" env SPARK_LOCAL_IP="$ip" SPARK_LOCAL_DIRS="$scratch/local-$n" \
    java -Xmx512m $opens -cp "$SPARK_HOME/jars/*" "$@" > "$scratch/$name.log" 2>&1 &
  pids+=($!)
}
master=spark://${ips[0]}:7077
master_json=http://${ips[0]}:8080/json
start saA "${ips[0]}" master org.apache.spark.deploy.master.Master --host "${ips[0]}" --port 7077 --webui-port 8080
for _ in $(seq 60); do grep -q "I have been elected leader" "$scratch/master.log" 2>/dev/null && break; sleep 1; done
for i in 0 1 2; do
  start "${ns[$i]}" "${ips[$i]}" "worker-${ns[$i]}" org.apache.spark.deploy.worker.Worker --host "${ips[$i]}" \
    --cores 2 --memory 3g --work-dir "$scratch/work-${ns[$i]}" --webui-port 8081 $master
done
for _ in $(seq 60); do
  [ "$(grep -l "Successfully registered with master" "$scratch"/worker-*.log 2>/dev/null | wc -l)" = 3 ] && break; sleep 1
done
[ "$(grep -l "Successfully registered with master" "$scratch"/worker-*.log 2>/dev/null | wc -l)" = 3 ] \
  || { echo "workers did not register; see $scratch/worker-*.log" >&2; exit 1; }
log "cluster up: master $master, workers on ${ips[*]} (classpath: $SPARK_HOME/jars/* only)"

# spark-submit: a distribution's script if given, else what bin/spark-class does — launcher.Main prints
# the SparkSubmit command (JVM options, --add-opens, classpath) after a NUL line, NUL-separated.
spark_submit() {
  if [ -n "${SPARK_SUBMIT:-}" ]; then "$SPARK_SUBMIT" "$@"; return; fi
  local cmd=() a started=0
  while IFS= read -r -d '' a; do
    if [ $started = 0 ]; then [ -z "$a" ] && started=1; continue; fi
    cmd+=("${a#$'\n'}")
  done < <(java -Xmx128m -cp "$SPARK_HOME/jars/*" org.apache.spark.launcher.Main org.apache.spark.deploy.SparkSubmit "$@")
  [ ${#cmd[@]} -gt 0 ] || { echo "launcher built no command" >&2; return 1; }
  "${cmd[@]}"
}

# What every submission shares, as a user would keep it in spark-defaults.conf.
cat > "$scratch/spark-defaults.conf" <<EOF
spark.executor.cores              1
spark.cores.max                   2
spark.executor.memory             1g
spark.driver.memory               1g
spark.shuffle.rdma.provider       tcp
spark.standalone.submit.waitAppCompletion true
EOF

master_driver() { # driver id -> "state worker" from the Master's JSON
  ip netns exec saA python3 - "$master_json" "$1" <<'PY' 2>/dev/null || true
import json, sys, urllib.request
m = json.load(urllib.request.urlopen(sys.argv[1], timeout=3))
for d in m.get("activedrivers", []) + m.get("completeddrivers", []):
    if d.get("id") == sys.argv[2]:
        print(d.get("state", "?"), d.get("worker", "?"))
PY
}

summary="$scratch/summary.jsonl"
: > "$summary"
run_one() { # mode manager
  local mode=$1 manager=$2 out="$scratch/$1-$2"
  mkdir -p "$out"
  local result="$out/result.json"
  local conf=(--properties-file "$scratch/spark-defaults.conf")
  [ "$manager" = rdma ] && conf+=(--conf spark.shuffle.manager=org.rdmashuffle.shuffle.RdmaShuffleManager)
  [ "$mode" = client ] && conf+=(--conf spark.driver.host="${ips[0]}" --conf spark.driver.bindAddress="${ips[0]}")
  local t0; t0=$(date +%s%3N)
  # In cluster mode the submitter's whole environment becomes the driver's (Spark's Client puts
  # sys.env into the DriverDescription; the Worker applies it over its own): a SPARK_LOCAL_IP here
  # would make a driver on another host bind to this host's address and fail. So it is set only
  # for client mode (DEPLOY_LEAK_LOCAL_IP=1 sets it for cluster mode too, to show the failure).
  local local_ip=(-u SPARK_LOCAL_IP)
  if [ "$mode" = client ] || [ "${DEPLOY_LEAK_LOCAL_IP:-0}" = 1 ]; then local_ip=(SPARK_LOCAL_IP="${ips[0]}"); fi
  ip netns exec saA env "${local_ip[@]}" SPARK_LOCAL_DIRS="$scratch/local-submit" SPARK_HOME="$SPARK_HOME" \
    timeout "$run_timeout" bash -c "$(declare -f spark_submit); spark_submit \"\$@\"" spark-submit \
    --master "$master" --deploy-mode "$mode" --name "submit-check-$mode-$manager" \
    --class org.rdmashuffle.examples.SubmitCheckJob --jars "$rdma_jar" "${conf[@]}" \
    "$app_jar" "$result" "$records" 2 "$sql_rows" > "$out/spark-submit.log" 2>&1 &
  local submit=$! rc=0 driver="" state="" worker=""
  if [ "$mode" = cluster ]; then
    local deadline=$(( $(date +%s) + run_timeout ))
    while [ "$(date +%s)" -lt $deadline ]; do
      [ -z "$driver" ] && driver=$(grep -o 'driver-[0-9]*-[0-9]*' "$out/spark-submit.log" 2>/dev/null | head -1 || true)
      if [ -n "$driver" ]; then
        read -r state worker <<< "$(master_driver "$driver")" || true
        case $state in FINISHED|FAILED|ERROR|KILLED) break ;; esac
      fi
      sleep 2
    done
    # spark-submit waits for the driver too (waitAppCompletion); give it time to see the end itself
    for _ in $(seq 30); do kill -0 $submit 2>/dev/null || break; sleep 0.5; done
    kill $submit 2>/dev/null || true
  fi
  wait $submit || rc=$?
  local t1; t1=$(date +%s%3N)
  # the driver's own log, from the Worker's work dir
  [ -n "$driver" ] && cp "$scratch"/work-sa?/"$driver"/stderr "$out/driver-stderr.log" 2>/dev/null || true
  python3 - "$result" "$mode" "$manager" "$rc" "$driver" "$state" "$worker" "$((t1 - t0))" >> "$summary" <<'PY'
import json, sys
path, mode, manager, rc, driver, state, worker, ms = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as e:
    r = {"error": "no result file: %s" % e}
r.update({"mode": mode, "run": manager, "submitExit": int(rc), "driverId": driver, "driverState": state,
          "driverWorker": worker, "wallMs": int(ms)})
print(json.dumps(r))
PY
  log "$mode/$manager: wall $(( (t1 - t0) / 1000 )) s, spark-submit exit $rc${driver:+, $driver $state on $worker}"
}

for mode in $modes; do
  for manager in sort rdma; do
    run_one "$mode" "$manager"
  done
done

python3 - "$summary" "$scratch/summary.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["mode"], r["run"]): r for r in rows}
checks = []
def check(name, ok, detail=""):
    checks.append((name, bool(ok), detail))
for r in rows:
    tag = "%s/%s" % (r["mode"], r["run"])
    if "error" in r:
        check(tag + " result", False, r["error"])
        continue
    if r["mode"] == "cluster":
        check(tag + " driver FINISHED on a Worker (Master JSON)", r["driverState"] == "FINISHED", "%s %s" % (r["driverState"], r["driverWorker"]))
        check(tag + " driver ran in DriverWrapper", r["driver"]["mainClass"] == "org.apache.spark.deploy.worker.DriverWrapper", r["driver"]["mainClass"])
    else:
        check(tag + " spark-submit exit 0", r["submitExit"] == 0, str(r["submitExit"]))
        check(tag + " driver in SparkSubmit", r["driver"]["mainClass"] == "org.apache.spark.deploy.SparkSubmit", r["driver"]["mainClass"])
    check(tag + " RDD records intact", r["rdd"]["ok"], r["rdd"]["got"])
    hosts = sorted({e["host"] for e in r["executors"]})
    check(tag + " 2 executors on 2 hosts", len(r["executors"]) == 2 and len(hosts) == 2, "%d executors on %s" % (len(r["executors"]), hosts))
    if r["run"] == "rdma":
        want = "org.rdmashuffle.shuffle.RdmaShuffleManager"
        check(tag + " rdma manager on driver", r["driver"]["managerClass"] == want, r["driver"]["managerClass"] + " from " + r["driver"]["managerJar"])
        check(tag + " rdma manager on every executor", all(e["managerClass"] == want and e["rdmaStats"] for e in r["executors"]),
              ", ".join("%s:%s" % (e["id"], e["managerClass"].split(".")[-1]) for e in r["executors"]))
        rdd_reads = sum(e["readsCompleted"] for e in r["executorsAfterRdd"])
        all_reads = sum(e["readsCompleted"] for e in r["executors"])
        check(tag + " READs > 0 after the RDD job", rdd_reads > 0, str(rdd_reads))
        check(tag + " more READs after the SQL job", all_reads > rdd_reads, "%d -> %d" % (rdd_reads, all_reads))
        s = by.get((r["mode"], "sort"))
        if s and "error" not in s:
            check(tag + " RDD partitions equal sort's", r["rdd"]["partitions"] == s["rdd"]["partitions"], "%d partitions" % len(r["rdd"]["partitions"]))
            check(tag + " SQL result equals sort's", r["sql"]["sha256"] == s["sql"]["sha256"], "%d rows sha256 %s" % (r["sql"]["rows"], r["sql"]["sha256"][:16]))
        else:
            check(tag + " compared with sort", False, "no sort result")
lines = ["| run | wall s | RDD job s | SQL job s | driver | executors (host: READs) |", "|---|---|---|---|---|---|"]
for r in rows:
    if "error" in r:
        lines.append("| %s/%s | %.1f | - | - | %s | %s |" % (r["mode"], r["run"], r["wallMs"] / 1000, r.get("driverState", ""), r["error"]))
        continue
    ex = ", ".join("%s: %d" % (e["host"], e["readsCompleted"]) for e in r["executors"])
    lines.append("| %s/%s | %.1f | %.1f | %.1f | %s %s | %s |" % (r["mode"], r["run"], r["wallMs"] / 1000, r["rdd"]["ms"] / 1000,
                 r["sql"]["ms"] / 1000, r["driver"]["host"], r["driver"]["mainClass"].split(".")[-1], ex))
lines.append("")
for name, ok, detail in checks:
    lines.append("- %s %s: %s" % ("PASS" if ok else "FAIL", name, detail))
passed = all(ok for _, ok, _ in checks) and len(checks) > 0
lines.append("")
lines.append("RESULT: %s (%d/%d checks)" % ("PASS" if passed else "FAIL", sum(ok for _, ok, _ in checks), len(checks)))
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if passed else 1)
PY
