package org.rdmashuffle.transport.verbs;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;

/**
 * libibverbs and librdmacm (rdma-core), bound with {@code java.lang.foreign}: the exported functions
 * the provider calls, the three data-path calls that {@code verbs.h} makes {@code static inline}, and
 * the struct offsets both use. No JNI library of our own.
 *
 * <p><b>The inline calls.</b> {@code ibv_post_send}, {@code ibv_poll_cq} and {@code ibv_req_notify_cq}
 * are inline functions in {@code verbs.h} that call through the device context's ops table
 * ({@code qp->context->ops.post_send}, {@code cq->context->ops.poll_cq}, ...). They are called here the
 * same way: the function pointer is read from {@code struct ibv_context} and called through one
 * downcall handle per signature. Because every program built against rdma-core has these inline calls
 * compiled in, the offsets of {@code ops.poll_cq}, {@code ops.req_notify_cq} and {@code ops.post_send}
 * are part of libibverbs' binary interface (IBVERBS_1.1), which rdma-core keeps stable (ops it no
 * longer calls became {@code _compat_} placeholders, keeping the later slots in place); so are the
 * public structs below. Offsets
 * are for LP64 Linux (x86_64, aarch64, ppc64le), checked against rdma-core 44's headers by
 * {@code RdmaCoreLayoutTest}, which compiles {@code offsetof} of each field where gcc and the headers
 * exist.
 */
final class RdmaCore {
    // struct ibv_context
    static final long CTX_OPS_POLL_CQ = 96;
    static final long CTX_OPS_REQ_NOTIFY_CQ = 104;
    static final long CTX_OPS_POST_SEND = 208;
    // struct ibv_qp, ibv_cq, ibv_mr, ibv_comp_channel, rdma_event_channel
    static final long QP_QP_NUM = 52;
    static final long MR_ADDR = 16;
    static final long MR_LKEY = 36;
    static final long MR_RKEY = 40;
    static final long COMP_CHANNEL_FD = 8;
    static final long EVENT_CHANNEL_FD = 0;
    // struct ibv_wc (48 bytes)
    static final long WC_SIZE = 48;
    static final long WC_WR_ID = 0;
    static final long WC_STATUS = 8;
    static final long WC_QP_NUM = 28;
    // struct ibv_sge (16 bytes)
    static final long SGE_SIZE = 16;
    static final long SGE_ADDR = 0;
    static final long SGE_LENGTH = 8;
    static final long SGE_LKEY = 12;
    // struct ibv_send_wr (128 bytes)
    static final long WR_SIZE = 128;
    static final long WR_WR_ID = 0;
    static final long WR_NEXT = 8;
    static final long WR_SG_LIST = 16;
    static final long WR_NUM_SGE = 24;
    static final long WR_OPCODE = 28;
    static final long WR_SEND_FLAGS = 32;
    static final long WR_RDMA_REMOTE_ADDR = 40;
    static final long WR_RDMA_RKEY = 48;
    // struct ibv_qp_init_attr (64 bytes)
    static final long QPIA_SIZE = 64;
    static final long QPIA_SEND_CQ = 8;
    static final long QPIA_RECV_CQ = 16;
    static final long QPIA_CAP_MAX_SEND_WR = 32;
    static final long QPIA_CAP_MAX_RECV_WR = 36;
    static final long QPIA_CAP_MAX_SEND_SGE = 40;
    static final long QPIA_CAP_MAX_RECV_SGE = 44;
    static final long QPIA_QP_TYPE = 52;
    static final long QPIA_SQ_SIG_ALL = 56;
    // struct rdma_cm_event (80 bytes)
    static final long EV_ID = 0;
    static final long EV_LISTEN_ID = 8;
    static final long EV_EVENT = 16;
    static final long EV_STATUS = 20;
    /** param.conn.private_data and .private_data_len of a connect request (valid until the event is acked). */
    static final long EV_PRIVATE_DATA = 24;
    static final long EV_PRIVATE_DATA_LEN = 32;
    // struct rdma_conn_param (24 bytes)
    static final long CP_SIZE = 24;
    static final long CP_PRIVATE_DATA = 0;
    static final long CP_PRIVATE_DATA_LEN = 8;
    static final long CP_RESPONDER_RESOURCES = 9;
    static final long CP_INITIATOR_DEPTH = 10;
    static final long CP_RETRY_COUNT = 12;
    static final long CP_RNR_RETRY_COUNT = 13;
    // struct rdma_cm_id
    static final long ID_VERBS = 0;
    static final long ID_QP = 24;
    static final long ID_SRC_ADDR = 32;
    static final long ID_DST_ADDR = 160;
    // struct ibv_device_attr (232 bytes)
    static final long DA_SIZE = 232;
    static final long DA_MAX_QP_WR = 112;
    static final long DA_MAX_CQE = 132;
    static final long DA_MAX_QP_RD_ATOM = 144;
    static final long DA_MAX_QP_INIT_RD_ATOM = 156;

