package org.rdmashuffle.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.fabric8.kubernetes.api.model.Container;
import io.fabric8.kubernetes.api.model.EnvVar;
import io.fabric8.kubernetes.api.model.Pod;
import io.fabric8.kubernetes.api.model.PodStatusBuilder;
import io.fabric8.kubernetes.api.model.Quantity;
import io.fabric8.kubernetes.client.KubernetesClient;
import io.fabric8.kubernetes.client.server.mock.KubernetesCrudDispatcher;
import io.fabric8.kubernetes.client.server.mock.KubernetesMockServer;
import io.fabric8.mockwebserver.Context;
import io.fabric8.kubernetes.client.utils.Serialization;
import io.fabric8.mockwebserver.MockWebServer;
import io.fabric8.mockwebserver.http.Buffer;
import io.fabric8.mockwebserver.http.MockResponse;
import io.fabric8.mockwebserver.http.RecordedRequest;
import java.io.IOException;
import java.io.Reader;
import java.math.BigDecimal;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.spark.SecurityManager;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.deploy.k8s.Constants;
import org.apache.spark.rpc.RpcEndpointRef;
import org.apache.spark.rpc.RpcEnv;
import org.apache.spark.scheduler.cluster.CoarseGrainedClusterMessages.RetrieveSparkAppConfig;
import org.apache.spark.scheduler.cluster.CoarseGrainedClusterMessages.SparkAppConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.rdmashuffle.conf.RdmaShuffleConf;
import scala.Option;
import scala.Tuple2;
import scala.reflect.ClassTag$;

/**
 * The Kubernetes recipe of docs/deploying.md, as far as a machine without a cluster can check it: Spark's own
 * Kubernetes backend (spark-kubernetes 4.2, client mode: the driver is this JVM) runs against fabric8's mock API
 * server with the documented pod template and configuration (the very files in docs/kubernetes/), and the executor
 * pods it creates there, and the configuration an executor of such a pod fetches from the driver, must carry all of
 * it. No pod runs: the mock server only stores what Spark asks for.
 */
class KubernetesExecutorPodTest {
    private static final String NAMESPACE = "rdma-shuffle";
    private static final int EXECUTORS = 2;
    private static final String TEMPLATE_KEY = "spark.kubernetes.executor.podTemplateFile";
    private static final String FALLBACK_KEY = RdmaShuffleConf.FALLBACK.name();

    @Test
    @Timeout(value = 120, unit = TimeUnit.SECONDS)
    void shouldAskForExecutorPodsCarryingTheDocumentedSetUpWhenSparkRunsAgainstAnApiServer() throws Exception {
        Path docs = docsKubernetes();
        Path template = docs.resolve("executor-pod-template.yaml");
        Map<String, String> documented = load(docs.resolve("rdma-shuffle.conf"));
        assertEquals(template.getFileName().toString(), Path.of(documented.get(TEMPLATE_KEY)).getFileName().toString(),
                "rdma-shuffle.conf names the template beside it");
        // The documented spark.shuffle.rdma.* keys exist and their values pass the plugin's own validation.
        RdmaShuffleConf rdma = new RdmaShuffleConf(documented);
        assertEquals(RdmaShuffleConf.Provider.VERBS, rdma.provider());
        assertEquals(RdmaShuffleConf.Fallback.NEVER, rdma.fallback());
        assertEquals("net1", rdma.bindAddress());

        KubernetesMockServer server = new KubernetesMockServer(new Context(), new MockWebServer(), new HashMap<>(),
                new PendingPodsDispatcher(), false);
        server.init(InetAddress.getLoopbackAddress(), 0);
        try (KubernetesClient api = server.createClient()) {
            SparkConf conf = new SparkConf(false)
                    .setMaster("k8s://http://127.0.0.1:" + server.getPort())
                    .setAppName("rdma-shuffle-k8s-pods")
                    .set("spark.kubernetes.namespace", NAMESPACE)
                    .set("spark.executor.instances", Integer.toString(EXECUTORS))
                    .set("spark.scheduler.minRegisteredResourcesRatio", "0")
                    .set("spark.ui.enabled", "false")
                    .set("spark.driver.host", "127.0.0.1")
                    .set("spark.driver.bindAddress", "127.0.0.1");
            documented.forEach(conf::set);
            conf.set(TEMPLATE_KEY, template.toAbsolutePath().toString());
            // Under fallback=never the driver checks that verbs can run on its own host; this machine has no RDMA
            // device, so the driver starts with fallback=auto and the documented value is put back before any
            // executor fetches the configuration (the driver reads it at the first fetch).
            conf.set(FALLBACK_KEY, "auto");
            SparkContext sc = new SparkContext(conf);
            List<Pod> pods;
            try {
                sc.conf().set(FALLBACK_KEY, documented.get(FALLBACK_KEY));
                pods = awaitExecutorPods(api, sc.applicationId());
                for (Pod pod : pods) {
                    assertPodCarriesTheTemplateAndSparksOwnSettings(pod, documented, sc.applicationId());
                }
                Map<String, String> executorConf = fetchConfAsAnExecutorDoes(pods.get(0));
                documented.forEach((key, value) -> {
                    if (!key.equals(TEMPLATE_KEY)) {
                        assertEquals(value, executorConf.get(key), "what an executor gets for " + key);
                    }
                });
                assertEquals(sc.applicationId(), executorConf.get("spark.app.id"));
            } finally {
                sc.stop();
            }
            // Spark's own clean-up still applies: the executor pods are deleted when the application stops.
            assertEquals(List.of(), executorPods(api, sc.applicationId()).stream()
                    .map(p -> p.getMetadata().getName()).collect(Collectors.toList()));
        } finally {
            server.destroy();
        }
    }

