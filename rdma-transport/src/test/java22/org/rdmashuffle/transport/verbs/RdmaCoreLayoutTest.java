package org.rdmashuffle.transport.verbs;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The struct offsets and constants {@link RdmaCore} hard-codes, against what a C compiler makes of
 * this machine's rdma-core headers (offsetof, sizeof, the enum values). Skips, saying so, where gcc or
 * the headers (libibverbs-dev, librdmacm-dev) are missing.
 */
class RdmaCoreLayoutTest {
    private static final Path VERBS_H = Path.of("/usr/include/infiniband/verbs.h");
    private static final Path CMA_H = Path.of("/usr/include/rdma/rdma_cma.h");

    /** Name in the C program's output to the value RdmaCore uses. */
    private static Map<String, Long> expected() {
        Map<String, Long> m = new LinkedHashMap<>();
        m.put("offsetof(struct ibv_context, ops) + offsetof(struct ibv_context_ops, poll_cq)", RdmaCore.CTX_OPS_POLL_CQ);
        m.put("offsetof(struct ibv_context, ops) + offsetof(struct ibv_context_ops, req_notify_cq)",
                RdmaCore.CTX_OPS_REQ_NOTIFY_CQ);
        m.put("offsetof(struct ibv_context, ops) + offsetof(struct ibv_context_ops, post_send)",
                RdmaCore.CTX_OPS_POST_SEND);
        m.put("offsetof(struct ibv_qp, qp_num)", RdmaCore.QP_QP_NUM);
        m.put("offsetof(struct ibv_mr, addr)", RdmaCore.MR_ADDR);
        m.put("offsetof(struct ibv_mr, lkey)", RdmaCore.MR_LKEY);
        m.put("offsetof(struct ibv_mr, rkey)", RdmaCore.MR_RKEY);
        m.put("offsetof(struct ibv_comp_channel, fd)", RdmaCore.COMP_CHANNEL_FD);
        m.put("offsetof(struct rdma_event_channel, fd)", RdmaCore.EVENT_CHANNEL_FD);
        m.put("sizeof(struct ibv_wc)", RdmaCore.WC_SIZE);
        m.put("offsetof(struct ibv_wc, wr_id)", RdmaCore.WC_WR_ID);
        m.put("offsetof(struct ibv_wc, status)", RdmaCore.WC_STATUS);
        m.put("offsetof(struct ibv_wc, qp_num)", RdmaCore.WC_QP_NUM);
        m.put("sizeof(struct ibv_sge)", RdmaCore.SGE_SIZE);
        m.put("offsetof(struct ibv_sge, addr)", RdmaCore.SGE_ADDR);
        m.put("offsetof(struct ibv_sge, length)", RdmaCore.SGE_LENGTH);
        m.put("offsetof(struct ibv_sge, lkey)", RdmaCore.SGE_LKEY);
        m.put("sizeof(struct ibv_send_wr)", RdmaCore.WR_SIZE);
        m.put("offsetof(struct ibv_send_wr, wr_id)", RdmaCore.WR_WR_ID);
        m.put("offsetof(struct ibv_send_wr, next)", RdmaCore.WR_NEXT);
        m.put("offsetof(struct ibv_send_wr, sg_list)", RdmaCore.WR_SG_LIST);
        m.put("offsetof(struct ibv_send_wr, num_sge)", RdmaCore.WR_NUM_SGE);
        m.put("offsetof(struct ibv_send_wr, opcode)", RdmaCore.WR_OPCODE);
        m.put("offsetof(struct ibv_send_wr, send_flags)", RdmaCore.WR_SEND_FLAGS);
        m.put("offsetof(struct ibv_send_wr, wr.rdma.remote_addr)", RdmaCore.WR_RDMA_REMOTE_ADDR);
        m.put("offsetof(struct ibv_send_wr, wr.rdma.rkey)", RdmaCore.WR_RDMA_RKEY);
        m.put("sizeof(struct ibv_qp_init_attr)", RdmaCore.QPIA_SIZE);
        m.put("offsetof(struct ibv_qp_init_attr, send_cq)", RdmaCore.QPIA_SEND_CQ);
        m.put("offsetof(struct ibv_qp_init_attr, recv_cq)", RdmaCore.QPIA_RECV_CQ);
        m.put("offsetof(struct ibv_qp_init_attr, cap.max_send_wr)", RdmaCore.QPIA_CAP_MAX_SEND_WR);
        m.put("offsetof(struct ibv_qp_init_attr, cap.max_recv_wr)", RdmaCore.QPIA_CAP_MAX_RECV_WR);
        m.put("offsetof(struct ibv_qp_init_attr, cap.max_send_sge)", RdmaCore.QPIA_CAP_MAX_SEND_SGE);
        m.put("offsetof(struct ibv_qp_init_attr, cap.max_recv_sge)", RdmaCore.QPIA_CAP_MAX_RECV_SGE);
        m.put("offsetof(struct ibv_qp_init_attr, qp_type)", RdmaCore.QPIA_QP_TYPE);
        m.put("offsetof(struct ibv_qp_init_attr, sq_sig_all)", RdmaCore.QPIA_SQ_SIG_ALL);
        m.put("offsetof(struct rdma_cm_event, id)", RdmaCore.EV_ID);
        m.put("offsetof(struct rdma_cm_event, listen_id)", RdmaCore.EV_LISTEN_ID);
        m.put("offsetof(struct rdma_cm_event, event)", RdmaCore.EV_EVENT);
        m.put("offsetof(struct rdma_cm_event, status)", RdmaCore.EV_STATUS);
        m.put("offsetof(struct rdma_cm_event, param.conn.private_data)", RdmaCore.EV_PRIVATE_DATA);
        m.put("offsetof(struct rdma_cm_event, param.conn.private_data_len)", RdmaCore.EV_PRIVATE_DATA_LEN);
        m.put("sizeof(struct rdma_conn_param)", RdmaCore.CP_SIZE);
        m.put("offsetof(struct rdma_conn_param, private_data)", RdmaCore.CP_PRIVATE_DATA);
        m.put("offsetof(struct rdma_conn_param, private_data_len)", RdmaCore.CP_PRIVATE_DATA_LEN);
        m.put("offsetof(struct rdma_conn_param, responder_resources)", RdmaCore.CP_RESPONDER_RESOURCES);
        m.put("offsetof(struct rdma_conn_param, initiator_depth)", RdmaCore.CP_INITIATOR_DEPTH);
        m.put("offsetof(struct rdma_conn_param, retry_count)", RdmaCore.CP_RETRY_COUNT);
        m.put("offsetof(struct rdma_conn_param, rnr_retry_count)", RdmaCore.CP_RNR_RETRY_COUNT);
        m.put("offsetof(struct rdma_cm_id, verbs)", RdmaCore.ID_VERBS);
        m.put("offsetof(struct rdma_cm_id, qp)", RdmaCore.ID_QP);
        m.put("offsetof(struct rdma_cm_id, route.addr.src_addr)", RdmaCore.ID_SRC_ADDR);
        m.put("offsetof(struct rdma_cm_id, route.addr.dst_addr)", RdmaCore.ID_DST_ADDR);
        m.put("sizeof(struct ibv_device_attr)", RdmaCore.DA_SIZE);
        m.put("offsetof(struct ibv_device_attr, max_qp_wr)", RdmaCore.DA_MAX_QP_WR);
        m.put("offsetof(struct ibv_device_attr, max_cqe)", RdmaCore.DA_MAX_CQE);
        m.put("offsetof(struct ibv_device_attr, max_qp_rd_atom)", RdmaCore.DA_MAX_QP_RD_ATOM);
        m.put("offsetof(struct ibv_device_attr, max_qp_init_rd_atom)", RdmaCore.DA_MAX_QP_INIT_RD_ATOM);
        m.put("RDMA_PS_TCP", (long) RdmaCore.RDMA_PS_TCP);
        m.put("RDMA_OPTION_ID", (long) RdmaCore.RDMA_OPTION_ID);
        m.put("RDMA_OPTION_ID_TOS", (long) RdmaCore.RDMA_OPTION_ID_TOS);
        m.put("IBV_QPT_RC", (long) RdmaCore.IBV_QPT_RC);
        m.put("IBV_WR_RDMA_READ", (long) RdmaCore.IBV_WR_RDMA_READ);
        m.put("IBV_SEND_SIGNALED", (long) RdmaCore.IBV_SEND_SIGNALED);
        m.put("IBV_ACCESS_LOCAL_WRITE", (long) VerbsDevice.ACCESS_LOCAL_WRITE);
        m.put("IBV_ACCESS_REMOTE_WRITE", (long) VerbsDevice.ACCESS_REMOTE_WRITE);
        m.put("IBV_ACCESS_REMOTE_READ", (long) VerbsDevice.ACCESS_REMOTE_READ);
        m.put("IBV_WC_SUCCESS", (long) WcStatus.SUCCESS);
        m.put("IBV_WC_WR_FLUSH_ERR", (long) WcStatus.WR_FLUSH_ERR);
        m.put("RDMA_CM_EVENT_ADDR_RESOLVED", (long) RdmaCore.EV_ADDR_RESOLVED);
        m.put("RDMA_CM_EVENT_ADDR_ERROR", (long) RdmaCore.EV_ADDR_ERROR);
        m.put("RDMA_CM_EVENT_ROUTE_RESOLVED", (long) RdmaCore.EV_ROUTE_RESOLVED);
        m.put("RDMA_CM_EVENT_ROUTE_ERROR", (long) RdmaCore.EV_ROUTE_ERROR);
        m.put("RDMA_CM_EVENT_CONNECT_REQUEST", (long) RdmaCore.EV_CONNECT_REQUEST);
        m.put("RDMA_CM_EVENT_CONNECT_ERROR", (long) RdmaCore.EV_CONNECT_ERROR);
        m.put("RDMA_CM_EVENT_UNREACHABLE", (long) RdmaCore.EV_UNREACHABLE);
        m.put("RDMA_CM_EVENT_REJECTED", (long) RdmaCore.EV_REJECTED);
        m.put("RDMA_CM_EVENT_ESTABLISHED", (long) RdmaCore.EV_ESTABLISHED);
        m.put("RDMA_CM_EVENT_DISCONNECTED", (long) RdmaCore.EV_DISCONNECTED);
        m.put("RDMA_CM_EVENT_DEVICE_REMOVAL", (long) RdmaCore.EV_DEVICE_REMOVAL);
        m.put("POLLIN", (long) RdmaCore.POLLIN);
        m.put("F_GETFL", (long) RdmaCore.F_GETFL);
        m.put("F_SETFL", (long) RdmaCore.F_SETFL);
        m.put("O_NONBLOCK", (long) RdmaCore.O_NONBLOCK);
        m.put("EAGAIN", (long) RdmaCore.EAGAIN);
        m.put("EINTR", (long) RdmaCore.EINTR);
        return m;
    }

