package io.streamscale.operators;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.zip.CRC32;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;

/**
 * Exactly-once output written by the executor JVM: the same transactions as
 * {@code streamscale.kafka.transactions} (that module documents the scheme), with the producer
 * kept by the JVM instead of by a Python worker.
 *
 * <p>Why in the JVM: Spark hands a task to whichever of the executor's Python workers is idle
 * (a FIFO of them), so the task of an output unit lands on another Python worker from one
 * micro-batch to the next. A producer kept by a Python worker was then found fenced by the
 * other worker's producer of the same transactional id, and every transaction paid a new
 * producer: {@code init_transactions} and the marker read. The executor JVM lives as long as
 * the executor: one producer per transactional id, made once, serves every batch of the unit
 * that runs there.
 *
 * <p>Per task (unit {@code <id prefix><task partition>}, the prefix as the Python side names
 * a unit, {@code streamscale.kafka.transactions.id_prefix}): a task whose rows
 * are all pass-through (column {@code counts} set) opens no transaction. Otherwise the kept
 * producer of the id, or a new one ({@code initTransactions()}, which fences every earlier
 * producer of the id and completes its transaction, then the id's marker read with {@code
 * read_committed} up to the partition's high watermark); a unit whose batch is already
 * committed writes nothing (its rows are still consumed). Then one transaction: the marker
 * first, acknowledged before any row is sent (a kept producer fenced since its last use learns
 * it there and is replaced once), the rows, the commit. Any failure after the marker aborts the
 * transaction, drops the producer and fails the task; its retry or the replayed batch starts
 * over with the same id.
 */
public final class TransactionalWriter {
  /** The partition count of the marker topic is the caller's (it creates the topic). */
  private static final Pattern BATCH = Pattern.compile("\"batch\"\\s*:\\s*(-?\\d+)");

  private static final long TIMEOUT_MS = 60_000L;

  /** The producers this JVM keeps, by connection and transactional id; taken out while in use. */
  private static final ConcurrentHashMap<String, Kept> KEPT = new ConcurrentHashMap<>();

  /** What this JVM's writer did, for the benchmarks: see {@link #stats}. */
  private static final AtomicLong OPENED = new AtomicLong();

  private static final AtomicLong REPLACED = new AtomicLong();
  private static final AtomicLong COMMITTED = new AtomicLong();
  private static final AtomicLong SKIPPED = new AtomicLong();
  private static final AtomicLong OPEN_NANOS = new AtomicLong();
  private static final AtomicLong TXN_NANOS = new AtomicLong();

  private TransactionalWriter() {}

  /**
   * Counters since this JVM started: producers opened ({@code initTransactions} and the marker
   * read) and the milliseconds they took, kept producers found fenced and replaced,
   * transactions committed and the milliseconds from begin to commit, units skipped as
   * already committed.
   */
  public static Map<String, Long> stats() {
    Map<String, Long> out = new TreeMap<>();
    out.put("opened", OPENED.get());
    out.put("open_ms", OPEN_NANOS.get() / 1_000_000);
    out.put("replaced", REPLACED.get());
    out.put("committed", COMMITTED.get());
    out.put("transaction_ms", TXN_NANOS.get() / 1_000_000);
    out.put("skipped", SKIPPED.get());
    return out;
  }

  /** A kept transactional producer and the last batch its id is known to have committed. */
  static final class Kept {
    final KafkaProducer<byte[], byte[]> producer;
    final String id;
    Long committed;

    Kept(KafkaProducer<byte[], byte[]> producer, String id, Long committed) {
      this.producer = producer;
      this.id = id;
      this.committed = committed;
    }
  }

  /**
   * Write {@code rows} (columns {@code key BINARY, value BINARY, topic STRING, counts STRING}
   * and, optionally, {@code headers ARRAY<STRUCT<key STRING, value BINARY>>}), one transaction
   * per task partition, and return the {@code counts} of the pass-through rows (those with
   * {@code counts} set, which are not written) with the records each task wrote, as {@code
   * "<records> <counts>"}.
   */
  public static List<String> write(
      Dataset<Row> rows,
      Map<String, String> kafka,
      String markerTopic,
      int markerPartitions,
      String idPrefix,
      long batchId) {
    Task task = new Task(new HashMap<>(kafka), markerTopic, markerPartitions, idPrefix, batchId);
    return rows.mapPartitions(task, Encoders.STRING()).collectAsList();
  }

