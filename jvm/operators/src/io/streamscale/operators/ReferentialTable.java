package io.streamscale.operators;

import java.io.Serializable;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The enrichment's referential as a table sharded by product id in Spark's state store (the
 * Kafka Streams KTable and its repartition topic; streamscale.pipelines.enrichment documents
 * the semantics).
 *
 * <p>{@link #enrich} takes the parsed rows of both topics (purchases and referential versions,
 * column {@code kind} "p" or "r", with the Spark watermark on their event time) and groups them
 * by product id: ONE shuffle into Spark's {@code flatMapGroupsWithState}, no timeout (so no
 * row is ever dropped as late). Each product's state holds its table entry: the name folded up
 * to the watermark and the versions above it, pending, in log order. For each group of a
 * micro-batch the operator, in JVM code only:
 *
 * <ol>
 *   <li>appends the batch's versions of the product to the pending ones, in log order
 *       (partition, offset): a later batch reads later offsets;
 *   <li>folds: the latest pending version (log order) with a timestamp at or below the
 *       watermark becomes the folded name, and it and the versions before it are dropped (no
 *       purchase still to come is older than the watermark, by its definition);
 *   <li>names each purchase of the batch: the latest pending version (log order) with a
 *       timestamp at or below the purchase's (a tie goes to the referential; a tombstone
 *       names nothing), else the folded name; null is "unknown";
 *   <li>writes the state back only if it changed; a product deleted with nothing pending
 *       leaves no state.
 * </ol>
 *
 * <p>Folding lazily, when a product next has rows, gives the same names as folding every
 * product at every batch: the watermark only grows, and a fold at a later watermark subsumes
 * an earlier one. Names are JSON texts (as the Python side encodes them), so the output is
 * joined into the record without a JSON encoder here. The watermark of a batch is in Spark's
 * offset log, so a replayed batch folds and names exactly as the first run did.
 */
public final class ReferentialTable {
  public static final String PURCHASE = "p";
  public static final String VERSION = "r";
  public static final String DEAD = "d";

  /** A dead letter's Kafka headers: (key, value) pairs. */
  public static final DataType HEADERS =
      DataTypes.createArrayType(
          new StructType()
              .add("key", DataTypes.StringType, true)
              .add("value", DataTypes.BinaryType, true),
          true);

  /**
   * What the operator emits: one row per purchase, its name as JSON text or null ({@code value}
   * and {@code headers} null); and each bad record passed through as it came ({@code key},
   * {@code value}, {@code headers}: its dead letter; the other columns null).
   */
  public static final StructType OUTPUT =
      new StructType()
          .add("key", DataTypes.BinaryType, true)
          .add("id_text", DataTypes.StringType, true)
          .add("price", DataTypes.StringType, true)
          .add("name", DataTypes.StringType, true)
          .add("value", DataTypes.BinaryType, true)
          .add("headers", HEADERS, true);

  private ReferentialTable() {}

  /**
   * Purchases named by the table: {@code rows} has columns {@code pid BIGINT, kind STRING, key
   * BINARY, id_text STRING, price STRING, name STRING, ts BIGINT (ms), part INT, off BIGINT,
   * value BINARY, headers} (others are carried but unused, such as the watermarked event time).
   * Rows of kind {@code "d"} (bad records, grouped under any key) are passed through to the
   * output untouched; they neither read nor change the table.
   */
  public static Dataset<Row> enrich(Dataset<Row> rows) {
    StructType in = rows.schema();
    Name fn =
        new Name(
            in.fieldIndex("kind"),
            in.fieldIndex("key"),
            in.fieldIndex("id_text"),
            in.fieldIndex("price"),
            in.fieldIndex("name"),
            in.fieldIndex("ts"),
            in.fieldIndex("part"),
            in.fieldIndex("off"),
            in.fieldIndex("value"),
            in.fieldIndex("headers"));
    return rows.groupBy("pid")
        .as(Encoders.LONG(), Encoders.row(in))
        .flatMapGroupsWithState(
            fn,
            OutputMode.Append(),
            Encoders.bean(Entry.class),
            Encoders.row(OUTPUT),
            GroupStateTimeout.NoTimeout());
  }

  /**
   * One product's table entry in the state store: the folded name and the pending versions,
   * these encoded in one binary field ({@link #encode}).
   *
   * <p>Why binary: Spark resolves the state's deserializer again in every micro-batch, and an
   * array field (the pending versions' timestamps and names as {@code long[]} and {@code
   * String[]}, as before) resolves into a loop whose variable names come from a global counter,
   * so the generated code differed in every batch: Spark compiled it anew (30-80 ms) and the
   * JIT compiled the new class again, every batch (docs/scaling.md). A bean of a string and a
   * binary field gives the same code every batch.
   */
  public static final class Entry implements Serializable {
    private static final long serialVersionUID = 2L;
    private static final byte[] NONE = new byte[0];
    private String name;
    private byte[] pending = NONE;

    public Entry() {}

    Entry(String name, long[] ts, String[] names) {
      this.name = name;
      this.pending = encode(ts, names);
    }

    /** The folded name (JSON text); null when unknown or deleted. */
    public String getName() {
      return name;
    }

    public void setName(String name) {
      this.name = name;
    }

    /** The pending versions, in log order, as {@link #encode} writes them. */
    public byte[] getPending() {
      return pending;
    }

    public void setPending(byte[] pending) {
      this.pending = pending == null ? NONE : pending;
    }

