package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.mapreduce.ServiceFixture.messages;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.JobID;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * Errors of the NodeManager's service name the {@code mapreduce.shuffle.rdma.*} key the user set, never the
 * {@code spark.shuffle.rdma.*} one it maps onto: a port another process holds stops the service's start saying
 * {@code mapreduce.shuffle.rdma.port} and why it may be taken; a reducer refused as busy is told the
 * {@code mapreduce.shuffle.rdma.maxConnections*} limits.
 */
class MapReduceKeyNamesTest {
    @TempDir
    Path dir;

    @Test
    @Timeout(30)
    void shouldNameTheMapReducePortKeyAndTheClassLoaderCaseWhenTheServicesPortIsTaken() throws Exception {
        try (ServerSocket taken = new ServerSocket()) {
            taken.bind(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), 0));
            Configuration c = ServiceFixture.nodeManagerConf(dir, taken.getLocalPort());
            c.set(MapReduceRdmaConf.PREFIX + "port.maxRetries", "0");
            RdmaShuffleHandler service = new RdmaShuffleHandler();
            service.init(c);
            try {
                String all = messages(assertThrows(Exception.class, service::start));
                assertTrue(all.contains(MapReduceRdmaConf.PORT + "=" + taken.getLocalPort() + " is taken"), all);
                assertTrue(all.contains("class loader") && all.contains("one NodeManager per host"), all);
                assertFalse(all.contains("spark.shuffle.rdma"), all);
            } finally {
                service.stop();
            }
        }
    }

    @Test
    @Timeout(60)
    void shouldNameThePortKeyWhenTwoNodeManagersOfOneProcessLoadTheServiceInClassLoadersOfTheirOwn() throws Exception {
        // As YARN loads it with yarn.nodemanager.aux-services.mapreduce_shuffle.classpath: our classes from the
        // given class path first, in a loader per NodeManager; Hadoop's (ShuffleHandler too) from the NodeManager's.
        StringBuilder classPath = new StringBuilder();
        for (Class<?> c : new Class<?>[] {RdmaShuffleHandler.class, org.rdmashuffle.conf.RdmaShuffleConf.class,
            org.rdmashuffle.transport.NodeAddress.class, org.rdmashuffle.shuffle.core.serve.MapOutputServer.class,
            org.rdmashuffle.pool.BufferPool.class}) {
            classPath.append(java.io.File.pathSeparator)
                    .append(new java.io.File(c.getProtectionDomain().getCodeSource().getLocation().toURI()));
        }
        Configuration c = ServiceFixture.nodeManagerConf(dir, ServiceFixture.freePort());
        org.apache.hadoop.service.Service first = ownClassLoader(classPath.substring(1));
        org.apache.hadoop.service.Service second = ownClassLoader(classPath.substring(1));
        try {
            first.init(c);
            first.start();
            second.init(new Configuration(c));
            String all = messages(assertThrows(Exception.class, second::start));
            assertTrue(all.contains(MapReduceRdmaConf.PORT + "=" + c.get(MapReduceRdmaConf.PORT) + " is taken"), all);
            assertTrue(all.contains("class loader of its own") && all.contains("one NodeManager per host")
                    && all.contains("NodeManager's class path"), all);
            assertFalse(all.contains("spark.shuffle.rdma"), all);
        } finally {
            second.stop();
            first.stop();
        }
    }

    /**
     * The service as YARN loads it with a class path of its own: in Hadoop's {@code ApplicationClassLoader} (ours
     * first, Hadoop's classes from the parent). With one loader for both they would share the port's node.
     */
    private static org.apache.hadoop.service.Service ownClassLoader(String classPath) throws Exception {
        ClassLoader loader = new org.apache.hadoop.util.ApplicationClassLoader(classPath,
                MapReduceKeyNamesTest.class.getClassLoader(), null);
        Class<?> service = Class.forName(RdmaShuffleHandler.class.getName(), true, loader);
        assertFalse(service == RdmaShuffleHandler.class, "loaded again, not from the test's loader");
        return (org.apache.hadoop.service.Service) service.getConstructor().newInstance();
    }

    @Test
    @Timeout(30)
    void shouldNameTheMapReduceLimitKeysWhenAReducerIsRefusedAsBusy() throws Exception {
        Configuration c = ServiceFixture.nodeManagerConf(dir, ServiceFixture.freePort());
        c.set(MapReduceRdmaConf.PREFIX + "maxConnectionsPerAddress", "1");
        c.set(MapReduceRdmaConf.PREFIX + "connectRetries", "0"); // refused once is enough here
        byte[] secret = "s".repeat(20).getBytes();
        RdmaShuffleHandler service = ServiceFixture.started(c);
        try {
            JobID job = ServiceFixture.initJob(service, "alice", 1, secret);
            ByteBuffer register = RegisterProtocol.encode(new RegisterProtocol.Request(1, 1, 0,
                    new RegisterProtocol.MapAttempt[] {new RegisterProtocol.MapAttempt(0, 0)}));
            try (ReducerClient first = new ReducerClient(MapReduceRdmaConf.from(c), job.toString(), secret);
                 ReducerClient second = new ReducerClient(MapReduceRdmaConf.from(c), job.toString(), secret)) {
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

    /**
     * The service's own log lines (what an operator reads on the NodeManager) name the keys set in
     * {@code yarn-site.xml}: a job past its share of the node's connections, a REGISTER past the message size.
     */
    @Test
    @Timeout(60)
    void shouldLogTheMapReduceKeysOnTheNodeManagerWhenAJobPassesItsShareAndAMessageItsSize() throws Exception {
        Configuration c = ServiceFixture.nodeManagerConf(dir, ServiceFixture.freePort());
        c.set(MapReduceRdmaConf.PREFIX + "maxConnectionsPerRealm", "1");
        c.set(MapReduceRdmaConf.PREFIX + "maxControlMessageSize", "1k");
        c.set(MapReduceRdmaConf.PREFIX + "connectRetries", "0");
        Configuration reducers = new Configuration(c);
        reducers.set(MapReduceRdmaConf.PREFIX + "maxControlMessageSize", "64k"); // sends what the service refuses
        byte[] secret = "s".repeat(20).getBytes();
        java.io.StringWriter log = new java.io.StringWriter();
        org.apache.log4j.Logger rdma = org.apache.log4j.Logger.getLogger("org.rdmashuffle");
        org.apache.log4j.WriterAppender capture = new org.apache.log4j.WriterAppender(
                new org.apache.log4j.PatternLayout("%m%n"), log);
        rdma.addAppender(capture);
        RdmaShuffleHandler service = ServiceFixture.started(c);
        try {
            JobID job = ServiceFixture.initJob(service, "alice", 1, secret);
            JobID other = ServiceFixture.initJob(service, "bob", 2, secret);
            ByteBuffer register = RegisterProtocol.encode(new RegisterProtocol.Request(1, 1, 0,
                    new RegisterProtocol.MapAttempt[] {new RegisterProtocol.MapAttempt(0, 0)}));
            RegisterProtocol.MapAttempt[] many = new RegisterProtocol.MapAttempt[200];
            for (int i = 0; i < many.length; i++) {
                many[i] = new RegisterProtocol.MapAttempt(i, 0);
            }
            ByteBuffer tooLong = RegisterProtocol.encode(new RegisterProtocol.Request(200, 1, 0, many));
            try (ReducerClient first = new ReducerClient(MapReduceRdmaConf.from(c), job.toString(), secret);
                 ReducerClient second = new ReducerClient(MapReduceRdmaConf.from(c), job.toString(), secret);
                 ReducerClient third = new ReducerClient(MapReduceRdmaConf.from(reducers), other.toString(), secret)) {
                first.call(service.server().address(), register.duplicate()); // the job's one connection
                assertThrows(IOException.class, () -> second.call(service.server().address(), register.duplicate()));
                assertThrows(IOException.class, () -> third.call(service.server().address(), tooLong.duplicate()));
            }
            awaitLogged(log, "limit " + MapReduceRdmaConf.PREFIX + "maxConnectionsPerRealm=1 (realm " + job + ")");
            awaitLogged(log, "control message of " + tooLong.remaining() + " bytes claimed, limit "
                    + MapReduceRdmaConf.PREFIX + "maxControlMessageSize=1024");
        } finally {
            service.stop();
            rdma.removeAppender(capture);
        }
        assertFalse(log.toString().contains("spark.shuffle.rdma"), log.toString());
    }

    private static void awaitLogged(java.io.StringWriter log, String line) throws InterruptedException {
        long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(20);
        while (!log.toString().contains(line)) {
            assertTrue(System.nanoTime() < deadline, "not logged within 20 s: " + line + "\n" + log);
            Thread.sleep(20);
        }
    }
}
