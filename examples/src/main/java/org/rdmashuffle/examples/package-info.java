/**
 * Workloads and the comparison harness (TeraSort, TPC-DS) run over rdma-shuffle and Spark's own
 * shuffle; filled by the shuffle-manager and comparison issues.
 */
package org.rdmashuffle.examples;
