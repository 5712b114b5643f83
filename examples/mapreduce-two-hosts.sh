#!/usr/bin/env bash
# The two-host MapReduce comparison, run by `examples/run-mapreduce.sh --two-hosts [options]` after its build
# (options: --rows N --maps M --reduces R --rounds K --jfr DIR --deadline INSTANT, passed to TwoHostComparison).
#
# Two "hosts" on one machine: network namespaces ${RDMA_TWO_HOSTS_NAME:-mrh}A and ...B joined by a veth pair
# (10.201.0.1 and 10.201.0.2), each with a host name of its own (a UTS namespace and /etc/netns/<ns>/hosts, so
# every daemon, container and client resolves mrhA and mrhB to those addresses). Real YARN daemons, each a plain
# `java -cp <the MapReduce module's test class path>` process: a ResourceManager and a NodeManager in host A, a
# NodeManager in host B. Each NodeManager runs org.rdmashuffle.mapreduce.RdmaShuffleHandler as mapreduce_shuffle
# (Hadoop's HTTP shuffle on port 13562 and READs on mapreduce.shuffle.rdma.port, provider tcp, bound to its host's
# address) with its own local and log dirs. Both namespaces share the file system: fs.defaultFS is file:/// and the
# work directory (input, outputs, staging, job history) is one directory. The job client, TwoHostComparison, runs
# in host A and reads each NodeManager's CPU from /proc.
#
# Needs root (ip netns, unshare). Everything it creates goes at exit: processes (by pid), namespaces, veth pair,
# /etc/netns/<ns>. Environment: RDMA_TWO_HOSTS_DIR (scratch, default shuffle-manager/mapreduce/target/two-hosts),
# RDMA_TWO_HOSTS_NAME (namespace prefix, mrh), RDMA_TWO_HOSTS_NET (first three octets, 10.201.0),
# RDMA_NM_JAVA_OPTS (added to both NodeManagers' JVM options, e.g. a JFR recording), JAVA_HOME.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "--two-hosts needs root: it creates network namespaces (ip netns) and UTS namespaces (unshare)" >&2
  exit 1
fi
for c in ip unshare getconf; do
  command -v "$c" >/dev/null || { echo "--two-hosts needs $c (iproute2, util-linux)" >&2; exit 1; }
done
mdir=$PWD/shuffle-manager/mapreduce
if [ ! -f "$mdir/target/test-classpath.txt" ] || [ ! -d "$mdir/target/test-classes" ]; then
  echo "no build under $mdir/target: run examples/run-mapreduce.sh without RDMA_SKIP_BUILD=1 once" >&2
  exit 1
