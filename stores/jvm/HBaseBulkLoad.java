package lambdaplatform.stores;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.KeyValue;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.io.compress.Compression;
import org.apache.hadoop.hbase.io.hfile.CacheConfig;
import org.apache.hadoop.hbase.io.hfile.HFileContext;
import org.apache.hadoop.hbase.io.hfile.HFileContextBuilder;
import org.apache.hadoop.hbase.regionserver.BloomType;
import org.apache.hadoop.hbase.regionserver.HStoreFile;
import org.apache.hadoop.hbase.regionserver.StoreFileWriter;
import org.apache.hadoop.hbase.tool.BulkLoadHFiles;
import org.apache.hadoop.hbase.util.Bytes;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.functions;

/**
 * Writes a batch view's cells as HFiles from the Spark tasks and bulk-loads them into the view's
 * table: the batch layer's opt-in alternative to Thrift puts (stores/batch_bulk_load.py drives it).
 *
 * <p>The cells come as a frame of binary columns {@code row}, {@code qualifier}, {@code value}
 * (stores/batch_cells.py), every cell in one column family.
 */
public final class HBaseBulkLoad {
    private HBaseBulkLoad() {}

    /**
     * One HFile per non-empty partition of {@code df}, ranged by row and sorted as HBase orders
     * cells, written into {@code dir}/{@code family}/ ({@code dir} a Hadoop URI such as
     * file:///...). Every cell is a Put at timestamp {@code ts}. Returns, per file,
     * "path,cells,firstRowHex".
     */
    public static String[] write(Dataset<Row> df, String family, String dir, int partitions, long ts) {
        Dataset<Row> sorted = df.select("row", "qualifier", "value")
                .repartitionByRange(partitions, functions.col("row"))
                .sortWithinPartitions("row", "qualifier");
        List<String> files = sorted
                .mapPartitions(new PartitionWriter(family, dir, ts), Encoders.STRING())
                .collectAsList();
        return files.toArray(new String[0]);
    }

    /**
     * Bulk-loads {@code files} (paths as returned by {@link #write}, all of column family
     * {@code family}) into {@code table} ("namespace:name"), with the client settings of
     * {@code conf} (ZooKeeper quorum and port). The files are moved or copied into the table.
     */
    public static void load(String table, String family, String[] files, Configuration conf) throws IOException {
        List<Path> paths = new ArrayList<>();
        for (String file : files) {
            paths.add(new Path(file));
        }
        Map<byte[], List<Path>> familyFiles = new TreeMap<>(Bytes.BYTES_COMPARATOR);
        familyFiles.put(Bytes.toBytes(family), paths);
        // the items loaded (the files, or the parts of those split across regions)
        Map<?, ?> loaded = BulkLoadHFiles.create(HBaseConfiguration.create(conf))
                .bulkLoad(TableName.valueOf(table), familyFiles);
        if (loaded.isEmpty() && !paths.isEmpty()) {
            throw new IOException("bulk load of " + paths.size() + " HFiles into " + table + " loaded nothing");
        }
    }

    /** Writes one partition's sorted cells into one HFile. */
    static final class PartitionWriter implements MapPartitionsFunction<Row, String> {
        private static final long serialVersionUID = 1L;
        private final String family;
        private final String dir;
        private final long ts;

        PartitionWriter(String family, String dir, long ts) {
            this.family = family;
            this.dir = dir;
            this.ts = ts;
        }

        @Override
        public Iterator<String> call(Iterator<Row> rows) throws IOException {
            List<String> out = new ArrayList<>();
            if (!rows.hasNext()) {
                return out.iterator();
            }
            Configuration conf = HBaseConfiguration.create();
            Path path = new Path(new Path(dir, family),
                    "part-" + TaskContext.getPartitionId() + "-" + UUID.randomUUID().toString().replace("-", ""));
            FileSystem fs = path.getFileSystem(conf);
            if (fs instanceof LocalFileSystem) {
                fs = ((LocalFileSystem) fs).getRaw(); // no .crc files beside the HFiles
            }
            byte[] familyBytes = Bytes.toBytes(family);
            HFileContext context = new HFileContextBuilder()
                    .withCompression(Compression.Algorithm.NONE)
                    .withColumnFamily(familyBytes)
                    .withIncludesTags(false)
                    .build();
            StoreFileWriter writer = new StoreFileWriter.Builder(conf, CacheConfig.DISABLED, fs)
                    .withFilePath(path)
                    .withBloomType(BloomType.NONE)
                    .withFileContext(context)
                    .build();
            long cells = 0;
            byte[] firstRow = null;
            try {
                while (rows.hasNext()) {
                    Row row = rows.next();
                    byte[] key = (byte[]) row.get(0);
                    if (firstRow == null) {
                        firstRow = key;
                    }
                    writer.append(new KeyValue(key, familyBytes, (byte[]) row.get(1), ts, KeyValue.Type.Put,
                            (byte[]) row.get(2)));
                    cells++;
                }
                writer.appendFileInfo(HStoreFile.BULKLOAD_TIME_KEY, Bytes.toBytes(System.currentTimeMillis()));
                writer.appendFileInfo(HStoreFile.MAJOR_COMPACTION_KEY, Bytes.toBytes(true));
                writer.appendFileInfo(HStoreFile.EXCLUDE_FROM_MINOR_COMPACTION_KEY, Bytes.toBytes(false));
                writer.appendTrackedTimestampsToMetadata();
            } finally {
                writer.close();
            }
            out.add(path.toString() + "," + cells + "," + Bytes.toHex(firstRow));
            return out.iterator();
        }
    }
}
