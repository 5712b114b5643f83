package org.rdmashuffle.mapreduce;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.task.reduce.MapHost;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapAttempt;
import org.rdmashuffle.mapreduce.RegisterProtocol.MapState;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Block;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Expected;
import org.rdmashuffle.shuffle.core.fetch.BlockFetcher.Request;
import org.rdmashuffle.transport.ControlHandler;
import org.rdmashuffle.transport.NodeAddress;
import org.rdmashuffle.transport.NodeOptions;
import org.rdmashuffle.transport.RdmaNode;
import org.rdmashuffle.transport.RdmaTransport;
import org.rdmashuffle.transport.RegionDescriptor;

/**
 * REGISTER version 2 against the NodeManager's service over real sockets (no cluster): each registered map is
 * answered with where its partition lies, READ at once (no table slot, no metadata); an old reducer (version 1) is
 * answered as before and READs through the table; a location handed out for an attempt that another attempt
 * replaced READs nothing; a new reducer asking a service of the previous release (version 1 only) asks it again in
 * version 1 and keeps to it.
 */
@Timeout(60)
class RegisterLocatedTest {
    private static final String USER = "alice";
    private static final int REDUCES = 3;
    private static final int MAPS = 2;

    @TempDir
    Path dir;
    private Configuration nmConf;
    private RdmaShuffleHandler service;
    private int port;

    @BeforeEach
    void startService() throws Exception {
        port = ServiceFixture.freePort();
        Files.createDirectories(dir.resolve("nm"));
        nmConf = ServiceFixture.nodeManagerConf(dir.resolve("nm"), port);
        service = ServiceFixture.started(nmConf);
    }

    @AfterEach
    void stopService() {
        service.stop();
    }

    private ReducerClient reducer(JobID job, byte[] secret) throws Exception {
        return new ReducerClient(MapReduceRdmaConf.from(nmConf), job.toString(), secret);
    }

    private NodeAddress at() {
        return new NodeAddress("127.0.0.1", port, service.server().address().provider());
    }

    private static RegisterProtocol.Reply register(ReducerClient client, NodeAddress at, byte version, int reduce,
                                                   MapAttempt... maps) throws Exception {
        ByteBuffer reply = client.call(at, RegisterProtocol.encode(new RegisterProtocol.Request(MAPS, REDUCES, reduce,
                maps, version)));
        return RegisterProtocol.parseReply(reply, maps.length, version);
    }

    /** The block {@code st} of map {@code map} attempt {@code attempt} says, READ with a fetcher of its own. */
    private static Fetched read(ReducerClient client, NodeAddress at, RegionDescriptor table, int map, int attempt,
                                int reduce, MapState st) throws Exception {
        try (BlockFetcher f = client.newFetcher(1)) {
            f.add(new Request(at, table, map, attempt, reduce, reduce + 1,
                    new Expected(REDUCES, st.partLength(), st.partLength()), st.location()));
            try (Block b = f.next()) {
                byte[] bytes = null;
                if (!b.unregistered()) {
                    bytes = new byte[(int) b.length()];
                    b.bytes().get(bytes);
                }
                return new Fetched(bytes, b.viaEngineReason(), f.controlBytesRead());
            }
        }
    }

    private record Fetched(byte[] bytes, String viaHttp, long controlBytesRead) {
    }

