#!/usr/bin/env bash
# TPC-DS under Spark's sort shuffle and rdma-shuffle on an embedded local cluster: generates the
# data once (Parquet, under examples/target/tpcds-sf<scale>), runs every query on both managers,
# checks the results are identical and prints per-query times and totals. Options go to
# org.rdmashuffle.examples.TpcdsComparison: --scale 1 --queries all|q1,q14a --rounds 1 --out DIR.
set -euo pipefail
exec "$(dirname "$0")/run-main-job.sh" --workload tpcds "$@"
