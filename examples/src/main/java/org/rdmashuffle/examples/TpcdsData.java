package org.rdmashuffle.examples;

import io.trino.tpcds.Results;
import io.trino.tpcds.Session;
import io.trino.tpcds.Table;
import io.trino.tpcds.column.Column;
import io.trino.tpcds.column.ColumnType;
import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Date;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * TPC-DS data at a scale factor, generated in Spark tasks with {@code io.trino.tpcds} (each task one
 * chunk of a table) and written as Parquet, one folder per table. A table already written whole
 * (its folder has Spark's {@code _SUCCESS}) is kept.
 */
public final class TpcdsData {
    private TpcdsData() {
    }

    /** The 24 tables the queries read. */
    public static List<Table> tables() {
        return Table.getBaseTables().stream().filter(t -> t != Table.DBGEN_VERSION).toList();
    }

    /** The column's name as Spark's TPC-DS queries spell it (the generator says c_last_review_date_sk). */
    static String sparkName(Column c) {
        return c.getName().equals("c_last_review_date_sk") ? "c_last_review_date" : c.getName();
    }

    static StructType schema(Table table) {
        List<StructField> fields = new ArrayList<>();
        for (Column c : table.getColumns()) {
            fields.add(DataTypes.createStructField(sparkName(c), type(c.getType()), true));
        }
        return DataTypes.createStructType(fields);
    }

    private static DataType type(ColumnType t) {
        return switch (t.getBase()) {
            case INTEGER, IDENTIFIER -> DataTypes.IntegerType;
            case DATE -> DataTypes.DateType;
            case DECIMAL -> DataTypes.createDecimalType(t.getPrecision().orElseThrow(), t.getScale().orElseThrow());
            case CHAR, VARCHAR, TIME -> DataTypes.StringType;
        };
    }

    private static Object value(String s, ColumnType t) {
        if (s == null) {
            return null;
        }
        return switch (t.getBase()) {
            case INTEGER, IDENTIFIER -> s.isEmpty() ? null : Integer.valueOf(s);
            case DATE -> s.isEmpty() ? null : Date.valueOf(s);
            case DECIMAL -> s.isEmpty() ? null : new BigDecimal(s);
            case CHAR, VARCHAR, TIME -> s;
        };
    }

    /**
     * Rows of {@code table}, generated in {@code chunks} tasks (small tables in one). A child table
     * (store_returns, …) is asked for by name: the generator runs its parent's generator itself.
     */
    static JavaRDD<Row> rows(JavaSparkContext sc, Table table, double scale, int chunks) {
        int n = table.isSmall() ? 1 : chunks;
        String name = table.getName();
        List<Integer> ids = new ArrayList<>();
        for (int i = 1; i <= n; i++) {
            ids.add(i);
        }
        return sc.parallelize(ids, n).flatMap(chunk -> {
            Table self = Table.getTable(name);
            Session s = Session.getDefaultSession().withScale(scale).withParallelism(n).withChunkNumber(chunk)
                    .withTable(self).withNoSexism(false);
            Column[] cols = self.getColumns();
            java.util.Iterator<List<List<String>>> rows = Results.constructResults(self, s).iterator();
            // Streamed, not collected: a chunk of a fact table does not fit an executor's heap.
            return new java.util.Iterator<Row>() {
                private Row next = advance();

                private Row advance() {
                    while (rows.hasNext()) {
                        List<List<String>> group = rows.next();
                        if (!group.isEmpty() && group.get(0) != null) {
                            List<String> r = group.get(0);
                            Object[] v = new Object[cols.length];
                            for (int i = 0; i < cols.length; i++) {
                                v[i] = value(r.get(i), cols[i].getType());
                            }
                            return RowFactory.create(v);
                        }
                    }
                    return null;
                }

                @Override
                public boolean hasNext() {
                    return next != null;
                }

                @Override
                public Row next() {
                    if (next == null) {
                        throw new java.util.NoSuchElementException();
                    }
                    Row r = next;
                    next = advance();
                    return r;
                }
            };
        });
    }

    /** Writes every table at {@code scale} under {@code dir} (skipped when {@code dir/_SUCCESS} exists). */
    public static void generate(SparkSession spark, double scale, Path dir, int chunks) throws Exception {
        if (Files.exists(dir.resolve("_SUCCESS"))) {
            return;
        }
        JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
        for (Table t : tables()) {
            if (Files.exists(dir.resolve(t.getName()).resolve("_SUCCESS"))) {
                continue;
            }
            long t0 = System.nanoTime();
            spark.createDataFrame(rows(sc, t, scale, chunks), schema(t)).write().mode("overwrite")
                    .parquet(dir.resolve(t.getName()).toString());
            System.out.printf("generated %s in %.1f s%n", t.getName(), (System.nanoTime() - t0) / 1e9);
        }
        Files.writeString(dir.resolve("_SUCCESS"), "scale " + scale + "\n");
    }

    /** Registers every table under {@code dir} as a temporary view. */
    public static void register(SparkSession spark, Path dir) {
        for (Table t : tables()) {
            spark.read().parquet(dir.resolve(t.getName()).toString()).createOrReplaceTempView(t.getName());
        }
    }
}