    @Test
    void shouldReadEachMapsPartitionWhereTheReplySaysWithoutReadingTheTableWhenAskedInVersion2() throws Exception {
        byte[] secret = "secret-of-job-71".getBytes(StandardCharsets.UTF_8);
        JobID job = ServiceFixture.initJob(service, USER, 71, secret);
        byte[][][] parts = new byte[MAPS][][];
        for (int m = 0; m < MAPS; m++) {
            parts[m] = ServiceFixture.writeMapOutput(dir.resolve("nm"), USER, job, m, 0, REDUCES, 710 + m);
        }
        try (ReducerClient client = reducer(job, secret)) {
            for (int reduce = 0; reduce < REDUCES; reduce++) {
                RegisterProtocol.Reply r = register(client, at(), RegisterProtocol.LOCATED_VERSION, reduce,
                        new MapAttempt(0, 0), new MapAttempt(1, 0));
                assertEquals(RegisterProtocol.OK, r.status(), r.reason());
                for (int m = 0; m < MAPS; m++) {
                    MapState st = r.maps()[m];
                    assertEquals(RegisterProtocol.LOCATED, st.state());
                    assertEquals(parts[m][reduce].length, st.location().length());
                    Fetched got = read(client, at(), r.table(), m, 0, reduce, st);
                    assertArrayEquals(parts[m][reduce], got.bytes());
                    assertEquals(0, got.controlBytesRead(), "no slot or metadata READ: one READ step per map");
                }
            }
            // An old reducer (version 1) on the same service: answered without locations, READs through the table.
            RegisterProtocol.Reply old = register(client, at(), RegisterProtocol.VERSION, 2, new MapAttempt(1, 0));
            assertEquals(RegisterProtocol.PUBLISHED, old.maps()[0].state());
            Fetched viaTable = read(client, at(), old.table(), 1, 0, 2, old.maps()[0]);
            assertArrayEquals(parts[1][2], viaTable.bytes());
            assertTrue(viaTable.controlBytesRead() > 0, "slot and metadata READ first");
        }
    }

    @Test
    void shouldNotReadAReplacingAttemptsBytesThroughTheLocationOfTheAttemptItReplaced() throws Exception {
        byte[] secret = "secret-of-job-72".getBytes(StandardCharsets.UTF_8);
        JobID job = ServiceFixture.initJob(service, USER, 72, secret);
        ServiceFixture.writeMapOutput(dir.resolve("nm"), USER, job, 0, 0, REDUCES, 1);
        byte[][] rerun = ServiceFixture.writeMapOutput(dir.resolve("nm"), USER, job, 0, 1, REDUCES, 2);
        try (ReducerClient client = reducer(job, secret)) {
            RegisterProtocol.Reply first = register(client, at(), RegisterProtocol.LOCATED_VERSION, 1,
                    new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.LOCATED, first.maps()[0].state());
            // Another reducer names the rerun: attempt 1 replaces attempt 0 in the table, attempt 0's regions go.
            RegisterProtocol.Reply second = register(client, at(), RegisterProtocol.LOCATED_VERSION, 1,
                    new MapAttempt(0, 1));
            assertEquals(RegisterProtocol.LOCATED, second.maps()[0].state());
            Fetched stale = read(client, at(), first.table(), 0, 0, 1, first.maps()[0]);
            assertNull(stale.bytes(), "a stale location READs nothing");
            assertTrue(stale.viaHttp().contains("deregistered"), stale.viaHttp());
            assertArrayEquals(rerun[1], read(client, at(), second.table(), 0, 1, 1, second.maps()[0]).bytes());
            // Asked for the replaced attempt again: no location of anything (HTTP serves it by its path).
            RegisterProtocol.Reply late = register(client, at(), RegisterProtocol.LOCATED_VERSION, 1,
                    new MapAttempt(0, 0));
            assertEquals(RegisterProtocol.VIA_HTTP, late.maps()[0].state());
            assertNull(late.maps()[0].location());
        }
    }