    /**
     * fabric8's CRUD mock stores a pod as sent; an API server gives every pod it creates the phase Pending (and
     * Spark's pod watcher expects a status). Nothing else of the pod is touched.
     */
    private static final class PendingPodsDispatcher extends KubernetesCrudDispatcher {
        @Override
        public MockResponse handleCreate(RecordedRequest request) {
            if (request.getPath().matches(".*/pods/?(\\?.*)?")) {
                Pod pod = Serialization.unmarshal(request.getUtf8Body(), Pod.class);
                if (pod.getStatus() == null) {
                    pod.setStatus(new PodStatusBuilder().withPhase("Pending").build());
                }
                request = new RecordedRequest(request.getHttpVersion(), request.method(), request.getPath(),
                        request.getHeaders(), new Buffer().writeUtf8(Serialization.asJson(pod)));
            }
            return super.handleCreate(request);
        }
    }

    private static void assertPodCarriesTheTemplateAndSparksOwnSettings(Pod pod, Map<String, String> documented,
                                                                        String appId) {
        String name = pod.getMetadata().getName();
        // The template: the secondary RDMA network (Multus), IPC_LOCK, the device plugin's resource.
        assertEquals("rdma-net", pod.getMetadata().getAnnotations().get("k8s.v1.cni.cncf.io/networks"), name);
        assertEquals(1, pod.getSpec().getContainers().size(), name);
        Container c = pod.getSpec().getContainers().get(0);
        assertEquals("spark-executor", c.getName(), name);
        assertNotNull(c.getSecurityContext(), name + ": securityContext");
        assertTrue(c.getSecurityContext().getCapabilities().getAdd().contains("IPC_LOCK"),
                name + ": capabilities " + c.getSecurityContext().getCapabilities());
        assertEquals(new Quantity("1"), c.getResources().getRequests().get("rdma/hca_shared_devices_a"), name);
        assertEquals(new Quantity("1"), c.getResources().getLimits().get("rdma/hca_shared_devices_a"), name);
        // The configuration: image, and memory sized for registered (pinned) memory: executor memory + overhead.
        assertEquals(documented.get("spark.kubernetes.container.image"), c.getImage(), name);
        BigDecimal memoryBytes = BigDecimal.valueOf(gib(documented.get("spark.executor.memory"))
                + gib(documented.get("spark.executor.memoryOverhead")));
        assertEquals(0, memoryBytes.compareTo(c.getResources().getLimits().get("memory").getNumericalAmount()),
                name + ": memory limit " + c.getResources().getLimits().get("memory"));
        assertEquals(0, memoryBytes.compareTo(c.getResources().getRequests().get("memory").getNumericalAmount()),
                name + ": memory request " + c.getResources().getRequests().get("memory"));
        Map<String, String> env = c.getEnv().stream()
                .filter(e -> e.getValue() != null)
                .collect(Collectors.toMap(EnvVar::getName, EnvVar::getValue));
        // The verbs path through java.lang.foreign needs native access; Spark 4.2 gives its executors that itself.
        assertTrue(env.entrySet().stream().anyMatch(e -> e.getKey().startsWith(Constants.ENV_JAVA_OPT_PREFIX())
                        && e.getValue().equals("--enable-native-access=ALL-UNNAMED")),
                name + ": executor JVM options in " + env);
        // Spark's own settings are still there: labels, namespace, the driver to register with, executor mode.
        assertEquals(NAMESPACE, pod.getMetadata().getNamespace(), name);
        assertEquals("executor", pod.getMetadata().getLabels().get(Constants.SPARK_ROLE_LABEL()), name);
        assertEquals(appId, pod.getMetadata().getLabels().get(Constants.SPARK_APP_ID_LABEL()), name);
        assertEquals(pod.getMetadata().getLabels().get(Constants.SPARK_EXECUTOR_ID_LABEL()),
                env.get(Constants.ENV_EXECUTOR_ID()), name);
        assertTrue(env.get(Constants.ENV_DRIVER_URL()).startsWith("spark://CoarseGrainedScheduler@127.0.0.1:"),
                name + ": " + env.get(Constants.ENV_DRIVER_URL()));
        assertEquals(List.of("executor"), c.getArgs(), name);
        assertEquals("Never", pod.getSpec().getRestartPolicy(), name);
        assertEquals("Pending", pod.getStatus().getPhase(), name);
    }

