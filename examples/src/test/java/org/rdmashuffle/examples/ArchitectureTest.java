package org.rdmashuffle.examples;

import static com.tngtech.archunit.base.DescribedPredicate.describe;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.Architectures.layeredArchitecture;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;
import static org.junit.jupiter.api.Assertions.assertAll;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.tngtech.archunit.base.DescribedPredicate;
import com.tngtech.archunit.core.domain.JavaClass;
import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import com.tngtech.archunit.lang.ArchRule;
import com.tngtech.archunit.library.dependencies.SliceAssignment;
import com.tngtech.archunit.library.dependencies.SliceIdentifier;
import java.util.Set;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * The project's arrows, checked on its compiled main classes (every module's, from this module's test class
 * path: the MapReduce adapter is a test dependency for this alone). docs/architecture.md draws them.
 *
 * <ul>
 *   <li>The core's rooms: {@code format} uses no other room; {@code directory} uses {@code format};
 *       {@code serve} and {@code fetch} use {@code format} and {@code directory} and never each other;
 *       {@code diagnostics} stands alone; nothing lives in the core's root package.</li>
 *   <li>No Spark, Scala or Hadoop in the core, {@code buffer-pool} or {@code rdma-transport}; neither knows the
 *       shuffle.</li>
 *   <li>In the Spark adapter, Scala's objects ({@code X$.MODULE$}: {@code ClassTag}, {@code SparkContext},
 *       {@code RpcUtils}, Spark's config {@code package$}), conversions, durations and function classes, and
 *       Spark's private utilities ({@code org.apache.spark.util}, {@code org.apache.spark.internal}) only in
 *       {@code SparkInterop}. Other classes may name the Scala types Spark's own signatures hand them
 *       ({@link #SCALA_IN_SPARK_SIGNATURES}) and call their methods.</li>
 *   <li>The Spark and the MapReduce adapter never reach into each other.</li>
 *   <li>No circle among the transport's packages; {@code RdmaTransport} and {@code VerbsSupport}, which know
 *       every provider, count as a room of their own above the providers (they sit in the API package for
 *       their callers' sake).</li>
 * </ul>
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ArchitectureTest {
    static final String CORE = "org.rdmashuffle.shuffle.core";
    static final String SPARK_ADAPTER = "org.rdmashuffle.shuffle";
    static final String SPARK_INTEROP = SPARK_ADAPTER + ".SparkInterop";
    static final String MAPREDUCE_ADAPTER = "org.rdmashuffle.mapreduce";
    static final String TRANSPORT = "org.rdmashuffle.transport";
    static final Set<String> TRANSPORT_ENTRY = Set.of(TRANSPORT + ".RdmaTransport", TRANSPORT + ".VerbsSupport");
    /**
     * Scala types that Spark's interfaces and return values put in the adapter's hands: the writer's and
     * reader's records ({@code Iterator}, {@code Product2}, {@code AbstractIterator} for the reader's own
     * iterator), the tracker's blocks ({@code Tuple2}, {@code Tuple3}, {@code Seq}), {@code Option} returns,
     * and {@code RpcEndpoint.receiveAndReply}'s result type.
     */
    static final Set<String> SCALA_IN_SPARK_SIGNATURES = Set.of("scala.collection.Iterator",
            "scala.collection.AbstractIterator", "scala.Product2", "scala.Tuple2", "scala.Tuple3", "scala.Option",
            "scala.collection.Seq", "scala.collection.immutable.Seq", "scala.PartialFunction",
            "scala.runtime.BoxedUnit");

    private JavaClasses classes;

    @BeforeAll
    void importClasses() {
        classes = new ClassFileImporter()
                .withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
                .importPackages("org.rdmashuffle");
    }

    @Test
    void shouldSeeEveryModuleWhenTheClassesAreImported() {
        assertAll(Set.of("org.rdmashuffle.conf.RdmaShuffleConf", "org.rdmashuffle.pool.BufferPool",
                TRANSPORT + ".RdmaTransport", TRANSPORT + ".tcp.TcpNode", TRANSPORT + ".verbs.VerbsNode",
                CORE + ".fetch.BlockFetcher", CORE + ".serve.MapOutputServer", CORE + ".directory.PeerDirectory",
                CORE + ".format.ShuffleOutputTable", SPARK_INTEROP, SPARK_ADAPTER + ".RdmaShuffleManager",
                MAPREDUCE_ADAPTER + ".RdmaShuffle", MAPREDUCE_ADAPTER + ".RdmaShuffleHandler").stream()
                .map(name -> () -> assertTrue(classes.contain(name), name + " was not imported")));
    }

    @Test
    void shouldKeepTheCoreRoomsWhenOneRoomUsesAnother() {
        coreRooms(CORE).check(classes);
        coreRoomsFreeOfCycles(CORE).check(classes);
        noClasses().should().resideInAPackage(CORE).because("every core class lives in a room").check(classes);
    }

    @Test
    void shouldFailTheRoomRuleWhenAServeClassNamesAFetchClass() {
        // Fixture rooms under this package (test classes): serve.ServesWithAFetcher names fetch.Fetcher.
        String fixture = "org.rdmashuffle.examples.archfixture.core";
        JavaClasses arrowAgainstTheRules = new ClassFileImporter().importPackages(fixture);
        AssertionError e = assertThrows(AssertionError.class, () -> coreRooms(fixture).check(arrowAgainstTheRules));
        assertTrue(e.getMessage().contains("ServesWithAFetcher") && e.getMessage().contains("Fetcher"), e.getMessage());
    }

    @Test
    void shouldKeepEnginesOutWhenTheCoreIsCompiled() {
        noClasses().that().resideInAPackage(CORE + "..")
                .should().dependOnClassesThat().resideInAnyPackage("org.apache.spark..", "scala..",
                        "org.apache.hadoop..", SPARK_ADAPTER, MAPREDUCE_ADAPTER + "..")
                .because("the core is engine-neutral: adapters stand on it, not it on them")
                .check(classes);
    }

    @Test
    void shouldKeepScalaInSparkInteropWhenTheAdapterTalksToSpark() {
        scalaOnlyInInterop(SPARK_ADAPTER, SPARK_INTEROP).check(classes);
    }

    @Test
    void shouldKeepTheAdaptersApartWhenEitherUsesTheCore() {
        noClasses().that().resideInAPackage(SPARK_ADAPTER)
                .should().dependOnClassesThat().resideInAnyPackage(MAPREDUCE_ADAPTER + "..",
                        "org.apache.hadoop.mapred..", "org.apache.hadoop.mapreduce..")
                .check(classes);
        noClasses().that().resideInAPackage(MAPREDUCE_ADAPTER + "..")
                .should().dependOnClassesThat().resideInAnyPackage(SPARK_ADAPTER, "org.apache.spark..", "scala..")
                .check(classes);
    }

    @Test
    void shouldFindNoCircleWhenTheTransportPackagesUseEachOther() {
        slices().assignedFrom(transportRooms()).should().beFreeOfCycles().check(classes);
    }

    @Test
    void shouldKeepPoolAndTransportFreeOfShufflesWhenCompiled() {
        noClasses().that().resideInAnyPackage("org.rdmashuffle.pool..", TRANSPORT + "..", "org.rdmashuffle.conf..")
                .should().dependOnClassesThat().resideInAnyPackage("org.rdmashuffle.shuffle..",
                        MAPREDUCE_ADAPTER + "..", "org.rdmashuffle.examples..", "org.apache.spark..", "scala..",
                        "org.apache.hadoop..")
                .check(classes);
        noClasses().that().resideInAnyPackage("org.rdmashuffle.pool..", "org.rdmashuffle.conf..")
                .should().dependOnClassesThat().resideInAPackage(TRANSPORT + "..")
                .because("modules depend one way: conf <- buffer-pool <- rdma-transport")
                .check(classes);
        noClasses().that().resideInAPackage("org.rdmashuffle.conf..")
                .should().dependOnClassesThat().resideInAPackage("org.rdmashuffle.pool..")
                .check(classes);
    }

    /** The core's rooms under {@code core} and the arrows allowed between them. */
    static ArchRule coreRooms(String core) {
        return layeredArchitecture().consideringOnlyDependenciesInLayers()
                .layer("format").definedBy(core + ".format..")
                .layer("directory").definedBy(core + ".directory..")
                .layer("serve").definedBy(core + ".serve..")
                .layer("fetch").definedBy(core + ".fetch..")
                .optionalLayer("diagnostics").definedBy(core + ".diagnostics..")
                .whereLayer("format").mayNotAccessAnyLayer()
                .whereLayer("directory").mayOnlyAccessLayers("format")
                .whereLayer("serve").mayOnlyAccessLayers("format", "directory")
                .whereLayer("fetch").mayOnlyAccessLayers("format", "directory")
                .whereLayer("diagnostics").mayNotAccessAnyLayer()
                .whereLayer("serve").mayNotBeAccessedByAnyLayer()
                .whereLayer("fetch").mayNotBeAccessedByAnyLayer()
                .whereLayer("diagnostics").mayNotBeAccessedByAnyLayer()
                .because("serving and fetching share only the table's format and the directory");
    }

    static ArchRule coreRoomsFreeOfCycles(String core) {
        return slices().matching(core + ".(*)..").should().beFreeOfCycles();
    }

    /**
     * No class of the adapter but {@code interop} (and its nested classes) touches a Scala object
     * ({@code X$}), Scala beyond the types Spark's signatures hand over, or Spark's private utilities.
     */
    static ArchRule scalaOnlyInInterop(String adapter, String interop) {
        DescribedPredicate<JavaClass> scalaOrSparkInternals = describe(
                "Scala objects (X$), Scala beyond " + SCALA_IN_SPARK_SIGNATURES + ", or Spark's private utilities",
                c -> c.getSimpleName().endsWith("$")
                        || c.getPackageName().startsWith("scala") && !SCALA_IN_SPARK_SIGNATURES.contains(c.getName())
                        || c.getPackageName().startsWith("org.apache.spark.internal")
                        || c.getPackageName().startsWith("org.apache.spark.util")
                        && !c.getName().equals("org.apache.spark.util.TaskCompletionListener"));
        return noClasses().that().resideInAPackage(adapter)
                .and(describe("are not " + interop, c -> !c.getName().equals(interop)
                        && !c.getName().startsWith(interop + "$")))
                .should().dependOnClassesThat(scalaOrSparkInternals)
                .because("Scala interop lives in one adapter class; the rest is plain Java");
    }

    /** The transport's packages as rooms, with the providers' entry ({@link #TRANSPORT_ENTRY}) a room of its own. */
    static SliceAssignment transportRooms() {
        return new SliceAssignment() {
            @Override
            public SliceIdentifier getIdentifierOf(JavaClass c) {
                if (!c.getPackageName().startsWith(TRANSPORT)) {
                    return SliceIdentifier.ignore();
                }
                String outer = c.getName().contains("$") ? c.getName().substring(0, c.getName().indexOf('$'))
                        : c.getName();
                return SliceIdentifier.of(TRANSPORT_ENTRY.contains(outer) ? "providers' entry" : c.getPackageName());
            }

            @Override
            public String getDescription() {
                return "transport packages (RdmaTransport and VerbsSupport apart)";
            }
        };
    }
}