  /** Close every producer this JVM keeps (none has a transaction open); how many. */
  public static int closeAll() {
    int n = 0;
    for (String key : new ArrayList<>(KEPT.keySet())) {
      Kept kept = KEPT.remove(key);
      if (kept != null) {
        close(kept);
        n++;
      }
    }
    return n;
  }

  /** The Kafka headers of a row to write (its optional fifth column), or null. */
  static Headers headers(Row row) {
    if (row.length() < 5 || row.isNullAt(4)) {
      return null;
    }
    Headers out = new RecordHeaders();
    for (Row header : row.<Row>getList(4)) {
      out.add(header.getString(0), header.isNullAt(1) ? null : (byte[]) header.get(1));
    }
    return out;
  }

  /** The marker topic's partition of {@code id}: CRC-32, as the Python side computes it. */
  public static int markerPartition(String id, int partitions) {
    CRC32 crc = new CRC32();
    crc.update(id.getBytes(StandardCharsets.UTF_8));
    return (int) (crc.getValue() % partitions);
  }

  /** The batch id a marker value records, or null. */
  public static Long markerBatch(byte[] value) {
    if (value == null) {
      return null;
    }
    Matcher m = BATCH.matcher(new String(value, StandardCharsets.UTF_8));
    return m.find() ? Long.valueOf(m.group(1)) : null;
  }

  static final class Task implements MapPartitionsFunction<Row, String>, Serializable {
    private static final long serialVersionUID = 1L;
    private final HashMap<String, String> kafka;
    private final String markerTopic;
    private final int markerPartitions;
    private final String idPrefix;
    private final long batchId;

    Task(
        HashMap<String, String> kafka,
        String markerTopic,
        int markerPartitions,
        String idPrefix,
        long batchId) {
      this.kafka = kafka;
      this.markerTopic = markerTopic;
      this.markerPartitions = markerPartitions;
      this.idPrefix = idPrefix;
      this.batchId = batchId;
    }

    @Override
    public Iterator<String> call(Iterator<Row> rows) throws Exception {
      String id = idPrefix + TaskContext.getPartitionId();
      List<String> counts = new ArrayList<>();
      Row first = null;
      while (rows.hasNext()) {
        Row row = rows.next();
        if (row.isNullAt(3)) {
          first = row;
          break;
        }
        counts.add(row.getString(3));
      }
      long written = first == null ? 0 : transact(id, first, rows, counts);
      List<String> out = new ArrayList<>();
      for (String c : counts) {
        out.add(written + " " + c);
        written = 0;
      }
      if (written > 0) {
        out.add(written + " {}");
      }
      return out.iterator();
    }

    private long transact(String id, Row first, Iterator<Row> rows, List<String> counts)
        throws Exception {
      String key = connection() + "\u0000" + id;
      for (int attempt = 0; attempt < 2; attempt++) {
        Kept kept = KEPT.remove(key);
        if (kept == null) {
          kept = open(id);
        }
        if (kept.committed != null && batchId <= kept.committed) {
          while (rows.hasNext()) {
            Row row = rows.next();
            if (!row.isNullAt(3)) {
              counts.add(row.getString(3));
            }
          }
          keep(key, kept);
          SKIPPED.incrementAndGet();
          return 0;
        }
        KafkaProducer<byte[], byte[]> producer = kept.producer;
        long began = System.nanoTime();
        try {
          producer.beginTransaction();
          producer
              .send(
                  new ProducerRecord<>(
                      markerTopic,
                      markerPartition(id, markerPartitions),
                      id.getBytes(StandardCharsets.UTF_8),
                      ("{\"batch\": " + batchId + "}").getBytes(StandardCharsets.UTF_8)))
              .get();
        } catch (Exception e) {
          abortAndClose(kept);
          if (attempt == 0) {
            REPLACED.incrementAndGet();
            continue; // fenced since its last use (or broken): a new producer, once
          }
          throw new IllegalStateException(id + ": cannot start a transaction: " + e, e);
        }
        AtomicReference<Exception> failed = new AtomicReference<>();
        long n = 0;
        try {
          Row row = first;
          while (row != null) {
            if (row.isNullAt(3)) {
              byte[] k = row.isNullAt(0) ? null : (byte[]) row.get(0);
              producer.send(
                  new ProducerRecord<>(
                      row.getString(2), null, k, (byte[]) row.get(1), headers(row)),
                  (meta, err) -> {
                    if (err != null) {
                      failed.compareAndSet(null, err);
                    }
                  });
              n++;
            } else {
              counts.add(row.getString(3));
            }
            if (failed.get() != null) {
              break;
            }
            row = rows.hasNext() ? rows.next() : null;
          }
          producer.flush();
          if (failed.get() != null) {
            throw new IllegalStateException(
                id + ": batch " + batchId + " not delivered: " + failed.get(), failed.get());
          }
          producer.commitTransaction();
        } catch (Exception e) {
          abortAndClose(kept);
          if (e instanceof IllegalStateException) {
            throw e;
          }
          throw new IllegalStateException(id + ": batch " + batchId + " not committed: " + e, e);
        }
        TXN_NANOS.addAndGet(System.nanoTime() - began);
        COMMITTED.incrementAndGet();
        kept.committed = batchId;
        keep(key, kept);
        return n;
      }
      throw new IllegalStateException("unreachable");
    }

