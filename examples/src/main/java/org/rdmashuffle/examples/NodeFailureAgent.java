package org.rdmashuffle.examples;

import java.io.File;
import java.lang.reflect.Field;
import java.nio.channels.Selector;

/**
 * The fault harness's "local node fails" ({@code benchmarks/faults/run.sh --faults nodefail}): makes one
 * executor's rdma-shuffle transport unable to go on, as a bug in its requester loop or a dead device would,
 * while the executor itself keeps running. Run as a program, it loads itself as a Java agent into the
 * executor JVM whose process id it is given (the JDK's attach mechanism); loaded, it closes the selector the
 * node's tcp requester loop waits on, so that loop fails the node and every channel it drives.
 *
 * <pre>
 *   java -cp rdma-shuffle-examples.jar org.rdmashuffle.examples.NodeFailureAgent PID AGENT_JAR
 * </pre>
 * {@code AGENT_JAR} is a jar of this class whose manifest names it as {@code Agent-Class} (the harness makes
 * one). Exit code 0 once the agent ran; what it did is in the executor's stderr (one line).
 */
public final class NodeFailureAgent {
    private NodeFailureAgent() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: NodeFailureAgent PID AGENT_JAR");
            System.exit(2);
        }
        com.sun.tools.attach.VirtualMachine vm = com.sun.tools.attach.VirtualMachine.attach(args[0]);
        try {
            vm.loadAgent(new File(args[1]).getAbsolutePath());
        } finally {
            vm.detach();
        }
    }

    /** Runs in the executor JVM, on the attach listener's thread. */
    public static void agentmain(String args) {
        try {
            Class<?> env = Class.forName("org.apache.spark.SparkEnv");
            Object sparkEnv = env.getMethod("get").invoke(null);
            Object manager = env.getMethod("shuffleManager").invoke(sparkEnv);
            Object runtime = field(manager, "runtime");
            if (runtime == null) {
                System.err.println("NodeFailureAgent: no rdma-shuffle runtime in this executor (" + manager.getClass()
                        + "); nothing failed");
                return;
            }
            Object node = field(runtime, "node");
            Object requester = fieldOfType(node, "TcpRequester");
            ((Selector) fieldOfType(requester, "Selector")).close();
            System.err.println("NodeFailureAgent: closed the tcp requester's selector of node " + node
                    + ": its loop fails the node");
        } catch (Throwable t) {
            System.err.println("NodeFailureAgent: cannot fail the node: " + t);
            t.printStackTrace();
        }
    }

    private static Object field(Object o, String name) throws ReflectiveOperationException {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) {
                // a superclass may declare it
            }
        }
        throw new NoSuchFieldException(o.getClass() + "." + name);
    }

    private static Object fieldOfType(Object o, String simpleName) throws ReflectiveOperationException {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            for (Field f : c.getDeclaredFields()) {
                for (Class<?> t = f.getType(); t != null; t = t.getSuperclass()) {
                    if (t.getSimpleName().equals(simpleName)) {
                        f.setAccessible(true);
                        return f.get(o);
                    }
                }
            }
        }
        throw new NoSuchFieldException(o.getClass() + " has no field of type " + simpleName);
    }
}
