package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Errors of the NodeManager's service name the {@code mapreduce.shuffle.rdma.*} key the user set, never the
 * {@code spark.shuffle.rdma.*} one it maps onto: a port another process holds stops the service's start saying
 * {@code mapreduce.shuffle.rdma.port}.
 */
class MapReduceKeyNamesTest {
    @TempDir
    Path dir;

    private static String messages(Throwable e) {
        StringBuilder b = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            b.append(t.getMessage()).append(" | ");
        }
        return b.toString();
    }

    @Test
    @Timeout(30)
    void shouldNameTheMapReducePortKeyWhenTheServicesPortIsTaken() throws Exception {
        try (ServerSocket taken = new ServerSocket()) {
            taken.bind(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), 0));
            Configuration c = new Configuration(false);
            c.set(MapReduceRdmaConf.NM_LOCAL_DIRS, dir.toString());
            c.set(MapReduceRdmaConf.PORT, Integer.toString(taken.getLocalPort()));
            c.set(MapReduceRdmaConf.PREFIX + "port.maxRetries", "0");
            c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
            c.set(MapReduceRdmaConf.BIND_HOST, "127.0.0.1");
            c.set("yarn.nodemanager.hostname", "127.0.0.1");
            RdmaShuffleHandler service = new RdmaShuffleHandler();
            service.init(c);
            try {
                String all = messages(assertThrows(Exception.class, service::start));
                assertTrue(all.contains(MapReduceRdmaConf.PORT), all);
                assertFalse(all.contains("spark.shuffle.rdma"), all);
            } finally {
                service.stop();
            }
        }
    }
}
