#!/usr/bin/env bash
# The MapReduce comparison: TeraSort under Hadoop's HTTP shuffle and under rdma-shuffle (tcp provider),
# alternately. Prints each run and a table of medians with ratios (docs/mapreduce.md explains the columns).
#   examples/run-mapreduce.sh [--rows N] [--maps M] [--reduces R] [--rounds K] [--jfr DIR]
#     one host: a two-NodeManager MiniMRYarnCluster in this process (both NodeManagers run RdmaShuffleHandler
#     as mapreduce_shuffle: Hadoop's HTTP shuffle and READs).
#   examples/run-mapreduce.sh --two-hosts [--rows N] [--maps M] [--reduces R] [--rounds K] [--jfr DIR] [--deadline INSTANT]
#     two hosts (needs root): a ResourceManager and a NodeManager in one network namespace, a NodeManager in
#     another, as separate processes; see examples/mapreduce-two-hosts.sh.
# RDMA_SKIP_BUILD=1 skips the build.
set -euo pipefail
cd "$(dirname "$0")/.."
two_hosts=0
args=()
for a in "$@"; do
  if [ "$a" = --two-hosts ]; then two_hosts=1; else args+=("$a"); fi
done
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  echo "needs a JDK (17+) and Maven; on Debian: apt-get install -y openjdk-17-jdk-headless maven" >&2
  exit 1
fi
module=shuffle-manager/mapreduce
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (mvn install of the MapReduce adapter and what it needs, tests compiled, not run)..."
  mvn -B -ntp -q -DskipTests -pl "$module" -am install
  mvn -B -ntp -q -pl "$module" dependency:build-classpath -Dmdep.includeScope=test \
    -Dmdep.outputFile=target/test-classpath.txt
fi
if [ "$two_hosts" = 1 ]; then
  exec examples/mapreduce-two-hosts.sh ${args[@]+"${args[@]}"}
fi
cd "$module"
# Task JVMs of the mini cluster take this JVM's class path, from their own directories: absolute paths only.
cp="$PWD/target/test-classes:$PWD/target/classes:$(cat target/test-classpath.txt)"
exec java -Xmx3g -cp "$cp" ${RDMA_JAVA_OPTS:-} org.rdmashuffle.mapreduce.bench.MapReduceComparison ${args[@]+"${args[@]}"}
