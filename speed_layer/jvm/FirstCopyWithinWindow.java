package lambdaplatform.speed;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.Collections;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The speed layer's de-duplication (speed_layer/job.py): of the copies of an event id ingested
 * within the de-duplication window, only the first counts.
 *
 * <p>The same rule as Spark's {@code dropDuplicatesWithinWatermark}: the first copy is kept until
 * the watermark (the latest ingest time seen, less the window) passes its ingest time plus the
 * window, later copies meanwhile are dropped, and rows older than the watermark are dropped as late
 * (counted as such). That operator finds what to forget by reading its whole state at every
 * micro-batch, so a micro-batch costs more the more events the window holds (~0.7 microseconds of CPU per id
 * held, measured by bench/dedupe_state_cost.py: seconds at tens of thousands of events a second). Here each kept id registers an
 * event-time timer at its expiry, and Spark reads only the timers that are due: a micro-batch costs
 * what it receives and what expires, whatever the window holds.
 *
 * <p>Of several copies in one micro-batch, the first by ingest time, then by each of the {@code
 * order} columns (the Kafka partition and offset) is kept, as the batch layer and a replay keep it:
 * a micro-batch run again after a crash keeps the same copy, whatever order the shuffle delivered
 * them in. Each id held costs one value and one timer (indexed twice) in the state. Needs the
 * RocksDB state store, as every transformWithState does.
 */
public final class FirstCopyWithinWindow extends StatefulProcessor<String, Row, Row> {
  private static final long serialVersionUID = 1L;
  private final int timeIndex;
  private final int[] orderIndexes;
  private final long windowMs;
  private transient ValueState<Long> keptUntil;

  private FirstCopyWithinWindow(int timeIndex, int[] orderIndexes, long windowMs) {
    this.timeIndex = timeIndex;
    this.orderIndexes = orderIndexes;
    this.windowMs = windowMs;
  }

  /**
   * The first copies of {@code events} (a streaming frame with a watermark of {@code windowMs} on
   * {@code timeColumn}) by {@code idColumn}, with every column and the watermark kept; copies
   * ingested in the same millisecond are ordered by the integer {@code order} columns. A row without
   * an id stops the query (Spark groups no null key here): the caller passes valid events only.
   */
  public static Dataset<Row> firstCopies(
      Dataset<Row> events, String idColumn, String timeColumn, long windowMs, String[] order) {
    if (windowMs <= 0) {
      throw new IllegalArgumentException("the de-duplication window must be positive, got " + windowMs + " ms");
    }
    int idIndex = events.schema().fieldIndex(idColumn);
    int timeIndex = events.schema().fieldIndex(timeColumn);
    int[] orderIndexes = new int[order.length];
    for (int i = 0; i < order.length; i++) {
      orderIndexes[i] = events.schema().fieldIndex(order[i]);
    }
    return events
        .groupByKey((MapFunction<Row, String>) row -> row.getString(idIndex), Encoders.STRING())
        .transformWithState(
            new FirstCopyWithinWindow(timeIndex, orderIndexes, windowMs),
            timeColumn,
            OutputMode.Append(),
            Encoders.row(events.schema()));
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    keptUntil = getHandle().getValueState("kept_until_ms", Encoders.LONG(), TTLConfig.NONE());
  }

  @Override
  public Iterator<Row> handleInputRows(String id, Iterator<Row> copies, TimerValues timerValues) {
    Row first = null;
    long firstMs = Long.MAX_VALUE;
    while (copies.hasNext()) {
      Row copy = copies.next();
      long ms = millis(copy.get(timeIndex));
      if (first == null || ms < firstMs || (ms == firstMs && before(copy, first))) {
        first = copy;
        firstMs = ms;
      }
    }
    if (first == null || keptUntil.exists()) {
      return none();
    }
    long expiry = firstMs + windowMs;
    keptUntil.update(expiry);
    getHandle().registerTimer(expiry);
    return CollectionConverters.asScala(Collections.singletonList(first).iterator());
  }

  @Override
  public Iterator<Row> handleExpiredTimer(String id, TimerValues timerValues, ExpiredTimerInfo expired) {
    keptUntil.clear();
    return none();
  }

  /** Whether {@code a} comes before {@code b} by the order columns (a null last). */
  private boolean before(Row a, Row b) {
    for (int index : orderIndexes) {
      Object x = a.get(index);
      Object y = b.get(index);
      if (x == null || y == null) {
        if (x != y) {
          return y == null;
        }
        continue;
      }
      long p = ((Number) x).longValue();
      long q = ((Number) y).longValue();
      if (p != q) {
        return p < q;
      }
    }
    return false;
  }

  private static Iterator<Row> none() {
    return CollectionConverters.asScala(Collections.<Row>emptyIterator());
  }

  private static long millis(Object time) {
    if (time instanceof Timestamp) {
      return ((Timestamp) time).getTime();
    }
    if (time instanceof Instant) {
      return ((Instant) time).toEpochMilli();
    }
    throw new IllegalArgumentException("the ingest time is not a timestamp: " + time);
  }
}
