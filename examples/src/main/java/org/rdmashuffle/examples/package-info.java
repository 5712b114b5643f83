/**
 * Workloads run over rdma-shuffle and Spark's own shuffle: TeraSort ({@link
 * org.rdmashuffle.examples.TeraRecords}) and the comparison that runs it under both managers
 * ({@link org.rdmashuffle.examples.ShuffleComparison}, the README's main job).
 */
package org.rdmashuffle.examples;