    /** The pending versions' Kafka timestamps (ms), in log order. */
    long[] stamps() {
      if (pending.length == 0) {
        return new long[0];
      }
      ByteBuffer in = ByteBuffer.wrap(pending);
      long[] out = new long[in.getInt()];
      for (int i = 0; i < out.length; i++) {
        out[i] = in.getLong();
      }
      return out;
    }

    /** The pending versions' names (JSON text; null: a tombstone), in log order. */
    String[] names() {
      if (pending.length == 0) {
        return new String[0];
      }
      ByteBuffer in = ByteBuffer.wrap(pending);
      String[] out = new String[in.getInt()];
      in.position(Integer.BYTES + out.length * Long.BYTES);
      for (int i = 0; i < out.length; i++) {
        int length = in.getInt();
        if (length >= 0) {
          out[i] = new String(pending, in.position(), length, StandardCharsets.UTF_8);
          in.position(in.position() + length);
        }
      }
      return out;
    }
  }

  /**
   * Pending versions as one byte array: their count, their timestamps, then each name as its
   * UTF-8 length (-1: a tombstone) and bytes; no versions: an empty array.
   */
  static byte[] encode(long[] ts, String[] names) {
    if (ts.length == 0) {
      return new byte[0];
    }
    byte[][] texts = new byte[names.length][];
    int size = Integer.BYTES + ts.length * (Long.BYTES + Integer.BYTES);
    for (int i = 0; i < names.length; i++) {
      texts[i] = names[i] == null ? null : names[i].getBytes(StandardCharsets.UTF_8);
      size += texts[i] == null ? 0 : texts[i].length;
    }
    ByteBuffer out = ByteBuffer.allocate(size);
    out.putInt(ts.length);
    for (long t : ts) {
      out.putLong(t);
    }
    for (byte[] text : texts) {
      out.putInt(text == null ? -1 : text.length);
      if (text != null) {
        out.put(text);
      }
    }
    return out.array();
  }

  /** The state function (module doc, steps 1-4). */
  static final class Name implements FlatMapGroupsWithStateFunction<Long, Row, Entry, Row> {
    private static final long serialVersionUID = 1L;
    private final int kind, key, idText, price, name, ts, part, off, value, headers;

    Name(
        int kind,
        int key,
        int idText,
        int price,
        int name,
        int ts,
        int part,
        int off,
        int value,
        int headers) {
      this.kind = kind;
      this.key = key;
      this.idText = idText;
      this.price = price;
      this.name = name;
      this.ts = ts;
      this.part = part;
      this.off = off;
      this.value = value;
      this.headers = headers;
    }

    @Override
    public Iterator<Row> call(Long pid, Iterator<Row> rows, GroupState<Entry> state) {
      List<Row> purchases = new ArrayList<>();
      List<Row> versions = new ArrayList<>();
      List<Row> out = new ArrayList<>();
      while (rows.hasNext()) {
        Row row = rows.next();
        String k = row.getString(kind);
        if (DEAD.equals(k)) {
          out.add(
              RowFactory.create(row.get(key), null, null, null, row.get(value), row.get(headers)));
        } else {
          (VERSION.equals(k) ? versions : purchases).add(row);
        }
      }
      if (purchases.isEmpty() && versions.isEmpty()) {
        return out.iterator();
      }
      Entry entry = state.exists() ? state.get() : null;
      String folded = entry == null ? null : entry.getName();
      long[] stamps = entry == null ? new long[0] : entry.stamps();
      String[] names = entry == null ? new String[0] : entry.names();
      boolean changed = false;
      if (!versions.isEmpty()) {
        versions.sort(
            Comparator.<Row>comparingInt(r -> r.getInt(part)).thenComparingLong(r -> r.getLong(off)));
        int n = stamps.length;
        stamps = Arrays.copyOf(stamps, n + versions.size());
        names = Arrays.copyOf(names, n + versions.size());
        for (Row v : versions) {
          stamps[n] = v.getLong(ts);
          names[n] = v.isNullAt(name) ? null : v.getString(name);
          n++;
        }
        changed = true;
      }
      long watermark = watermark(state);
      int last = -1;
      for (int i = 0; i < stamps.length; i++) {
        if (stamps[i] <= watermark) {
          last = i;
        }
      }
      if (last >= 0) {
        folded = names[last];
        stamps = Arrays.copyOfRange(stamps, last + 1, stamps.length);
        names = Arrays.copyOfRange(names, last + 1, names.length);
        changed = true;
      }
      for (Row p : purchases) {
        out.add(
            RowFactory.create(
                p.get(key),
                p.get(idText),
                p.get(price),
                asOf(folded, stamps, names, p.getLong(ts)),
                null,
                null));
      }
      if (changed) {
        if (folded == null && stamps.length == 0) {
          if (state.exists()) {
            state.remove();
          }
        } else {
          state.update(new Entry(folded, stamps, names));
        }
      }
      return out.iterator();
    }
  }

  /** The batch's watermark (ms), or Long.MIN_VALUE before the first one. */
  static long watermark(GroupState<Entry> state) {
    long watermark = state.getCurrentWatermarkMs();
    return watermark < 0 ? Long.MIN_VALUE : watermark;
  }

  /**
   * The name a purchase at {@code at} (ms) sees: the latest pending version (log order) with a
   * timestamp at or below it, else the folded name (Python's purchase_batches.name_as_of).
   */
  public static String asOf(String folded, long[] stamps, String[] names, long at) {
    for (int i = stamps.length - 1; i >= 0; i--) {
      if (stamps[i] <= at) {
        return names[i];
      }
    }
    return folded;
  }
}
