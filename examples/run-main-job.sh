#!/usr/bin/env bash
# The main job: builds what is missing, then runs TeraSort on an embedded local cluster (two
# executor JVMs) under Spark's sort shuffle and under rdma-shuffle, alternately, and prints the
# comparison. Options go to org.rdmashuffle.examples.ShuffleComparison (--records, --partitions,
# --rounds, --master, --out, --conf k=v). RDMA_SKIP_BUILD=1 skips the build; RDMA_JAVA_OPTS adds JVM
# options (e.g. -Djava.library.path=<dir of libdisni> for provider=verbs with --master local[N]).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  echo "needs a JDK (17+) and Maven; on Debian: apt-get install -y openjdk-17-jdk-headless maven" >&2
  exit 1
fi
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (mvn package, tests skipped)..."
  mvn -B -ntp -q -DskipTests -pl examples -am package
fi
version=$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' pom.xml | head -1)
examples_jar="$root/examples/target/rdma-shuffle-examples-$version.jar"
rdma_jar="$root/shuffle-manager/spark/target/rdma-shuffle-spark-4.2_2.13-$version-plugin.jar"
export SPARK_HOME="$root/examples/target/spark-home"
export SPARK_SCALA_VERSION=2.13
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
  -cp "$examples_jar:$rdma_jar:$root/examples/target/lib/*:$SPARK_HOME/jars/*" \
  "org.rdmashuffle.examples.${RDMA_MAIN_CLASS:-ShuffleComparison}" \
  --jars "$examples_jar,$rdma_jar,$(ls "$root"/examples/target/lib/tpcds-*.jar)" "$@"
