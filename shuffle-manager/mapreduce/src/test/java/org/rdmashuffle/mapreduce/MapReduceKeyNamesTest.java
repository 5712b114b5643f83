package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.security.TokenCache;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.yarn.api.records.ApplicationAttemptId;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.server.api.ContainerInitializationContext;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Errors of the NodeManager's service name the {@code mapreduce.shuffle.rdma.*} key the user set, never the
 * {@code spark.shuffle.rdma.*} one it maps onto: a port another process holds stops the service's start saying
 * {@code mapreduce.shuffle.rdma.port}; a reducer refused as busy is told the
 * {@code mapreduce.shuffle.rdma.maxConnections*} limits.
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

    @Test
    @Timeout(30)
    void shouldNameTheMapReduceLimitKeysWhenAReducerIsRefusedAsBusy() throws Exception {
        int port;
        try (ServerSocket free = new ServerSocket(0)) {
            port = free.getLocalPort();
        }
        Configuration c = new Configuration(false);
        c.set(MapReduceRdmaConf.NM_LOCAL_DIRS, dir.toString());
        c.set(MapReduceRdmaConf.PORT, Integer.toString(port));
        c.set(MapReduceRdmaConf.PREFIX + "provider", "tcp");
        c.set(MapReduceRdmaConf.PREFIX + "maxConnectionsPerAddress", "1");
        c.set(MapReduceRdmaConf.PREFIX + "connectRetries", "0"); // refused once is enough here
        c.set(MapReduceRdmaConf.BIND_HOST, "127.0.0.1");
        c.set("yarn.nodemanager.hostname", "127.0.0.1");
        byte[] secret = "s".repeat(20).getBytes();
        RdmaShuffleHandler service = new RdmaShuffleHandler();
        service.init(c);
        service.start();
        try {
            // A job with a container here holding its secret, as RdmaShuffleHandlerTest runs one.
            ApplicationId app = ApplicationId.newInstance(1_700_000_000_000L, 1);
            ContainerId container = ContainerId.newContainerId(ApplicationAttemptId.newInstance(app, 1), 1);
            Path containerDir = dir.resolve(LocalDirs.appBase("alice", app.toString())).resolve(container.toString());
            Files.createDirectories(containerDir);
            Credentials creds = new Credentials();
            TokenCache.setShuffleSecretKey(secret, creds);
            creds.writeTokenStorageFile(new org.apache.hadoop.fs.Path(containerDir.resolve("container_tokens").toString()),
                    new Configuration(false));
            service.initializeContainer(new ContainerInitializationContext("alice", container,
                    Resource.newInstance(512, 1)));
            String job = new JobID(Long.toString(app.getClusterTimestamp()), app.getId()).toString();
            while (!service.server().jobs().hasSecret(job)) { // the maintenance thread captures it (the @Timeout bounds this)
                Thread.sleep(50);
            }
            ByteBuffer register = RegisterProtocol.encode(new RegisterProtocol.Request(1, 1, 0,
                    new RegisterProtocol.MapAttempt[] {new RegisterProtocol.MapAttempt(0, 0)}));
            try (ReducerClient first = new ReducerClient(MapReduceRdmaConf.from(c), job, secret);
                 ReducerClient second = new ReducerClient(MapReduceRdmaConf.from(c), job, secret)) {
                first.call(service.server().address(), register.duplicate()); // holds the address's one connection
                String all = messages(assertThrows(IOException.class,
                        () -> second.call(service.server().address(), register.duplicate())));
                assertTrue(all.contains(MapReduceRdmaConf.PREFIX + "maxConnections"), all);
                assertFalse(all.contains("spark.shuffle.rdma"), all);
            }
        } finally {
            service.stop();
        }
    }
}
