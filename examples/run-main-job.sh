#!/usr/bin/env bash
# The main job: builds what is missing, then runs TeraSort on an embedded local cluster (two
# executor JVMs) under Spark's sort shuffle and under rdma-shuffle, alternately, and prints the
# comparison. Options go to org.rdmashuffle.examples.ShuffleComparison (--records, --partitions,
# --rounds, --master, --out, --conf k=v). RDMA_SKIP_BUILD=1 skips the build; RDMA_JAVA_OPTS adds JVM
# options (e.g. -Djava.library.path=<dir of libdisni> for provider=verbs with --master local[N]).
# A first argument --spark LINE picks the Spark line (default 4.2_2.13, the examples module; 3.5_2.12:
# examples/lines/3.5_2.12, its jar, SPARK_HOME, lib/ and plugin jar; TPC-DS is not built for 3.5).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
line=4.2_2.13
if [ "${1:-}" = --spark ]; then
  line=${2:?--spark takes a line: 4.2_2.13 or 3.5_2.12}
  shift 2
fi
version=$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' pom.xml | head -1)
line_args=()
case "$line" in
  4.2_2.13)
    module=examples
    examples_jar="$root/examples/target/rdma-shuffle-examples-$version.jar"
    rdma_jar="$root/shuffle-manager/spark/target/rdma-shuffle-spark-4.2_2.13-$version-plugin.jar"
    ;;
  3.5_2.12)
    module=examples/lines/3.5_2.12
    examples_jar="$root/$module/target/rdma-shuffle-examples-3.5_2.12-$version.jar"
    rdma_jar="$root/$module/target/deploy/rdma-shuffle-spark-3.5_2.12-$version-plugin.jar"
    # Before 4.0 an executor builds its shuffle manager before it fetches spark.jars (SPARK-45762): the
    # plugin goes on the executors' own class path too (the driver is this JVM, the jar on its -cp).
    line_args=(--conf "spark.executor.extraClassPath=$rdma_jar" --out "$root/$module/target/comparison")
    ;;
  *)
    echo "unknown Spark line $line: 4.2_2.13 or 3.5_2.12" >&2
    exit 2
    ;;
esac
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  echo "needs a JDK (17+) and Maven; on Debian: apt-get install -y openjdk-17-jdk-headless maven" >&2
  exit 1
fi
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (mvn package, tests skipped)..."
  mvn -B -ntp -q -DskipTests -pl "$module" -am package
fi
lib="$root/$module/target/lib"
export SPARK_HOME="$root/$module/target/spark-home"
export SPARK_SCALA_VERSION=${line#*_}
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
opens="--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
 --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
 --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
 --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
 --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED
 --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/sun.nio.cs=ALL-UNNAMED
 --add-opens=java.base/sun.security.action=ALL-UNNAMED --add-opens=java.base/sun.util.calendar=ALL-UNNAMED
 -Dio.netty.tryReflectionSetAccessible=true"
# shellcheck disable=SC2086
exec java -Xmx2g -Djava.awt.headless=true $opens ${RDMA_JAVA_OPTS:-} \
  -Dspark.driver.host="$SPARK_LOCAL_IP" -Dspark.driver.bindAddress="$SPARK_LOCAL_IP" \
  -cp "$examples_jar:$rdma_jar:$lib/*:$SPARK_HOME/jars/*" \
  "org.rdmashuffle.examples.${RDMA_MAIN_CLASS:-ShuffleComparison}" \
  --jars "$examples_jar,$rdma_jar,$(ls "$lib"/tpcds-*.jar)" ${line_args[@]+"${line_args[@]}"} "$@"
