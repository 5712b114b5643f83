package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.rdmashuffle.conf.RdmaShuffleConf.VerbsApi;

/** How the foreign-function provider is found, and what it says when it cannot run, on Java 22+. */
class FfmProviderProbeTest {

    @Test
    void shouldLoadFromTheJava22ClassesAndFindRdmaCoreWhereItsLibrariesAreInstalled() {
        Optional<String> missing = new FfmDeviceFactory().missing();
        assumeTrue(missing.isEmpty() || !missing.get().contains("does not load"),
                "rdma-core's libraries are not installed here: " + missing.orElse(""));
        assertEquals(Optional.empty(), missing);
        assertEquals("java.lang.foreign", new FfmDeviceFactory().api());
    }

    @Test
    void shouldNameRdmaCorePackagesWhenALibraryIsMissing() {
        UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class,
                () -> RdmaCore.library("libibverbs-that-is-not-there.so.1"));
        assertTrue(e.getMessage().contains("libibverbs-that-is-not-there.so.1"), e.getMessage());
        assertTrue(e.getMessage().contains("rdma-core"), e.getMessage());
        assertTrue(e.getMessage().contains("librdmacm1"), e.getMessage());
    }

    @Test
    void shouldSayThereIsNoRdmaDeviceBeforeAnythingElseOnAMachineWithout() {
        assumeTrue(!hasRdmaDevice(), "this machine has an RDMA device");
        Optional<String> m = VerbsApis.missing(VerbsApi.FFM);
        assertTrue(m.isPresent());
        assertTrue(m.get().contains("no RDMA device"), m.get());
    }

    @Test
    void shouldFailOpeningWithTheRdmaCmErrorWhenTheKernelHasNoRdmaCm() {
        assumeTrue(!Files.exists(Path.of("/dev/infiniband/rdma_cm")), "this machine has /dev/infiniband/rdma_cm");
        assumeTrue(new FfmDeviceFactory().missing().isEmpty(), "rdma-core's libraries are not installed here");
        IOException e = assertThrows(IOException.class, () -> new FfmDeviceFactory().open(null,
                new InetSocketAddress("127.0.0.1", 0), new QueuePairParameters(16, 7, 7), 16, 1024, 100));
        assertTrue(e.getMessage().contains("rdma_create_event_channel"), e.getMessage());
        assertTrue(e.getMessage().contains("rdma_cm"), e.getMessage());
    }

    private static boolean hasRdmaDevice() {
        try (var s = Files.list(Path.of("/sys/class/infiniband"))) {
            return s.findAny().isPresent();
        } catch (IOException e) {
            return false;
        }
    }
}
