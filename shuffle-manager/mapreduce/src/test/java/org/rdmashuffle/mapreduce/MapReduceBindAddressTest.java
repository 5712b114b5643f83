package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.rdmashuffle.mapreduce.ServiceFixture.messages;

import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.conf.ConfigException;

/**
 * {@code mapreduce.shuffle.rdma.bindAddress}: the NodeManager's service listens on (and names itself by) the
 * address it resolves to, and every error names the key the user set — never the {@code spark.} key it maps onto.
 */
class MapReduceBindAddressTest {
    private static final String KEY = "mapreduce.shuffle.rdma.bindAddress";

    @TempDir
    Path dir;

    private Configuration conf(String bindAddress) throws Exception {
        Configuration c = ServiceFixture.nodeManagerConf(dir, ServiceFixture.freePort());
        c.unset(MapReduceRdmaConf.BIND_HOST);
        c.set(KEY, bindAddress);
        return c;
    }

    @Test
    @Timeout(30)
    void shouldListenOnTheBoundAddressWhenBindAddressIsSet() throws Exception {
        RdmaShuffleHandler service = ServiceFixture.started(conf("127.0.0.2"));
        try {
            assertEquals("127.0.0.2", service.server().address().host());
        } finally {
            service.stop();
        }
    }

    @Test
    @Timeout(30)
    void shouldFailTheServiceStartNamingTheMapReduceKeyWhenBindAddressMatchesNoInterface() throws Exception {
        RdmaShuffleHandler service = new RdmaShuffleHandler();
        service.init(conf("rdmanone9"));
        try {
            String all = messages(assertThrows(Exception.class, service::start));
            assertTrue(all.contains(KEY + "=rdmanone9 matches no interface"), all);
            assertFalse(all.contains("spark.shuffle.rdma"), all);
        } finally {
            service.stop();
        }
    }

    @Test
    @Timeout(30)
    void shouldFailTheReducersNodeNamingTheMapReduceKeyWhenBindAddressIsNotOnThisHost() throws Exception {
        String all = messages(assertThrows(Exception.class, () -> new ReducerClient(
                MapReduceRdmaConf.from(conf("203.0.113.254")), "job_1700000000000_0001", "s".repeat(20).getBytes())));
        assertTrue(all.contains(KEY + "=203.0.113.254 is not an address of this host"), all);
        assertFalse(all.contains("spark.shuffle.rdma"), all);
    }

    @Test
    void shouldNameTheMapReduceKeysWhenTheConfigurationIsInvalid() throws Exception {
        Configuration c = conf("not an interface");
        c.set(MapReduceRdmaConf.PREFIX + "verbs.tos", "256");
        String msg = assertThrows(ConfigException.class, () -> MapReduceRdmaConf.from(c)).getMessage();
        assertTrue(msg.contains(KEY) && msg.contains("mapreduce.shuffle.rdma.verbs.tos"), msg);
        assertFalse(msg.contains("spark.shuffle.rdma"), msg);
        Configuration both = conf("lo");
        both.set(MapReduceRdmaConf.BIND_HOST, "127.0.0.1");
        msg = assertThrows(ConfigException.class, () -> MapReduceRdmaConf.from(both)).getMessage();
        assertTrue(msg.contains(MapReduceRdmaConf.BIND_HOST) && msg.contains(KEY), msg);
    }
}
