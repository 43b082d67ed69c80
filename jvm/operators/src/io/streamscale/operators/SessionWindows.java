package io.streamscale.operators;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Game sessions' open session windows, one state value and at most one event-time timer per
 * machine, in Spark's {@code transformWithState} (streamscale.pipelines.game_sessions documents
 * the semantics; they are those of Spark's {@code session_window} aggregation it replaces).
 *
 * <p>Every input row (a span of approved frames or an unpaired header, all columns {@code
 * BIGINT} but {@code kind}) opens the window {@code [first_ts, last_ts + gap)}; a machine's
 * windows that overlap merge. A merged window closes when the watermark reaches its end, and
 * its rows are emitted, as they came, in that micro-batch (Spark's append mode). A row whose
 * window has already closed when it arrives is dropped by Spark, before this operator, and
 * counted in the progress ({@code numRowsDroppedByWatermark}): the query's watermarked column is
 * the row's window end.
 *
 * <p>Why not Spark's {@code session_window}: its state manager reads each key's windows with a
 * prefix scan and finds the windows to close by iterating over the whole store in every
 * micro-batch, so a batch costs in proportion to the open sessions, not to its rows (at 10⁶
 * machines, a quarter of the JVM's time, docs/sustainable.md). Here a batch reads and writes
 * only the machines it has rows for, and the timers of the windows that close (a range scan of
 * Spark's timer index up to the watermark). The timer is set lazily: input only moves it
 * earlier; when it fires with no window closed, it is set again at the earliest end.
 */
public final class SessionWindows {
  private SessionWindows() {}

  /**
   * The closed windows' rows of {@code rows} (columns {@code kind STRING, machine BIGINT} and
   * more {@code BIGINT} columns, among them {@code first_ts} and {@code last_ts}, epoch ms; a
   * watermarked event-time column is dropped), grouped by {@code machine}, with the gap {@code
   * gapMs}. The output has the input's columns but the event time, in the same order.
   */
  public static Dataset<Row> closed(Dataset<Row> rows, String eventTime, long gapMs) {
    StructType in = rows.schema();
    StructType out = new StructType();
    for (StructField f : in.fields()) {
      if (!f.name().equals(eventTime)) {
        out = out.add(f.name(), f.dataType(), true);
      }
    }
    Open fn = new Open(in, out, gapMs);
    return rows.groupBy("machine")
        .as(Encoders.LONG(), Encoders.row(in))
        .transformWithState(fn, TimeMode.EventTime(), OutputMode.Append(), Encoders.row(out));
  }

  /**
   * One machine's state: the timer set (ms, or {@link Long#MIN_VALUE} when none) and its open
   * rows, encoded in one binary field ({@link Open#encode}): a bean of plain fields gives the
   * same generated code in every batch ({@link ReferentialTable.Entry} says why).
   */
  public static final class Entry implements Serializable {
    private static final long serialVersionUID = 1L;
    private long timer = Long.MIN_VALUE;
    private byte[] rows = new byte[0];

    public Entry() {}

    Entry(long timer, byte[] rows) {
      this.timer = timer;
      this.rows = rows;
    }

    public long getTimer() {
      return timer;
    }

    public void setTimer(long timer) {
      this.timer = timer;
    }

    public byte[] getRows() {
      return rows;
    }

    public void setRows(byte[] rows) {
      this.rows = rows;
    }
  }

  /** The stateful processor (serialized to the executors). */
  static final class Open extends StatefulProcessor<Long, Row, Row> {
    private static final long serialVersionUID = 1L;
    private static final String SPAN = "span";
    private static final String HEADER = "header";

    private final int width;
    private final int[] source;
    private final String[] outNames;
    private final int kind;
    private final int machine;
    private final int first;
    private final int last;
    private final long gapMs;
    private transient ValueState<Entry> state;

    Open(StructType in, StructType out, long gapMs) {
      this.gapMs = gapMs;
      this.outNames = out.fieldNames();
      this.width = outNames.length;
      this.source = new int[width];
      for (int i = 0; i < width; i++) {
        source[i] = in.fieldIndex(outNames[i]);
      }
      this.kind = out.fieldIndex("kind");
      this.machine = out.fieldIndex("machine");
      this.first = out.fieldIndex("first_ts");
      this.last = out.fieldIndex("last_ts");
      for (StructField f : out.fields()) {
        boolean isKind = f.name().equals("kind");
        if (isKind != f.dataType().equals(DataTypes.StringType)
            || !isKind && !f.dataType().equals(DataTypes.LongType)) {
          throw new IllegalArgumentException(
              "session windows take a STRING kind and BIGINT columns, not " + out.simpleString());
        }
      }
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
      state = getHandle().getValueState("session", Encoders.bean(Entry.class), TTLConfig.NONE());
    }

    @Override
    public Iterator<Row> handleInputRows(Long key, Iterator<Row> input, TimerValues timers) {
      Entry stored = state.get(); // null when absent: one read, where exists() is another
      Entry entry = stored != null ? stored : new Entry();
      List<long[]> added = new ArrayList<>();
      long earliest = Long.MAX_VALUE;
      while (input.hasNext()) {
        Row row = input.next();
        long[] values = new long[width];
        for (int i = 0; i < width; i++) {
          if (i == kind) {
            values[i] = SPAN.equals(row.getString(source[i])) ? 0 : 1;
          } else {
            values[i] = row.isNullAt(source[i]) ? 0 : row.getLong(source[i]);
          }
        }
        added.add(values);
        earliest = Math.min(earliest, values[last] + gapMs);
      }
      // A timer fires when the watermark is past it: at end - 1, a window closes when the
      // watermark reaches its end, as Spark's session windows do.
      long timer = earliest - 1;
      if (entry.timer == Long.MIN_VALUE || timer < entry.timer) {
        if (entry.timer != Long.MIN_VALUE) {
          getHandle().deleteTimer(entry.timer);
        }
        getHandle().registerTimer(timer);
      } else {
        timer = entry.timer;
      }
      state.update(new Entry(timer, append(entry.rows, added)));
      return CollectionConverters.asScala(Collections.<Row>emptyIterator());
    }

    @Override
    public Iterator<Row> handleExpiredTimer(
        Long key, TimerValues timers, ExpiredTimerInfo expired) {
      long watermark = timers.getCurrentWatermarkInMs();
      Entry entry = state.get();
      if (entry == null) {
        return CollectionConverters.asScala(Collections.<Row>emptyIterator());
      }
      List<long[]> rows = decode(entry.rows);
      rows.sort(Comparator.comparingLong((long[] r) -> r[first]).thenComparingLong(r -> r[last]));
      List<Row> out = new ArrayList<>();
      List<long[]> open = new ArrayList<>();
      long nextEnd = Long.MAX_VALUE;
      int start = 0;
      while (start < rows.size()) {
        long end = rows.get(start)[last] + gapMs;
        int stop = start + 1;
        while (stop < rows.size() && rows.get(stop)[first] < end) {
          end = Math.max(end, rows.get(stop)[last] + gapMs);
          stop++;
        }
        List<long[]> window = rows.subList(start, stop);
        if (end <= watermark) {
          for (long[] r : window) {
            out.add(toRow(r, key));
          }
        } else {
          open.addAll(window);
          nextEnd = Math.min(nextEnd, end);
        }
        start = stop;
      }
      // One timer per machine: Spark deletes the one that fired after this call; the timer
      // kept in the entry is another when input moved it earlier in this batch, after Spark
      // had begun to list the timers that expire.
      long next = open.isEmpty() ? Long.MIN_VALUE : nextEnd - 1;
      long fired = expired.getExpiryTimeInMs();
      if (entry.timer != Long.MIN_VALUE && entry.timer != fired && entry.timer != next) {
        getHandle().deleteTimer(entry.timer);
      }
      if (open.isEmpty()) {
        state.clear();
      } else {
        if (next != entry.timer) {
          getHandle().registerTimer(next);
        }
        state.update(new Entry(next, append(new byte[0], open)));
      }
      return CollectionConverters.asScala(out.iterator());
    }

    private Row toRow(long[] r, long key) {
      Object[] values = new Object[width];
      for (int i = 0; i < width; i++) {
        values[i] = i == kind ? (r[i] == 0 ? SPAN : HEADER) : (Object) r[i];
      }
      values[machine] = key;
      return RowFactory.create(values);
    }

    /** {@code rows} with {@code added} after them: each row its {@code width} longs. */
    private byte[] append(byte[] rows, List<long[]> added) {
      ByteBuffer buffer = ByteBuffer.allocate(rows.length + added.size() * width * Long.BYTES);
      buffer.put(rows);
      for (long[] r : added) {
        for (long v : r) {
          buffer.putLong(v);
        }
      }
      return buffer.array();
    }

    private List<long[]> decode(byte[] rows) {
      ByteBuffer buffer = ByteBuffer.wrap(rows);
      int n = rows.length / (width * Long.BYTES);
      List<long[]> out = new ArrayList<>(n);
      for (int i = 0; i < n; i++) {
        long[] r = new long[width];
        for (int j = 0; j < width; j++) {
          r[j] = buffer.getLong();
        }
        out.add(r);
      }
      return out;
    }

    @Override
    public String toString() {
      return "SessionWindows.Open(gap " + gapMs + " ms, " + Arrays.toString(outNames) + ")";
    }
  }
}
