package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The work request list the foreign-function provider hands to a provider's {@code post_send}: what a
 * driver reads from it, the errors it returns, and what posting allocates. The driver is a stand-in (an
 * upcall that walks the list as a driver does, or libc's {@code sched_yield}, which ignores them and returns 0);
 * everything on our side of the call is the real code.
 */
class ReadWorkRequestsTest {
    private static RdmaCore core;

    /** What the stand-in driver read, post by post: one long[7] per work request. */
    private static final List<List<long[]>> POSTED = new ArrayList<>();
    private static volatile int driverResult;
    /** post_send's signature without Linker.Option.critical, which forbids the stand-in driver's upcall. */
    private static final java.lang.invoke.MethodHandle UPCALLABLE = Linker.nativeLinker().downcallHandle(
            FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS));

    @BeforeAll
    static void loadRdmaCore() {
        try {
            core = RdmaCore.get();
        } catch (UnsatisfiedLinkError e) {
            org.junit.jupiter.api.Assumptions.abort("rdma-core's libraries do not load here: " + e.getMessage());
        }
    }

    /** A driver's post_send: walks the list from {@code wr} to its NULL next, as mlx5, rxe or siw do. */
    static int fakePostSend(MemorySegment qp, MemorySegment wr, MemorySegment bad) {
        List<long[]> seen = new ArrayList<>();
        long w = wr.address();
        while (w != 0) {
            long sge = RdmaCore.getLong(w + RdmaCore.WR_SG_LIST);
            seen.add(new long[] {
                RdmaCore.getLong(w + RdmaCore.WR_WR_ID),
                RdmaCore.getInt(w + RdmaCore.WR_OPCODE) * 1000L + RdmaCore.getInt(w + RdmaCore.WR_SEND_FLAGS) * 10L
                        + RdmaCore.getInt(w + RdmaCore.WR_NUM_SGE),
                RdmaCore.getLong(w + RdmaCore.WR_RDMA_REMOTE_ADDR),
                RdmaCore.getInt(w + RdmaCore.WR_RDMA_RKEY) & 0xFFFFFFFFL,
                RdmaCore.getLong(sge + RdmaCore.SGE_ADDR),
                RdmaCore.getInt(sge + RdmaCore.SGE_LENGTH) & 0xFFFFFFFFL,
                RdmaCore.getInt(sge + RdmaCore.SGE_LKEY) & 0xFFFFFFFFL});
            w = RdmaCore.getLong(w + RdmaCore.WR_NEXT);
        }
        POSTED.add(seen);
        return driverResult;
    }

    private static MemorySegment fakeDriver(Arena arena) throws ReflectiveOperationException {
        var handle = MethodHandles.lookup().findStatic(ReadWorkRequestsTest.class, "fakePostSend",
                MethodType.methodType(int.class, MemorySegment.class, MemorySegment.class, MemorySegment.class));
        return Linker.nativeLinker().upcallStub(handle, FunctionDescriptor.of(ValueLayout.JAVA_INT,
                ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS), arena);
    }

    private static ReadChain chain(int n, int seed) {
        ReadChain c = new ReadChain(n);
        for (int j = 0; j < n; j++) {
            c.wrId[j] = ((long) seed << 32) | j;
            c.remote[j] = 0x7f00_0000_0000L + seed * 0x10000L + j * 4096L;
            c.rkey[j] = 0x8000_0000 | (seed << 8) | j;
            c.local[j] = 0x5500_0000_0000L + j * 65536L;
            c.length[j] = 65536 - j;
            c.lkey[j] = 0x4000_0000 | j;
            c.signaled[j] = (j + seed) % 3 == 0;
        }
        return c;
    }

    @Test
    void shouldHandTheDriverExactlyTheFirstKReadsOfTheChainWithTheirSignalFlagsThenRelinkTheList() throws Exception {
        try (Arena arena = Arena.ofConfined();
             ReadWorkRequests wrs = new ReadWorkRequests(core, UPCALLABLE, arena.allocate(64), fakeDriver(arena), 8)) {
            POSTED.clear();
            driverResult = 0;
            wrs.post(chain(8, 1), 3);
            wrs.post(chain(8, 2), 8);
            wrs.post(chain(8, 3), 1);
            assertEquals(3, POSTED.size());
            int[] ks = {3, 8, 1};
            for (int p = 0; p < 3; p++) {
                ReadChain c = chain(8, p + 1);
                List<long[]> seen = POSTED.get(p);
                assertEquals(ks[p], seen.size(), "work requests in post " + p);
                for (int j = 0; j < ks[p]; j++) {
                    long[] w = seen.get(j);
                    assertEquals(c.wrId[j], w[0], "wr_id");
                    long flags = c.signaled[j] ? RdmaCore.IBV_SEND_SIGNALED : 0;
                    assertEquals(RdmaCore.IBV_WR_RDMA_READ * 1000L + flags * 10L + 1, w[1],
                            "opcode RDMA_READ, signalled only where the chain says, one sge");
                    assertEquals(c.remote[j], w[2], "remote_addr");
                    assertEquals(c.rkey[j] & 0xFFFFFFFFL, w[3], "rkey");
                    assertEquals(c.local[j], w[4], "sge addr");
                    assertEquals(c.length[j], w[5], "sge length");
                    assertEquals(c.lkey[j] & 0xFFFFFFFFL, w[6], "sge lkey");
                }
            }
        }
    }

    @Test
    void shouldHandTheDriverTheChannelsWorkRequestIdsWholeTagAndSlot() throws Exception {
        try (Arena arena = Arena.ofConfined();
             ReadWorkRequests wrs = new ReadWorkRequests(core, UPCALLABLE, arena.allocate(64), fakeDriver(arena), 4)) {
            POSTED.clear();
            driverResult = 0;
            ReadChain c = chain(4, 9);
            int[] tags = {1, 0x7FFF_FFFF, 0x8000_0000, -1};
            for (int j = 0; j < 4; j++) {
                c.wrId[j] = WorkRequestIds.of(tags[j], j);
            }
            wrs.post(c, 4);
            for (int j = 0; j < 4; j++) {
                long seen = POSTED.get(0).get(j)[0];
                assertEquals(tags[j], WorkRequestIds.tag(seen), "tag");
                assertEquals(j, WorkRequestIds.slot(seen), "slot");
            }
        }
    }

    @Test
    void shouldFailThePostNamingTheDriversErrnoWhenPostSendRefusesIt() throws Exception {
        try (Arena arena = Arena.ofConfined();
             ReadWorkRequests wrs = new ReadWorkRequests(core, UPCALLABLE, arena.allocate(64), fakeDriver(arena), 4)) {
            driverResult = 12; // ENOMEM: the send queue is full
            IOException e = assertThrows(IOException.class, () -> wrs.post(chain(4, 1), 2));
            assertTrue(e.getMessage().contains("errno 12"), e.getMessage());
            driverResult = 0;
            POSTED.clear();
            wrs.post(chain(4, 2), 4); // the failed post left the list linked
            assertEquals(4, POSTED.get(0).size());
        }
    }

    @Test
    void shouldRefuseMoreReadsThanTheSendQueueHolds() throws Exception {
        try (Arena arena = Arena.ofConfined();
             ReadWorkRequests wrs = new ReadWorkRequests(core, UPCALLABLE, arena.allocate(64), fakeDriver(arena), 4)) {
            IOException e = assertThrows(IOException.class, () -> wrs.post(chain(8, 1), 5));
            assertTrue(e.getMessage().contains("send queue holds 4"), e.getMessage());
        }
    }

    @Test
    void shouldAllocateNothingPerPost() throws Exception {
        MemorySegment noop = Linker.nativeLinker().defaultLookup().find("sched_yield").orElseThrow(); // returns 0
        var threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        long self = Thread.currentThread().threadId();
        try (Arena arena = Arena.ofConfined();
             ReadWorkRequests wrs = new ReadWorkRequests(core, arena.allocate(64), noop, 16)) {
            ReadChain c = chain(16, 7);
            for (int i = 0; i < 50_000; i++) { // until the JIT has compiled the post path
                wrs.post(c, 1 + (i & 15));
            }
            long before = threads.getThreadAllocatedBytes(self);
            int posts = 200_000;
            for (int i = 0; i < posts; i++) {
                wrs.post(c, 1 + (i & 15));
            }
            long allocated = threads.getThreadAllocatedBytes(self) - before;
            // 200,000 posts of 1..16 READs: a single byte per post would be 200 kB.
            assertTrue(allocated < 16_384, allocated + " bytes allocated by " + posts + " posts");
        }
    }
}
