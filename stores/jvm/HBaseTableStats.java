package lambdaplatform.stores;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hbase.Cell;
import org.apache.hadoop.hbase.CellUtil;
import org.apache.hadoop.hbase.HBaseConfiguration;
import org.apache.hadoop.hbase.TableName;
import org.apache.hadoop.hbase.client.Connection;
import org.apache.hadoop.hbase.client.ConnectionFactory;
import org.apache.hadoop.hbase.client.Result;
import org.apache.hadoop.hbase.client.ResultScanner;
import org.apache.hadoop.hbase.client.Scan;
import org.apache.hadoop.hbase.client.Table;
import org.apache.hadoop.hbase.util.Bytes;

/**
 * Counts what a batch view's table holds in one row range, as stores/batch_writer.py's Thrift scan
 * counts it: rows, cells other than the sketch, and the sum of those cells' 8-byte big-endian
 * values. It reads the region servers directly from the batch run's driver, which holds the HBase
 * client for the bulk load anyway, instead of through the Thrift server and Python.
 */
public final class HBaseTableStats {
    private HBaseTableStats() {}

    /** One client connection per HBase (ZooKeeper quorum and port) for the JVM's life. */
    private static final Map<String, Connection> CONNECTIONS = new ConcurrentHashMap<>();

    /** The most columns of one row a scan result holds. */
    private static final int BATCH = 1000;

    /**
     * "rows,cells,checksum" of {@code table} ("namespace:name") in [{@code start}, {@code stop})
     * (null: open), reading column {@code qualifier} of {@code family}, or the whole family when
     * {@code qualifier} is null, and counting every cell but those of qualifier {@code skip}.
     */
    public static String range(
            String table, String family, String qualifier, String skip, byte[] start, byte[] stop, Configuration conf)
            throws IOException {
        byte[] fam = Bytes.toBytes(family);
        byte[] skipped = Bytes.toBytes(skip);
        // A by_bucket row holds a column per key its bucket saw: parts of at most BATCH columns, so no
        // whole wide row is held by a region server or this JVM (a row is counted at its first part).
        Scan scan = new Scan().setCaching(5000).setBatch(BATCH).setAllowPartialResults(true).setCacheBlocks(false);
        if (start != null) {
            scan.withStartRow(start);
        }
        if (stop != null) {
            scan.withStopRow(stop);
        }
        if (qualifier == null) {
            scan.addFamily(fam);
        } else {
            scan.addColumn(fam, Bytes.toBytes(qualifier));
        }
        long rows = 0;
        long cells = 0;
        long sum = 0;
        BigInteger overflowed = BigInteger.ZERO; // sums past a long's range
        try (Table t = connection(conf).getTable(TableName.valueOf(table));
                ResultScanner scanner = t.getScanner(scan)) {
            byte[] last = null;
            for (Result result : scanner) {
                if (last == null || !Bytes.equals(last, result.getRow())) {
                    rows++;
                    last = result.getRow();
                }
                for (Cell cell : result.rawCells()) {
                    if (CellUtil.matchingQualifier(cell, skipped)) {
                        continue;
                    }
                    if (cell.getValueLength() != Bytes.SIZEOF_LONG) {
                        throw new IOException("a cell of " + table + " holds " + cell.getValueLength()
                                + " bytes, not an 8-byte count (row " + Bytes.toStringBinary(CellUtil.cloneRow(cell)) + ")");
                    }
                    cells++;
                    long value = Bytes.toLong(cell.getValueArray(), cell.getValueOffset());
                    try {
                        sum = Math.addExact(sum, value);
                    } catch (ArithmeticException e) {
                        overflowed = overflowed.add(BigInteger.valueOf(sum));
                        sum = value;
                    }
                }
            }
        }
        return rows + "," + cells + "," + overflowed.add(BigInteger.valueOf(sum));
    }

    /** The JVM's connection to the HBase of {@code conf}; a closed or aborted one is replaced. */
    private static Connection connection(Configuration conf) throws IOException {
        String key = conf.get("hbase.zookeeper.quorum") + ":" + conf.get("hbase.zookeeper.property.clientPort");
        try {
            return CONNECTIONS.compute(key, (k, known) -> {
                if (known != null && !known.isClosed() && !known.isAborted()) {
                    return known;
                }
                try {
                    return ConnectionFactory.createConnection(HBaseConfiguration.create(conf));
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
        } catch (UncheckedIOException e) {
            throw e.getCause();
        }
    }
}