    private String connection() {
      return new TreeMap<>(kafka).toString();
    }

    private void keep(String key, Kept kept) {
      Kept old = KEPT.put(key, kept);
      if (old != null && old != kept) {
        close(old);
      }
    }

    private Properties common() {
      Properties p = new Properties();
      p.putAll(kafka);
      return p;
    }

    /** A new producer of {@code id}: {@code initTransactions()}, then the id's marker read. */
    private Kept open(String id) throws Exception {
      Properties p = common();
      String timeout = kafka.getOrDefault("transaction.timeout.ms", "60000");
      p.put("transaction.timeout.ms", timeout);
      p.put("transactional.id", id);
      p.put("enable.idempotence", "true");
      p.put("acks", "all");
      p.putIfAbsent("linger.ms", "20");
      p.putIfAbsent("batch.size", "262144");
      p.putIfAbsent("max.block.ms", String.valueOf(TIMEOUT_MS));
      p.put("key.serializer", ByteArraySerializer.class.getName());
      p.put("value.serializer", ByteArraySerializer.class.getName());
      long began = System.nanoTime();
      KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
      try {
        producer.initTransactions();
        Kept kept = new Kept(producer, id, readMarker(id));
        OPENED.incrementAndGet();
        OPEN_NANOS.addAndGet(System.nanoTime() - began);
        return kept;
      } catch (Exception e) {
        producer.close(Duration.ZERO);
        throw e;
      }
    }

    /**
     * The last committed batch of {@code id} in the marker topic (null: never), read with
     * {@code read_committed} up to the partition's high watermark taken now (an open
     * transaction of another id holds the read back until it ends; the last stable offset
     * alone could stop before this id's marker).
     */
    private Long readMarker(String id) throws Exception {
      TopicPartition tp = new TopicPartition(markerTopic, markerPartition(id, markerPartitions));
      Properties p = common();
      p.put("key.deserializer", ByteArrayDeserializer.class.getName());
      p.put("value.deserializer", ByteArrayDeserializer.class.getName());
      p.put("enable.auto.commit", "false");
      p.put("fetch.max.wait.ms", "10");
      long high;
      p.put("isolation.level", "read_uncommitted");
      try (KafkaConsumer<byte[], byte[]> probe = new KafkaConsumer<>(p)) {
        high = probe.endOffsets(List.of(tp), Duration.ofMillis(TIMEOUT_MS)).get(tp);
      }
      if (high <= 0) {
        return null;
      }
      p.put("isolation.level", "read_committed");
      byte[] key = id.getBytes(StandardCharsets.UTF_8);
      Long found = null;
      try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
        consumer.assign(List.of(tp));
        consumer.seekToBeginning(List.of(tp));
        long deadline = System.currentTimeMillis() + TIMEOUT_MS;
        while (consumer.position(tp) < high) {
          if (System.currentTimeMillis() > deadline) {
            throw new TimeoutException(
                "could not read the marker of " + id + " in " + tp + " within 60 s (an open "
                    + "transaction holds it back)");
          }
          for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
            if (r.key() != null && java.util.Arrays.equals(r.key(), key)) {
              Long batch = markerBatch(r.value());
              if (batch != null) {
                found = batch;
              }
            }
          }
        }
      }
      return found;
    }
  }

  private static void abortAndClose(Kept kept) {
    try {
      kept.producer.abortTransaction();
    } catch (Exception ignored) {
      // fenced or broken: dropped either way
    }
    close(kept);
  }

  private static void close(Kept kept) {
    try {
      kept.producer.close(Duration.ofSeconds(5));
    } catch (Exception ignored) {
      // dropped either way
    }
  }
}