    @Test
    void shouldUseTheOffsetsAndConstantsOfThisMachinesRdmaCoreHeaders(@TempDir Path dir) throws Exception {
        assumeTrue(Files.isRegularFile(VERBS_H) && Files.isRegularFile(CMA_H),
                "rdma-core's headers are missing (" + VERBS_H + ", " + CMA_H + "): install libibverbs-dev and "
                        + "librdmacm-dev to check RdmaCore's layout");
        assumeTrue(onPath("gcc"), "gcc is missing: install it to check RdmaCore's layout against the headers");
        Map<String, Long> expected = expected();
        StringBuilder c = new StringBuilder("#include <stdio.h>\n#include <stddef.h>\n#include <errno.h>\n"
                + "#include <fcntl.h>\n#include <poll.h>\n#include <infiniband/verbs.h>\n#include <rdma/rdma_cma.h>\n"
                + "int main(void) {\n");
        for (String k : expected.keySet()) {
            c.append("  printf(\"%s=%ld\\n\", \"").append(k.replace("\"", "\\\"")).append("\", (long) (").append(k)
                    .append("));\n");
        }
        c.append("  return 0;\n}\n");
        Path src = dir.resolve("layout.c");
        Path exe = dir.resolve("layout");
        Files.writeString(src, c);
        String compiled = run(dir, "gcc", "-o", exe.toString(), src.toString());
        assertTrue(Files.isExecutable(exe), "gcc failed: " + compiled);
        Map<String, Long> actual = new HashMap<>();
        for (String line : run(dir, exe.toString()).split("\n")) {
            int eq = line.lastIndexOf('=');
            if (eq > 0) {
                actual.put(line.substring(0, eq), Long.parseLong(line.substring(eq + 1).trim()));
            }
        }
        for (Map.Entry<String, Long> e : expected.entrySet()) {
            assertEquals(actual.get(e.getKey()), e.getValue(), e.getKey());
        }
    }

    private static boolean onPath(String tool) {
        for (String d : System.getenv().getOrDefault("PATH", "").split(":")) {
            if (!d.isEmpty() && Files.isExecutable(Path.of(d, tool))) {
                return true;
            }
        }
        return false;
    }

    private static String run(Path dir, String... cmd) throws IOException, InterruptedException {
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertTrue(p.waitFor(120, TimeUnit.SECONDS), String.join(" ", cmd) + " did not finish");
        return out;
    }
}