    static final int RDMA_PS_TCP = 0x0106;
    // rdma_set_option's level and option: the id's ToS byte (uint8_t)
    static final int RDMA_OPTION_ID = 0;
    static final int RDMA_OPTION_ID_TOS = 0;
    static final int IBV_QPT_RC = 2;
    static final int IBV_WR_RDMA_READ = 4;
    static final int IBV_SEND_SIGNALED = 2;

    // enum rdma_cm_event_type
    static final int EV_ADDR_RESOLVED = 0;
    static final int EV_ADDR_ERROR = 1;
    static final int EV_ROUTE_RESOLVED = 2;
    static final int EV_ROUTE_ERROR = 3;
    static final int EV_CONNECT_REQUEST = 4;
    static final int EV_CONNECT_ERROR = 6;
    static final int EV_UNREACHABLE = 7;
    static final int EV_REJECTED = 8;
    static final int EV_ESTABLISHED = 9;
    static final int EV_DISCONNECTED = 10;
    static final int EV_DEVICE_REMOVAL = 11;

    static final short POLLIN = 1;
    static final int F_GETFL = 3;
    static final int F_SETFL = 4;
    static final int O_NONBLOCK = 0x800;
    static final int EAGAIN = 11;
    static final int EINTR = 4;

    /** All of memory, for reading and writing native structs at their addresses. */
    static final MemorySegment MEM = MemorySegment.NULL.reinterpret(Long.MAX_VALUE);

    private static final Linker LINKER = Linker.nativeLinker();
    private static final MemoryLayout ERRNO_STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = ERRNO_STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final Linker.Option CAPTURE_ERRNO = Linker.Option.captureCallState("errno");
    private static final ThreadLocal<MemorySegment> CALL_STATE =
            ThreadLocal.withInitial(() -> Arena.ofAuto().allocate(ERRNO_STATE));

    // librdmacm
    final MethodHandle createEventChannel;
    final MethodHandle destroyEventChannel;
    final MethodHandle createId;
    final MethodHandle destroyId;
    final MethodHandle bindAddr;
    final MethodHandle setOption;
    final MethodHandle listen;
    final MethodHandle resolveAddr;
    final MethodHandle resolveRoute;
    final MethodHandle createQp;
    final MethodHandle destroyQp;
    final MethodHandle connect;
    final MethodHandle accept;
    final MethodHandle reject;
    final MethodHandle disconnect;
    final MethodHandle getCmEvent;
    final MethodHandle ackCmEvent;
    final MethodHandle eventStr;
    // libibverbs
    final MethodHandle allocPd;
    final MethodHandle deallocPd;
    final MethodHandle regMr;
    final MethodHandle deregMr;
    final MethodHandle createCompChannel;
    final MethodHandle destroyCompChannel;
    final MethodHandle createCq;
    final MethodHandle destroyCq;
    final MethodHandle getCqEvent;
    final MethodHandle ackCqEvents;
    final MethodHandle queryDevice;
    final MethodHandle deviceName;
    // libc
    final MethodHandle poll;
    final MethodHandle fcntl;
    final MethodHandle strerror;
    // verbs.h's inline calls, through a function pointer passed first: (fn, cq, n, wc), (fn, cq, solicited),
    // (fn, qp, wr, bad_wr).
    final MethodHandle pollCq;
    final MethodHandle reqNotifyCq;
    final MethodHandle postSend;

