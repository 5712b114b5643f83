package org.rdmashuffle.shuffle;

import java.util.Map;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * A Spark plugin ({@code spark.plugins}) that sets {@code spark.shuffle.rdma.provider=tcp} on the one executor
 * whose id {@value #EXECUTOR_KEY} names, leaving the others on the application's provider: how a test runs
 * executors that choose their transport differently, with nothing in the product for it. From Spark 4.0 an
 * executor initialises its plugins before it builds its shuffle manager (SPARK-45762), which reads the conf the
 * plugin changed; before 4.0 the manager exists first and the plugin comes too late.
 */
public final class ForceTcpOnOneExecutor implements SparkPlugin {
    /** The id of the executor to force to tcp. */
    static final String EXECUTOR_KEY = "spark.rdmaShuffleTest.tcpExecutor";

    /** Whether this Spark line builds the shuffle manager after the plugins, so this plugin takes effect. */
    static boolean takesEffect() {
        return !SparkLines.version().startsWith("3.");
    }

    @Override
    public DriverPlugin driverPlugin() {
        return null;
    }

    @Override
    public ExecutorPlugin executorPlugin() {
        return new ExecutorPlugin() {
            @Override
            public void init(PluginContext ctx, Map<String, String> extraConf) {
                if (ctx.executorID().equals(ctx.conf().get(EXECUTOR_KEY, ""))) {
                    ctx.conf().set("spark.shuffle.rdma.provider", "tcp");
                }
            }
        };
    }
}