fi
cp="$mdir/target/test-classes:$mdir/target/classes:$(cat "$mdir/target/test-classpath.txt")"
JAVA_HOME=${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")}
export JAVA_HOME
java="$JAVA_HOME/bin/java"
ns=${RDMA_TWO_HOSTS_NAME:-mrh}
net=${RDMA_TWO_HOSTS_NET:-10.201.0}
D=${RDMA_TWO_HOSTS_DIR:-$mdir/target/two-hosts}
rdma_port=13570
nm_mb=3072        # per NodeManager: an AM (512) and 4 maps (640), or 2 reduces (1280) beside the AM
opens="-XX:+IgnoreUnrecognizedVMOptions --add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED"

for h in A B; do
  if ip netns list | grep -q "^$ns$h\b"; then
    echo "network namespace $ns$h exists already (another run, or one that was killed): ip netns del $ns$h" >&2
    exit 1
  fi
done

pids=()
cleanup() {
  set +e
  local p i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[$i]}" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for i in $(seq 1 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$p" 2>/dev/null
  done
  for h in A B; do # containers a NodeManager left behind (it kills its own on a clean stop)
    for p in $(ip netns pids "$ns$h" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$ns$h" 2>/dev/null
    rm -rf "/etc/netns/$ns$h"
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The hosts: two namespaces, a veth pair, a name each.
for h in A B; do
  ip netns add "$ns$h"
  mkdir -p "/etc/netns/$ns$h"
  printf '127.0.0.1 localhost\n%s.1 %sA\n%s.2 %sB\n' "$net" "$ns" "$net" "$ns" > "/etc/netns/$ns$h/hosts"
done
ip link add "${ns}vA" type veth peer name "${ns}vB"
ip link set "${ns}vA" netns "${ns}A"
ip link set "${ns}vB" netns "${ns}B"
ip -n "${ns}A" addr add "$net.1/24" dev "${ns}vA"
ip -n "${ns}B" addr add "$net.2/24" dev "${ns}vB"
for h in A B; do
  ip -n "$ns$h" link set lo up
  ip -n "$ns$h" link set "${ns}v$h" up
done
addr() { [ "$1" = A ] && echo "$net.1" || echo "$net.2"; }

# Configuration: one directory per process, first on its class path.
rm -rf "$D"/conf-* "$D/nmA" "$D/nmB" "$D/staging" # the input under work/ stays for the next run
mkdir -p "$D/work" "$D/staging"
site() { # file key=value...
  local f=$1 kv
  shift
  {
    echo '<?xml version="1.0"?>'
    echo '<configuration>'
    for kv in "$@"; do
      printf '  <property><name>%s</name><value>%s</value></property>\n' "${kv%%=*}" "${kv#*=}"
    done
    echo '</configuration>'
  } > "$f"
}
conf_dir() { # name, then extra yarn-site settings
  local c="$D/conf-$1"
  shift
  mkdir -p "$c"
  site "$c/core-site.xml" fs.defaultFS=file:/// "hadoop.tmp.dir=$c/tmp"
  site "$c/yarn-site.xml" \
    "yarn.resourcemanager.hostname=$net.1" \
    yarn.resourcemanager.scheduler.class=org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler \
    yarn.resourcemanager.nodemanagers.heartbeat-interval-ms=100 \
    yarn.scheduler.minimum-allocation-mb=128 "yarn.scheduler.maximum-allocation-mb=$nm_mb" \
    "yarn.nodemanager.resource.memory-mb=$nm_mb" yarn.nodemanager.resource.cpu-vcores=8 \
    yarn.nodemanager.pmem-check-enabled=false yarn.nodemanager.vmem-check-enabled=false \
    yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage=99 \
    yarn.nodemanager.aux-services=mapreduce_shuffle \
    yarn.nodemanager.aux-services.mapreduce_shuffle.class=org.rdmashuffle.mapreduce.RdmaShuffleHandler \
    "yarn.application.classpath=$cp" "$@"
  site "$c/mapred-site.xml" \
    mapreduce.framework.name=yarn "yarn.app.mapreduce.am.staging-dir=$D/staging" \
    "mapreduce.application.classpath=$cp" \
    yarn.app.mapreduce.am.resource.mb=512 "yarn.app.mapreduce.am.command-opts=-Xmx384m -XX:+UseSerialGC" \
    mapreduce.map.memory.mb=640 "mapreduce.map.java.opts=-Xmx448m -XX:+UseSerialGC" mapreduce.task.io.sort.mb=240 \
    mapreduce.reduce.memory.mb=1280 "mapreduce.reduce.java.opts=-Xmx1024m -XX:+UseSerialGC" \
    mapreduce.map.output.compress=false mapreduce.job.reduce.slowstart.completedmaps=1.0 \
    mapreduce.map.speculative=false mapreduce.reduce.speculative=false \
    mapreduce.am.max-attempts=1 yarn.resourcemanager.am.max-attempts=1 \
    yarn.app.mapreduce.am.scheduler.heartbeat.interval-ms=100 \
    mapreduce.client.progressmonitor.pollinterval=100 mapreduce.client.completion.pollinterval=100
  cat > "$c/log4j.properties" <<'EOF'
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d{HH:mm:ss.SSS} %-5p [%t] %c{1}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.hadoop.yarn.server.nodemanager.containermanager.monitor=WARN
EOF
}
conf_dir rm
for h in A B; do
  conf_dir "nm$h" "yarn.nodemanager.hostname=$ns$h" \
    "yarn.nodemanager.local-dirs=$D/nm$h/local" "yarn.nodemanager.log-dirs=$D/nm$h/logs" \
    mapreduce.shuffle.port=13562 "mapreduce.shuffle.rdma.port=$rdma_port" mapreduce.shuffle.rdma.provider=tcp \
    "mapreduce.shuffle.rdma.bindAddress=$(addr $h)"
done
conf_dir client
sed -i 's/^log4j.rootLogger=INFO/log4j.rootLogger=WARN/' "$D/conf-client/log4j.properties"

# run_in HOST NAME CLASS JAVA_OPTS...: a process in that host (namespace, host name), its pid in pids and $last.
run_in() {
  local h=$1 name=$2 class=$3
  shift 3
  ip netns exec "$ns$h" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns$h" \
    "$java" $opens "$@" -cp "$D/conf-$name:$cp" "$class" > "$D/$name.log" 2>&1 &
  last=$!
  pids+=("$last")
}
run_in A rm org.apache.hadoop.yarn.server.resourcemanager.ResourceManager -Xmx512m
for h in A B; do
  # shellcheck disable=SC2086
  run_in "$h" "nm$h" org.apache.hadoop.yarn.server.nodemanager.NodeManager -Xmx768m ${RDMA_NM_JAVA_OPTS:-}
  eval "nm_pid_$h=$last"
done
echo "two hosts: $ns""A ($net.1: ResourceManager pid ${pids[0]}, NodeManager pid $nm_pid_A) and $ns""B ($net.2:" \
  "NodeManager pid $nm_pid_B); logs under $D"

ip netns exec "${ns}A" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${ns}A" \
  "$java" -Xmx1g ${RDMA_JAVA_OPTS:-} -cp "$D/conf-client:$cp" org.rdmashuffle.mapreduce.bench.TwoHostComparison \
  --work "$D/work" --nm "A=$nm_pid_A" --nm "B=$nm_pid_B" --rdma-port "$rdma_port" \
  --clock-ticks "$(getconf CLK_TCK)" "$@"
