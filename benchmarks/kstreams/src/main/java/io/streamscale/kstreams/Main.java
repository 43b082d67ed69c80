package io.streamscale.kstreams;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

/**
 * The seed pipelines on Kafka Streams, for benchmarks/kstreams.py.
 *
 * <pre>
 * java -jar streamscale-kstreams-all.jar enrichment|game-sessions --bootstrap HOST:PORT
 *     --application-id ID --state-dir DIR [--threads N] [--topic ROLE=NAME ...]
 *     [--gap-ms 30000] [--window-ms 3000] [--delay-ms 10000] [--retention-margin-ms 60000]
 *     [--emit close|suppress] [--report-ms 100]
 *     [--config KEY=VALUE ...]
 * </pre>
 *
 * Topic roles: enrichment purchases, referential, output, dlq; game-sessions requests,
 * approvals, output, dlq (defaults: the project's topic names). The session store keeps
 * gap + grace + retention margin (see GameSessions); sessions are emitted when closed, by
 * {@code EmitStrategy.onWindowClose()} (--emit close, the default) or by
 * {@code suppress(untilWindowCloses)} (--emit suppress). Prints {@code STATE <state>} on
 * every state change and {@code STATS {...}} (counters) every report interval; stops cleanly on
 * SIGTERM.
 */
public final class Main {
  private Main() {}

  public static void main(String[] args) throws Exception {
    if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
      System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
    }
    if (args.length < 1) {
      usage("which application: enrichment or game-sessions");
    }
    String app = args[0];
    Map<String, String> opts = new HashMap<>();
    Map<String, String> topics = new HashMap<>();
    Properties props = new Properties();
    for (int i = 1; i < args.length; i++) {
      String name = args[i];
      if (!name.startsWith("--") || i + 1 >= args.length) {
        usage("bad argument " + name);
      }
      String value = args[++i];
      switch (name) {
        case "--topic" -> put(topics, value);
        case "--config" -> {
          String[] kv = value.split("=", 2);
          props.put(kv[0], kv.length > 1 ? kv[1] : "");
        }
        default -> opts.put(name.substring(2), value);
      }
    }
    Properties config = new Properties();
    config.put(StreamsConfig.APPLICATION_ID_CONFIG, required(opts, "application-id"));
    config.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, required(opts, "bootstrap"));
    config.put(StreamsConfig.STATE_DIR_CONFIG, required(opts, "state-dir"));
    config.put(
        StreamsConfig.NUM_STREAM_THREADS_CONFIG,
        Integer.parseInt(
            opts.getOrDefault("threads", Integer.toString(Runtime.getRuntime().availableProcessors()))));
    config.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
    config.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
    config.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class);
    config.putAll(props);

    long gapMs = Long.parseLong(opts.getOrDefault("gap-ms", "30000"));
    long windowMs = Long.parseLong(opts.getOrDefault("window-ms", "3000"));
    long delayMs = Long.parseLong(opts.getOrDefault("delay-ms", "10000"));
    long reportMs = Long.parseLong(opts.getOrDefault("report-ms", "100"));
    long marginMs =
        Long.parseLong(
            opts.getOrDefault(
                "retention-margin-ms", Long.toString(GameSessions.RETENTION_MARGIN_MS)));
    Topology topology =
        switch (app) {
          case "enrichment" -> Enrichment.topology(topics);
          case "game-sessions" -> GameSessions.topology(
              topics, gapMs, windowMs, delayMs, marginMs, opts.getOrDefault("emit", "close"));
          default -> {
            usage("unknown application " + app);
            yield null;
          }
        };
    if (opts.containsKey("describe")) {
      System.out.println(topology.describe());
    }

    KafkaStreams streams = new KafkaStreams(topology, config);
    CountDownLatch stopped = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          Stats.state(now.name());
          System.out.println("STATE " + now);
          System.out.flush();
        });
    streams.setUncaughtExceptionHandler(
        e -> {
          System.out.println("ERROR " + e);
          e.printStackTrace();
          System.out.flush();
          return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    Thread reporter =
        new Thread(
            () -> {
              try {
                while (stopped.getCount() > 0) {
                  System.out.println(Stats.line());
                  System.out.flush();
                  Thread.sleep(reportMs);
                }
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
              }
            },
            "stats-reporter");
    reporter.setDaemon(true);
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close(Duration.ofSeconds(20));
                  System.out.println(Stats.line());
                  System.out.flush();
                  stopped.countDown();
                },
                "shutdown"));
    streams.start();
    reporter.start();
    stopped.await();
  }

  private static void put(Map<String, String> map, String kv) {
    String[] parts = kv.split("=", 2);
    if (parts.length != 2) {
      usage("expected ROLE=NAME, got " + kv);
    }
    map.put(parts[0], parts[1]);
  }

  private static String required(Map<String, String> opts, String name) {
    String v = opts.get(name);
    if (v == null) {
      usage("--" + name + " is required");
    }
    return v;
  }

  private static void usage(String problem) {
    System.err.println(
        "usage: java -jar streamscale-kstreams-all.jar enrichment|game-sessions --bootstrap HOST:PORT"
            + " --application-id ID --state-dir DIR [--threads N] [--topic ROLE=NAME ...]"
            + " [--gap-ms MS] [--window-ms MS] [--delay-ms MS] [--retention-margin-ms MS]"
            + " [--emit close|suppress] [--report-ms MS]"
            + " [--config KEY=VALUE ...]\n"
            + problem);
    System.exit(2);
  }
}
