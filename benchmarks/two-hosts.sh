#!/usr/bin/env bash
# TeraSort under Spark's sort shuffle and rdma-shuffle on two "hosts": network namespaces rsA
# (10.201.0.1: standalone Master, Worker, driver) and rsB (10.201.0.2: Worker) joined by a veth
# pair, so shuffle blocks cross a real network link. Every process it starts is stopped by PID and
# both namespaces are deleted when it ends, also when the run fails. Needs root and iproute2.
# Options go to the comparison (e.g. --records 2000000 --rounds 3); results in
# benchmarks/target/two-hosts/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scratch="$root/benchmarks/target/two-hosts"
nsA=rsA nsB=rsB ipA=10.201.0.1 ipB=10.201.0.2
pids=()

cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 3
  for ns in $nsA $nsB; do
    for p in $(ip netns pids $ns 2>/dev/null); do
      echo "stopping leftover process $p in $ns"; kill -9 "$p" 2>/dev/null
    done
    ip netns del $ns 2>/dev/null
  done
  echo "namespaces deleted; logs in $scratch"
}

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "needs root and iproute2 (ip netns)" >&2; exit 1
fi
for ns in $nsA $nsB; do
  if ip netns list | grep -qw $ns; then echo "namespace $ns exists already; delete it first (ip netns del $ns)" >&2; exit 1; fi
done
echo "building (mvn package, tests skipped)..."
mvn -B -ntp -q -DskipTests -pl examples -am package
mkdir -p "$scratch"
trap cleanup EXIT

ip netns add $nsA
ip netns add $nsB
ip link add veth-$nsA type veth peer name veth-$nsB
ip link set veth-$nsA netns $nsA
ip link set veth-$nsB netns $nsB
ip -n $nsA addr add $ipA/24 dev veth-$nsA
ip -n $nsB addr add $ipB/24 dev veth-$nsB
for ns in $nsA $nsB; do
  ip -n $ns link set lo up
  ip -n $ns link set veth-$ns up
done

export SPARK_HOME="$root/examples/target/spark-home" SPARK_SCALA_VERSION=2.13
opens="--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
 --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.util=ALL-UNNAMED
 --add-opens=java.base/java.lang.invoke=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED"
start() { # namespace, ip, log name, main class, args...
  local ns=$1 ip=$2 log=$3; shift 3
  # shellcheck disable=SC2086
  ip netns exec "$ns" env SPARK_LOCAL_IP="$ip" SPARK_LOCAL_DIRS="$scratch/local-$log" \
    java -Xmx512m $opens -cp "$SPARK_HOME/jars/*" "$@" > "$scratch/$log.log" 2>&1 &
  pids+=($!)
}
start $nsA $ipA master org.apache.spark.deploy.master.Master --host $ipA --port 7077 --webui-port 8080
sleep 5
start $nsA $ipA workerA org.apache.spark.deploy.worker.Worker --host $ipA --cores 1 --memory 1536m \
  --work-dir "$scratch/work-A" --webui-port 8081 spark://$ipA:7077
start $nsB $ipB workerB org.apache.spark.deploy.worker.Worker --host $ipB --cores 1 --memory 1536m \
  --work-dir "$scratch/work-B" --webui-port 8081 spark://$ipA:7077

ip netns exec $nsA env SPARK_LOCAL_IP=$ipA RDMA_SKIP_BUILD=1 examples/run-main-job.sh \
  --master spark://$ipA:7077 --executors 2 --out "$scratch" "$@"