    @Test
    void shouldAskAServiceOfThePreviousReleaseInVersion1AgainAndFromThenOn() throws Exception {
        String job = "job_1700000000000_0073";
        byte[] secret = "secret-of-job-73".getBytes(StandardCharsets.UTF_8);
        List<Byte> versions = new CopyOnWriteArrayList<>();
        RegionDescriptor table = new RegionDescriptor(1L << 30, 64, 5);
        ControlHandler previousRelease = new ControlHandler() { // REGISTER as the service of the previous release
            @Override
            public ByteBuffer onMessage(ByteBuffer request) {
                return onMessage(null, request);
            }

            @Override
            public ByteBuffer onMessage(String realm, ByteBuffer request) {
                byte version = request.get(1);
                versions.add(version);
                if (version != RegisterProtocol.VERSION) {
                    return RegisterProtocol.encodeRefusal(RegisterProtocol.BAD_REQUEST, "REGISTER version " + version
                            + ", this service speaks 1");
                }
                RegisterProtocol.Request r = RegisterProtocol.parseRequest(request);
                MapState[] states = new MapState[r.maps().length];
                java.util.Arrays.fill(states, new MapState(RegisterProtocol.PUBLISHED, 10, 5));
                return RegisterProtocol.encodeOk(table, states);
            }
        };
        var conf = EchoService.conf(0);
        try (RdmaNode old = RdmaTransport.open(conf, NodeOptions.loopback().withControlHandler(previousRelease)
                .withSecrets(asked -> job.equals(asked) ? secret : null));
             ReducerClient client = new ReducerClient(EchoService.conf(old.localAddress().port()), job, secret)) {
            MapHost host = new MapHost("127.0.0.1:13562", "http://127.0.0.1:13562/mapOutput?job=x&reduce=0&map=");
            NodeAddress at = client.serviceOf(host);
            assertEquals(RegisterProtocol.LOCATED_VERSION, client.registerVersion(host));
            MapAttempt[] maps = {new MapAttempt(0, 0), new MapAttempt(1, 0)};
            RegisterProtocol.Reply r = RdmaFetcher.register(client, host, at, new RegisterProtocol.Request(2, 1, 0,
                    maps, client.registerVersion(host)));
            assertEquals(RegisterProtocol.OK, r.status(), r.reason());
            assertEquals(RegisterProtocol.PUBLISHED, r.maps()[1].state());
            assertEquals(table, r.table());
            assertEquals(List.of(RegisterProtocol.LOCATED_VERSION, RegisterProtocol.VERSION), versions);
            assertEquals(RegisterProtocol.VERSION, client.registerVersion(host), "asked in version 1 from now on");
            assertNull(client.httpReason(host), "an older service is READ from, not left to HTTP");
            RdmaFetcher.register(client, host, at, new RegisterProtocol.Request(2, 1, 0, maps,
                    client.registerVersion(host)));
            assertEquals(List.of(RegisterProtocol.LOCATED_VERSION, RegisterProtocol.VERSION, RegisterProtocol.VERSION),
                    versions);
            MapHost other = new MapHost("127.0.0.2:13562", "http://127.0.0.2:13562/mapOutput?job=x&reduce=0&map=");
            assertEquals(RegisterProtocol.LOCATED_VERSION, client.registerVersion(other), "per NodeManager");
        }
    }

    @Test
    void shouldServeAMapOutputWhoseIndexAndDataLieInDifferentLocalDirs() throws Exception {
        // Hadoop's map task asks its local dir allocator for file.out and file.out.index apart: with several local
        // dirs they may land on different ones, and Hadoop's HTTP side finds each where it is.
        service.stop();
        Path second = Files.createDirectories(dir.resolve("nm-disk2"));
        nmConf.set(MapReduceRdmaConf.NM_LOCAL_DIRS, dir.resolve("nm") + "," + second);
        service = ServiceFixture.started(nmConf);
        byte[] secret = "secret-of-job-74".getBytes(StandardCharsets.UTF_8);
        JobID job = ServiceFixture.initJob(service, USER, 74, secret);
        byte[][] parts = ServiceFixture.writeMapOutput(dir.resolve("nm"), USER, job, 1, 0, REDUCES, 74);
        Path data = Files.walk(dir.resolve("nm")).filter(p -> p.getFileName().toString().equals("file.out"))
                .findFirst().orElseThrow();
        Path moved = second.resolve(dir.resolve("nm").relativize(data));
        Files.createDirectories(moved.getParent());
        Files.move(data, moved);
        try (ReducerClient client = reducer(job, secret)) {
            RegisterProtocol.Reply r = register(client, at(), RegisterProtocol.LOCATED_VERSION, 2,
                    new MapAttempt(1, 0));
            assertEquals(RegisterProtocol.LOCATED, r.maps()[0].state(), "found on two disks, not missing");
            assertArrayEquals(parts[2], read(client, at(), r.table(), 1, 0, 2, r.maps()[0]).bytes());
        }
    }
}