    /** What CoarseGrainedExecutorBackend does first: ask the driver named in its pod for the application's conf. */
    private static Map<String, String> fetchConfAsAnExecutorDoes(Pod pod) {
        Map<String, String> env = pod.getSpec().getContainers().get(0).getEnv().stream()
                .filter(e -> e.getValue() != null)
                .collect(Collectors.toMap(EnvVar::getName, EnvVar::getValue));
        SparkConf fetcherConf = new SparkConf(false);
        RpcEnv fetcher = RpcEnv.create("driverPropsFetcher", "127.0.0.1", "127.0.0.1", -1, fetcherConf,
                new SecurityManager(fetcherConf, Option.empty(), SecurityManager.$lessinit$greater$default$3()),
                1, true);
        try {
            RpcEndpointRef driver = fetcher.setupEndpointRefByURI(env.get(Constants.ENV_DRIVER_URL()));
            int profile = Integer.parseInt(env.get(Constants.ENV_RESOURCE_PROFILE_ID()));
            SparkAppConfig app = driver.askSync(new RetrieveSparkAppConfig(profile),
                    ClassTag$.MODULE$.apply(SparkAppConfig.class));
            Map<String, String> got = new HashMap<>();
            scala.collection.Iterator<Tuple2<String, String>> it = app.sparkProperties().iterator();
            while (it.hasNext()) {
                Tuple2<String, String> kv = it.next();
                got.put(kv._1(), kv._2());
            }
            return got;
        } finally {
            fetcher.shutdown();
        }
    }

    private static List<Pod> awaitExecutorPods(KubernetesClient api, String appId) throws InterruptedException {
        while (true) {
            List<Pod> pods = executorPods(api, appId);
            if (pods.size() >= EXECUTORS) {
                assertEquals(EXECUTORS, pods.size(), "executor pods Spark asked for");
                return pods;
            }
            Thread.sleep(100);
        }
    }

    private static List<Pod> executorPods(KubernetesClient api, String appId) {
        return api.pods().inNamespace(NAMESPACE)
                .withLabel(Constants.SPARK_APP_ID_LABEL(), appId)
                .withLabel(Constants.SPARK_ROLE_LABEL(), "executor")
                .list().getItems();
    }

    private static long gib(String size) {
        assertTrue(size.endsWith("g"), "sizes in rdma-shuffle.conf are whole GiB: " + size);
        return Long.parseLong(size.substring(0, size.length() - 1)) << 30;
    }

    /** The documented configuration, read as spark-submit reads a properties file. */
    private static Map<String, String> load(Path file) throws IOException {
        Properties p = new Properties();
        try (Reader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            p.load(r);
        }
        Map<String, String> m = new HashMap<>();
        p.stringPropertyNames().forEach(k -> m.put(k, p.getProperty(k).trim()));
        return m;
    }

    /** docs/kubernetes of this checkout, from the module's directory (or any below the repository's root). */
    private static Path docsKubernetes() {
        for (Path d = Path.of("").toAbsolutePath(); d != null; d = d.getParent()) {
            Path candidate = d.resolve("docs").resolve("kubernetes");
            if (Files.isRegularFile(candidate.resolve("executor-pod-template.yaml"))) {
                return candidate;
            }
        }
        throw new IllegalStateException("docs/kubernetes/executor-pod-template.yaml not found above "
                + Path.of("").toAbsolutePath());
    }
}
