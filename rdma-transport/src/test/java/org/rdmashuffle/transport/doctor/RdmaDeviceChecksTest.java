package org.rdmashuffle.transport.doctor;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class RdmaDeviceChecksTest {
    private static final String IB = "sys/class/infiniband/";
    private static final String ZERO = "0000:0000:0000:0000:0000:0000:0000:0000";

    @TempDir
    Path tmp;

    private FakeHost roceDevice(String state) {
        String port = IB + "mlx5_0/ports/1/";
        return new FakeHost(tmp)
                .file(IB + "mlx5_0/node_type", "1: CA")
                .file(port + "state", state)
                .file(port + "phys_state", "5: LinkUp")
                .file(port + "link_layer", "Ethernet")
                .file(port + "gids/0", "fe80:0000:0000:0000:0250:56ff:fe8a:1234")
                .file(port + "gids/1", "fe80:0000:0000:0000:0250:56ff:fe8a:1234")
                .file(port + "gids/2", "0000:0000:0000:0000:0000:ffff:0a00:0005")
                .file(port + "gids/3", ZERO)
                .file(port + "gid_attrs/types/0", "IB/RoCE v1")
                .file(port + "gid_attrs/types/1", "RoCE v2")
                .file(port + "gid_attrs/types/2", "RoCE v2")
                .file(port + "gid_attrs/ndevs/0", "ens1f0");
    }

    @Test
    void shouldPassWithRoceV2GidsAndTheNetdevWhenTheRocePortIsActive() {
        List<Check> checks = RdmaDeviceChecks.run(roceDevice("4: ACTIVE").context("verbs"));

        assertEquals(1, checks.size(), checks.toString());
        Check port = checks.get(0);
        assertEquals("port mlx5_0/1", port.name());
        assertEquals(Check.Status.PASS, port.status(), port.toString());
        assertTrue(port.detail().startsWith("ACTIVE (LinkUp), RoCE on ens1f0, GIDs: 0 fe80:"), port.detail());
        assertTrue(port.detail().contains("1 fe80:0000:0000:0000:0250:56ff:fe8a:1234 RoCE v2"), port.detail());
        assertTrue(port.detail().contains("2 0000:0000:0000:0000:0000:ffff:0a00:0005 RoCE v2"), port.detail());
        assertTrue(!port.detail().contains("3 " + ZERO), "an unused GID is not listed: " + port.detail());
    }

    @Test
    void shouldFailUnderVerbsAndWarnUnderAutoWhenThePortIsDown() {
        FakeHost host = roceDevice("1: DOWN").file(IB + "mlx5_0/ports/1/phys_state", "3: Disabled");

        Check verbs = RdmaDeviceChecks.run(host.context("verbs")).get(0);
        Check auto = RdmaDeviceChecks.run(host.context("auto")).get(0);

        assertEquals(Check.Status.FAIL, verbs.status(), verbs.toString());
        assertTrue(verbs.detail().startsWith("DOWN (Disabled)"), verbs.detail());
        assertTrue(verbs.fix().contains("ip link set ens1f0 up"), verbs.fix());
        assertEquals(Check.Status.WARN, auto.status(), auto.toString());
    }

    @Test
    void shouldWarnWhenARocePortHasOnlyRoceV1Gids() {
        FakeHost host = roceDevice("4: ACTIVE").file(IB + "mlx5_0/ports/1/gid_attrs/types/1", "IB/RoCE v1")
                .file(IB + "mlx5_0/ports/1/gid_attrs/types/2", "IB/RoCE v1");

        Check c = RdmaDeviceChecks.run(host.context("verbs")).get(0);

        assertEquals(Check.Status.WARN, c.status(), c.toString());
        assertTrue(c.fix().contains("RoCE v2"), c.fix());
    }

    @Test
    void shouldCallTheDeviceIwarpWhenItsNodeTypeIsRnic() {
        String port = IB + "siw0/ports/1/";
        FakeHost host = new FakeHost(tmp)
                .file(IB + "siw0/node_type", "4: RNIC")
                .file(port + "state", "4: ACTIVE")
                .file(port + "phys_state", "5: LinkUp")
                .file(port + "link_layer", "Ethernet")
                .file(port + "gids/0", "5254:0012:3456:0000:0000:0000:0000:0000")
                .dir(IB + "siw0/device/net/eth1");

        Check c = RdmaDeviceChecks.run(host.context("auto")).get(0);

        assertEquals(Check.Status.PASS, c.status(), c.toString());
        assertEquals("ACTIVE (LinkUp), iWARP on eth1, GIDs: 0 5254:0012:3456:0000:0000:0000:0000:0000", c.detail());
    }

    @Test
    void shouldNameTheParentNetdevWhenASoftRoceDeviceHasNoOther() {
        String port = IB + "rxe0/ports/1/";
        FakeHost host = new FakeHost(tmp)
                .file(IB + "rxe0/node_type", "1: CA")
                .file(IB + "rxe0/parent", "eth1")
                .file(port + "state", "4: ACTIVE")
                .file(port + "phys_state", "5: LinkUp")
                .file(port + "link_layer", "Ethernet")
                .file(port + "gids/0", "0000:0000:0000:0000:0000:ffff:0a00:0207")
                .file(port + "gid_attrs/types/0", "RoCE v2");

        Check c = RdmaDeviceChecks.run(host.context("verbs")).get(0);

        assertEquals(Check.Status.PASS, c.status(), c.toString());
        assertEquals("ACTIVE (LinkUp), RoCE on eth1, GIDs: 0 0000:0000:0000:0000:0000:ffff:0a00:0207 RoCE v2",
                c.detail());
    }

    @Test
    void shouldListEveryPortInOrderWhenAnInfinibandDeviceHasSeveral() {
        FakeHost host = new FakeHost(tmp).file(IB + "mlx4_0/node_type", "1: CA");
        for (int p : new int[] {1, 2, 10}) {
            String port = IB + "mlx4_0/ports/" + p + "/";
            host.file(port + "state", p == 2 ? "2: INIT" : "4: ACTIVE").file(port + "link_layer", "InfiniBand")
                    .file(port + "phys_state", "5: LinkUp").file(port + "gids/0", "fe80:0000:0000:0000:0002:c903:0001:000" + p);
        }

        List<Check> checks = RdmaDeviceChecks.run(host.context("verbs"));

        assertEquals(List.of("port mlx4_0/1", "port mlx4_0/2", "port mlx4_0/10"),
                checks.stream().map(Check::name).toList());
        assertEquals(Check.Status.PASS, checks.get(0).status());
        assertTrue(checks.get(0).detail().contains("InfiniBand"), checks.get(0).detail());
        assertEquals(Check.Status.FAIL, checks.get(1).status());
        assertTrue(checks.get(1).fix().contains("subnet manager"), checks.get(1).fix());
    }

    @Test
    void shouldWarnUnderAutoFailUnderVerbsAndSkipUnderTcpWhenThereIsNoDevice() {
        FakeHost host = new FakeHost(tmp);

        Check auto = RdmaDeviceChecks.run(host.context("auto")).get(0);
        Check verbs = RdmaDeviceChecks.run(host.context("verbs")).get(0);
        Check tcp = RdmaDeviceChecks.run(host.context("tcp")).get(0);

        assertEquals(Check.Status.WARN, auto.status());
        assertTrue(auto.detail().startsWith("no RDMA device: executors will use tcp"), auto.detail());
        assertEquals(Check.Status.FAIL, verbs.status());
        assertTrue(verbs.detail().startsWith("no RDMA device: provider=verbs cannot start"), verbs.detail());
        assertEquals(Check.Status.SKIP, tcp.status());
    }
}