    private RdmaCore(SymbolLookup ibv, SymbolLookup cm) {
        SymbolLookup libc = LINKER.defaultLookup();
        createEventChannel = errno(cm, "rdma_create_event_channel", FunctionDescriptor.of(ADDRESS));
        destroyEventChannel = plain(cm, "rdma_destroy_event_channel", FunctionDescriptor.ofVoid(ADDRESS));
        createId = errno(cm, "rdma_create_id", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, JAVA_INT));
        destroyId = plain(cm, "rdma_destroy_id", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        bindAddr = errno(cm, "rdma_bind_addr", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        setOption = errno(cm, "rdma_set_option",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT, ADDRESS, JAVA_LONG));
        listen = errno(cm, "rdma_listen", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        resolveAddr = errno(cm, "rdma_resolve_addr",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, JAVA_INT));
        resolveRoute = errno(cm, "rdma_resolve_route", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        createQp = errno(cm, "rdma_create_qp", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
        destroyQp = plain(cm, "rdma_destroy_qp", FunctionDescriptor.ofVoid(ADDRESS));
        connect = errno(cm, "rdma_connect", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        accept = errno(cm, "rdma_accept", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        reject = plain(cm, "rdma_reject", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_BYTE));
        disconnect = plain(cm, "rdma_disconnect", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        getCmEvent = errno(cm, "rdma_get_cm_event", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        ackCmEvent = plain(cm, "rdma_ack_cm_event", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        eventStr = plain(cm, "rdma_event_str", FunctionDescriptor.of(ADDRESS, JAVA_INT));
        allocPd = errno(ibv, "ibv_alloc_pd", FunctionDescriptor.of(ADDRESS, ADDRESS));
        deallocPd = plain(ibv, "ibv_dealloc_pd", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        regMr = errno(ibv, "ibv_reg_mr", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT));
        deregMr = plain(ibv, "ibv_dereg_mr", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        createCompChannel = errno(ibv, "ibv_create_comp_channel", FunctionDescriptor.of(ADDRESS, ADDRESS));
        destroyCompChannel = plain(ibv, "ibv_destroy_comp_channel", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        createCq = errno(ibv, "ibv_create_cq",
                FunctionDescriptor.of(ADDRESS, ADDRESS, JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
        destroyCq = plain(ibv, "ibv_destroy_cq", FunctionDescriptor.of(JAVA_INT, ADDRESS));
        getCqEvent = errno(ibv, "ibv_get_cq_event", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
        ackCqEvents = plain(ibv, "ibv_ack_cq_events", FunctionDescriptor.ofVoid(ADDRESS, JAVA_INT));
        queryDevice = plain(ibv, "ibv_query_device", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        deviceName = plain(ibv, "ibv_get_device_name", FunctionDescriptor.of(ADDRESS, ADDRESS));
        poll = errno(libc, "poll", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT));
        fcntl = LINKER.downcallHandle(find(libc, "fcntl"), FunctionDescriptor.of(JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT),
                Linker.Option.firstVariadicArg(2));
        strerror = plain(libc, "strerror", FunctionDescriptor.of(ADDRESS, JAVA_INT));
        // poll_cq reads the completion queue the device shares with user space on every provider: critical.
        // post_send and req_notify_cq can enter the kernel (siw rings its doorbell with a system call, rxe arms
        // the queue through one): a regular downcall, so the JVM can reach a safepoint meanwhile.
        pollCq = LINKER.downcallHandle(FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS),
                Linker.Option.critical(false));
        reqNotifyCq = LINKER.downcallHandle(FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        postSend = LINKER.downcallHandle(FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
    }

    private static volatile RdmaCore instance;
    private static volatile String failure;

    /**
     * The bindings, loading libibverbs.so.1 and librdmacm.so.1 on first use.
     *
     * @throws UnsatisfiedLinkError naming what did not load and what to install
     * @throws IllegalCallerException when the JVM denies native access to this code
     */
    static RdmaCore get() {
        RdmaCore c = instance;
        if (c != null) {
            return c;
        }
        synchronized (RdmaCore.class) {
            if (instance == null) {
                if (failure != null) {
                    throw new UnsatisfiedLinkError(failure);
                }
                try {
                    instance = new RdmaCore(library("libibverbs.so.1"), library("librdmacm.so.1"));
                } catch (UnsatisfiedLinkError e) {
                    failure = e.getMessage();
                    throw e;
                }
            }
            return instance;
        }
    }

    static SymbolLookup library(String name) {
        try {
            return SymbolLookup.libraryLookup(name, Arena.global());
        } catch (IllegalArgumentException e) {
            throw new UnsatisfiedLinkError(name + " does not load (" + e.getMessage() + "): install rdma-core's "
                    + "user-space libraries (Debian and Ubuntu: libibverbs1 librdmacm1 ibverbs-providers; RHEL and "
                    + "Fedora: libibverbs librdmacm)");
        }
    }

    private static MemorySegment find(SymbolLookup lib, String name) {
        return lib.find(name).orElseThrow(() -> new UnsatisfiedLinkError("symbol " + name + " not found"));
    }

    private static MethodHandle plain(SymbolLookup lib, String name, FunctionDescriptor d) {
        return LINKER.downcallHandle(find(lib, name), d);
    }

    /** A handle whose first argument is the call-state segment errno is captured into. */
    private static MethodHandle errno(SymbolLookup lib, String name, FunctionDescriptor d) {
        return LINKER.downcallHandle(find(lib, name), d, CAPTURE_ERRNO);
    }

    /** This thread's call-state segment, passed first to the errno-capturing handles. */
    static MemorySegment state() {
        return CALL_STATE.get();
    }

    /** The errno the last errno-capturing call on this thread left. */
    static int lastErrno() {
        return (int) ERRNO.get(CALL_STATE.get(), 0L);
    }

    /** "strerror (errno N)" of the last errno-capturing call on this thread. */
    String lastError() {
        return describe(lastErrno());
    }

    String describe(int errno) {
        try {
            MemorySegment s = (MemorySegment) strerror.invokeExact(errno);
            return (s.equals(MemorySegment.NULL) ? "error" : s.reinterpret(256).getString(0)) + " (errno " + errno + ")";
        } catch (Throwable t) {
            return "errno " + errno;
        }
    }

    String eventName(int event) {
        try {
            MemorySegment s = (MemorySegment) eventStr.invokeExact(event);
            return s.equals(MemorySegment.NULL) ? "rdma_cm event " + event : s.reinterpret(64).getString(0);
        } catch (Throwable t) {
            return "rdma_cm event " + event;
        }
    }

    static long getLong(long address) {
        return MEM.get(ValueLayout.JAVA_LONG_UNALIGNED, address);
    }

    static int getInt(long address) {
        return MEM.get(ValueLayout.JAVA_INT_UNALIGNED, address);
    }

    /** A zero-length segment at {@code address}, for passing a pointer. */
    static MemorySegment at(long address) {
        return MemorySegment.ofAddress(address);
    }
}
