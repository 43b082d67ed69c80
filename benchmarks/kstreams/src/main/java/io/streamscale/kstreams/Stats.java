package io.streamscale.kstreams;

import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;

/**
 * Counters the benchmark driver reads from stdout: records seen per step, the wall-clock time
 * of the first record consumed, and of the last update of each counter. One line
 * {@code STATS {...}} every report interval (and once more at shutdown).
 */
final class Stats {
  private static final Map<String, LongAdder> COUNTS = new ConcurrentHashMap<>();
  private static final Map<String, AtomicLong> LAST = new ConcurrentHashMap<>();
  private static final AtomicLong FIRST = new AtomicLong();
  private static volatile String state = "CREATED";

  private Stats() {}

  /** The first input record is being processed now (the first call wins). */
  static void first() {
    if (FIRST.get() == 0) {
      FIRST.compareAndSet(0, System.currentTimeMillis());
    }
  }

  static void count(String name) {
    COUNTS.computeIfAbsent(name, n -> new LongAdder()).increment();
  }

  /** Count and remember when this counter last moved. */
  static void countTimed(String name) {
    count(name);
    LAST.computeIfAbsent(name, n -> new AtomicLong()).set(System.currentTimeMillis());
  }

  static void state(String newState) {
    state = newState;
  }

  static String line() {
    StringBuilder sb = new StringBuilder(256);
    sb.append("STATS {\"t\":").append(System.currentTimeMillis());
    sb.append(",\"first\":").append(FIRST.get());
    sb.append(",\"state\":\"").append(state).append('"');
    sb.append(",\"counts\":{");
    boolean more = false;
    for (Map.Entry<String, LongAdder> e : new TreeMap<>(COUNTS).entrySet()) {
      sb.append(more ? "," : "").append('"').append(e.getKey()).append("\":").append(e.getValue().sum());
      more = true;
    }
    sb.append("},\"last\":{");
    more = false;
    for (Map.Entry<String, AtomicLong> e : new TreeMap<>(LAST).entrySet()) {
      sb.append(more ? "," : "").append('"').append(e.getKey()).append("\":").append(e.getValue().get());
      more = true;
    }
    return sb.append("}}").toString();
  }
}
