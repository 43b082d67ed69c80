package io.streamscale.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.SessionStore;

/**
 * Game sessions as a Kafka Streams user writes them: frames ({@code GAME-FRAME-RQ}, event time
 * = the header's ts) joined with their approvals ({@code GAME-FRAME-RS}, same key; event time =
 * the approval's record timestamp) within [ts, ts + 3 s] (a KStream-KStream join, RocksDB
 * window stores), hits decoded, re-keyed by machine through a repartition topic and summed into
 * session windows (RocksDB session store) emitted once, when the window closes.
 *
 * <p>Semantics and output bytes follow the project (src/streamscale/pipelines/game_sessions.py,
 * frame_batches.py, sessions.py, hits.py): a frame joins a session when less than the gap after
 * its last frame (Kafka Streams merges records at most the inactivity gap apart, hence an
 * inactivity gap of gap - 1 ms); a session closes when stream time - delay reaches its last
 * frame + gap (the grace is the project's watermark delay); one JSON record per closed
 * session keyed by machine. Kafka Streams' stream time is per task, where the project's
 * watermark is the minimum over both inputs.
 */
final class GameSessions {
  static final String[] ZONES = {"EU", "US", "ZG", "AU"};
  static final String[] GAMES = {
    "NeonBrawl", "IronFist", "DragonDojo", "StreetKing", "SkyRonin", "PixelSumo", "ThunderKick",
    "ShadowBlade"
  };
  static final String[] IMPACT_TYPES = {"Fatal", "Critical", "Special", "Direct", "Missed"};
  static final String[] DIRECTIONS = {"UP", "DOWN", "RIGHT", "LEFT"};
  static final int IMPACT_MIN = 42;
  static final int IMPACT_MAX = 209;
  static final long RETENTION_MARGIN_MS = 60_000; // default of --retention-margin-ms

  private GameSessions() {}

  static Topology topology(
      Map<String, String> topics,
      long gapMs,
      long windowMs,
      long delayMs,
      long marginMs,
      String emit) {
    String requests = topics.getOrDefault("requests", "GAME-FRAME-RQ");
    String approvals = topics.getOrDefault("approvals", "GAME-FRAME-RS");
    String output = topics.getOrDefault("output", "SESSIONS");
    String dlq = topics.getOrDefault("dlq", "game-sessions-dlq");
    StreamsBuilder builder = new StreamsBuilder();
    Serde<byte[]> bytes = Serdes.ByteArray();

    Map<String, KStream<byte[], Item<Frame>>> frames =
        builder.stream(
                requests,
                Consumed.with(bytes, bytes).withTimestampExtractor(new HeaderTimestamp()))
            .processValues(CheckFrame::new, Named.as("check-frames"))
            .split(Named.as("frames-"))
            .branch((k, v) -> v.dead, Branched.as("dead"))
            .defaultBranch(Branched.as("ok"));
    frames.get("frames-dead")
        .mapValues(v -> v.raw, Named.as("frame-dead-letters"))
        .to(dlq, Produced.with(bytes, bytes));

    Map<String, KStream<byte[], Item<Long>>> approved =
        builder.stream(approvals, Consumed.with(bytes, bytes))
            .processValues(() -> new CheckApproval(windowMs), Named.as("check-approvals"))
            .split(Named.as("approvals-"))
            .branch((k, v) -> v.dead, Branched.as("dead"))
            .defaultBranch(Branched.as("ok"));
    approved.get("approvals-dead")
        .mapValues(v -> v.raw, Named.as("approval-dead-letters"))
        .to(dlq, Produced.with(bytes, bytes));

    KStream<byte[], Frame> framesOk = frames.get("frames-ok").mapValues(v -> v.ok);
    KStream<byte[], Long> approvalsOk = approved.get("approvals-ok").mapValues(v -> v.ok);
    long gapForStreams = gapMs - 1; // Kafka Streams merges at <= gap, the project at < gap
    SessionWindowedKStream<String, Frame> windowed =
        framesOk
            .join(
                approvalsOk,
                (frame, approvalTs) -> frame,
                JoinWindows.ofTimeDifferenceAndGrace(
                        Duration.ofMillis(windowMs), Duration.ofMillis(delayMs))
                    .before(Duration.ZERO),
                StreamJoined.with(bytes, new FrameSerde(), Serdes.Long())
                    .withName("frame-approval")
                    .withStoreName("frame-approval"))
            .process(ByMachine::new, Named.as("by-machine"))
            .groupByKey(Grouped.with("sessions-by-machine", Serdes.String(), new FrameSerde()))
            .windowedBy(
                SessionWindows.ofInactivityGapAndGrace(
                    Duration.ofMillis(gapForStreams), Duration.ofMillis(delayMs)));
    boolean suppress = "suppress".equals(emit);
    if (!suppress) {
      // Emit-final (KIP-825): no cache, closed windows read from the store's time index.
      windowed = windowed.emitStrategy(EmitStrategy.onWindowClose());
    }
    KTable<Windowed<String>, Session> sessions =
        windowed.aggregate(
            Session::new,
            (machine, frame, session) -> {
              Stats.countTimed("aggregated");
              return session.add(frame);
            },
            (machine, a, b) -> a.merge(b),
            Named.as("sessions"),
            Materialized.<String, Session, SessionStore<Bytes, byte[]>>as("sessions")
                .withKeySerde(Serdes.String())
                .withValueSerde(new SessionSerde())
                // Retention past gap + grace (the default): with the default, one jump of stream
                // time can drop a RocksDB segment in the same step that closes its sessions, and
                // emit-on-close then finds nothing to emit (sessions silently lost).
                .withRetention(Duration.ofMillis(gapForStreams + delayMs + marginMs)));
    if (suppress) {
      // The classic way: cached updates, final results held in the suppression buffer.
      sessions =
          sessions.suppress(
              Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded())
                  .withName("until-closed"));
    }
    sessions
        .toStream(Named.as("closed-sessions"))
        .filter((w, s) -> s != null, Named.as("not-deleted"))
        .map(
            (Windowed<String> w, Session s) -> {
              Stats.countTimed("sessions");
              return KeyValue.pair(
                  w.key().getBytes(StandardCharsets.US_ASCII),
                  s.json(w.key(), w.window().start(), w.window().end(), gapMs));
            },
            Named.as("session-json"))
        .to(output, Produced.with(bytes, bytes));
    return builder.build();
  }

  // --- frames ---------------------------------------------------------------------------------

  /** A frame header: event time, machine, zone index. */
  record Header(long ts, int machine, int zone) {}

  /** One approved-frame candidate: its header and the sums of its decodable hits. */
  static final class Frame {
    long ts;
    int machine;
    int zone;
    int game; // 1-based code
    int hits;
    int impactSum;
    int impactMax;
    final int[] types = new int[5];
    final int[] directions = new int[4];
  }

  /**
   * Event time of a frame: the header's ts when the key is a frame header, else the record's
   * timestamp (the generator writes the same value in both).
   */
  static final class HeaderTimestamp implements TimestampExtractor {
    @Override
    public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
      Object key = record.key();
      if (key instanceof byte[] k && k.length > 7 && k[0] == '{' && k[1] == '"' && k[2] == 't'
          && k[3] == 's' && k[4] == '"' && k[5] == ':') {
        long ts = 0;
        int i = 6;
        for (; i < k.length && i < 24 && k[i] >= '0' && k[i] <= '9'; i++) {
          ts = ts * 10 + (k[i] - '0');
        }
        if (i > 6 && i < k.length && k[i] == ',') {
          return ts;
        }
      }
      return record.timestamp();
    }
  }

  /** frame_batches.check_header: a frame key in any JSON form. */
  static Header checkHeader(byte[] raw) throws Refused {
    String what = "frame key";
    if (raw == null) {
      throw new Refused(Refused.NULL_KEY, what + " is null");
    }
    JsonNode obj = Json.object(raw);
    if (obj == null) {
      throw new Refused(Refused.NOT_JSON, what + " is not a JSON object");
    }
    JsonNode ts = Json.field(obj, "ts");
    JsonNode machine = Json.field(obj, "machine");
    JsonNode zone = Json.field(obj, "zone");
    if ((ts != null && !Json.isLong(ts))
        || (machine != null && !machine.isTextual())
        || (zone != null && !zone.isTextual())) {
      throw new Refused(
          Refused.WRONG_TYPE,
          what + " has a field of the wrong type (ts an integer, machine a string, zone a string)");
    }
    if (ts == null) {
      throw new Refused(Refused.MISSING_FIELD, what + " has no ts");
    }
    if (machine == null) {
      throw new Refused(Refused.MISSING_FIELD, what + " has no machine");
    }
    if (zone == null) {
      throw new Refused(Refused.MISSING_FIELD, what + " has no zone");
    }
    String m = machine.textValue();
    int z = indexOf(ZONES, zone.textValue());
    boolean digits = m.length() == 6;
    for (int i = 0; digits && i < 6; i++) {
      digits = m.charAt(i) >= '0' && m.charAt(i) <= '9';
    }
    if (ts.longValue() < 0 || !digits || z < 0) {
      throw new Refused(
          Refused.INVALID_VALUE, "frame key: ts negative, machine not 6 digits or unknown zone");
    }
    return new Header(ts.longValue(), Integer.parseInt(m), z);
  }

  /**
   * A frame: header and body checked (frame_batches.check_body), hits decoded (hits.decode_hit).
   * Undecodable hits are listed in {@code problems} (the frame is dead-lettered once and its
   * decodable hits still count).
   */
  static Frame checkFrame(byte[] key, byte[] value, List<String> problems) throws Refused {
    Header h = checkHeader(key);
    String what = "frame body";
    if (value == null) {
      throw new Refused(Refused.NULL_VALUE, what + " is null");
    }
    JsonNode obj = Json.object(value);
    if (obj == null) {
      throw new Refused(Refused.NOT_JSON, what + " is not a JSON object");
    }
    JsonNode game = Json.field(obj, "game");
    JsonNode hits = Json.field(obj, "hits");
    if ((game != null && !game.isTextual()) || (hits != null && !hits.isArray())) {
      throw new Refused(
          Refused.WRONG_TYPE, what + " has a field of the wrong type (game a string, hits a list)");
    }
    if (game == null) {
      throw new Refused(Refused.MISSING_FIELD, what + " has no game");
    }
    if (hits == null) {
      throw new Refused(Refused.MISSING_FIELD, what + " has no hits");
    }
    int g = indexOf(GAMES, game.textValue());
    if (g < 0 || hits.size() < 1 || hits.size() > 5) {
      throw new Refused(Refused.INVALID_VALUE, "frame body: unknown game or not 1-5 hits");
    }
    Frame f = new Frame();
    f.ts = h.ts();
    f.machine = h.machine();
    f.zone = h.zone();
    f.game = g + 1;
    for (int i = 0; i < hits.size(); i++) {
      JsonNode hit = hits.get(i);
      String reason = decodeHit(hit, f);
      if (reason != null) {
        String text = hit.isTextual() ? hit.textValue() : Json.pyDumps(hit);
        problems.add("hit " + i + " " + text + " (" + reason + ")");
      }
    }
    return f;
  }

  /** Decode one hit into {@code f}'s sums; the reason it does not decode, or null. */
  static String decodeHit(JsonNode hit, Frame f) {
    if (!hit.isTextual()) {
      return "type";
    }
    String t = hit.textValue();
    if (t.codePointCount(0, t.length()) != 8) {
      return "length";
    }
    int[] n = new int[8];
    for (int i = 0; i < 8; i++) {
      n[i] = Character.digit(t.charAt(i), 16);
      if (n[i] < 0 || t.charAt(i) > 'f') {
        return "hex";
      }
    }
    int impact = n[0] * 16 + n[1];
    if (impact < IMPACT_MIN || impact > IMPACT_MAX) {
      return "impact";
    }
    if (n[2] < 1 || n[2] > 2) {
      return "key";
    }
    if (n[3] < 1 || n[3] > 4) {
      return "direction";
    }
    if (n[4] < 1 || n[4] > 5) {
      return "impactType";
    }
    if (n[5] < 1 || n[5] > 3) {
      return "level";
    }
    int game = n[6] * 16 + n[7];
    if (game < 1 || game > GAMES.length) {
      return "game";
    }
    f.hits++;
    f.impactSum += impact;
    f.impactMax = Math.max(f.impactMax, impact);
    f.directions[n[3] - 1]++;
    f.types[n[4] - 1]++;
    return null;
  }

  static int indexOf(String[] names, String name) {
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }

  static final class CheckFrame implements FixedKeyProcessor<byte[], byte[], Item<Frame>> {
    private FixedKeyProcessorContext<byte[], Item<Frame>> context;
    private final List<String> problems = new ArrayList<>();

    @Override
    public void init(FixedKeyProcessorContext<byte[], Item<Frame>> context) {
      this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<byte[], byte[]> record) {
      Stats.first();
      Stats.count("frames");
      problems.clear();
      Frame frame;
      try {
        frame = checkFrame(record.key(), record.value(), problems);
      } catch (Refused r) {
        Stats.countTimed("frames_dlq");
        context.forward(
            record
                .withValue(Item.<Frame>dead(record.value()))
                .withHeaders(r.headers(context.recordMetadata())));
        return;
      }
      if (!problems.isEmpty()) {
        Stats.countTimed("hits_dlq");
        String detail = "undecodable hit(s): " + String.join(", ", problems);
        context.forward(
            record
                .withValue(Item.<Frame>dead(record.value()))
                .withHeaders(
                    Refused.headers(Refused.UNDECODABLE_HIT, detail, context.recordMetadata())));
      }
      context.forward(record.withValue(Item.ok(frame)));
    }
  }

  /**
   * An approval: its key a frame header, its value not null (a tombstone is no approval), its
   * record timestamp within [ts, ts + window] (else late: dropped, as in the project).
   */
  static final class CheckApproval implements FixedKeyProcessor<byte[], byte[], Item<Long>> {
    private final long windowMs;
    private FixedKeyProcessorContext<byte[], Item<Long>> context;

    CheckApproval(long windowMs) {
      this.windowMs = windowMs;
    }

    @Override
    public void init(FixedKeyProcessorContext<byte[], Item<Long>> context) {
      this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<byte[], byte[]> record) {
      Stats.first();
      Stats.count("approvals");
      Header h;
      try {
        h = checkHeader(record.key());
        if (record.value() == null) {
          throw new Refused(Refused.NULL_VALUE, "approval value is null (a tombstone)");
        }
      } catch (Refused r) {
        Stats.countTimed("approvals_dlq");
        context.forward(
            record
                .withValue(Item.<Long>dead(record.value()))
                .withHeaders(r.headers(context.recordMetadata())));
        return;
      }
      long at = record.timestamp();
      if (at < h.ts() || at > h.ts() + windowMs) {
        Stats.count("late_approvals");
        return;
      }
      context.forward(record.withValue(Item.ok(at)));
    }
  }

  /** Joined frames re-keyed by machine (6 digits), stamped with the frame's event time. */
  static final class ByMachine implements Processor<byte[], Frame, String, Frame> {
    private ProcessorContext<String, Frame> context;

    @Override
    public void init(ProcessorContext<String, Frame> context) {
      this.context = context;
    }

    @Override
    public void process(Record<byte[], Frame> record) {
      Stats.countTimed("joined");
      Frame f = record.value();
      context.forward(new Record<>(machineText(f.machine), f, f.ts, record.headers()));
    }
  }

  static String machineText(int machine) {
    String s = Integer.toString(machine);
    return "000000".substring(s.length()) + s;
  }

  // --- sessions -------------------------------------------------------------------------------

  /** A session's sums (sessions.Session): zone and game of its latest frame. */
  static final class Session {
    long latestTs = Long.MIN_VALUE;
    int zone;
    int game;
    long frames;
    long hits;
    long impactSum;
    int impactMax;
    final long[] types = new long[5];
    final long[] directions = new long[4];

    Session add(Frame f) {
      if (f.ts >= latestTs) {
        latestTs = f.ts;
        zone = f.zone;
        game = f.game;
      }
      frames++;
      hits += f.hits;
      impactSum += f.impactSum;
      impactMax = Math.max(impactMax, f.impactMax);
      for (int i = 0; i < 5; i++) {
        types[i] += f.types[i];
      }
      for (int i = 0; i < 4; i++) {
        directions[i] += f.directions[i];
      }
      return this;
    }

    Session merge(Session o) {
      Session out = new Session();
      Session latest = o.latestTs >= latestTs ? o : this;
      out.latestTs = latest.latestTs;
      out.zone = latest.zone;
      out.game = latest.game;
      out.frames = frames + o.frames;
      out.hits = hits + o.hits;
      out.impactSum = impactSum + o.impactSum;
      out.impactMax = Math.max(impactMax, o.impactMax);
      for (int i = 0; i < 5; i++) {
        out.types[i] = types[i] + o.types[i];
      }
      for (int i = 0; i < 4; i++) {
        out.directions[i] = directions[i] + o.directions[i];
      }
      return out;
    }

    /** The project's session record (sessions.Session.value, compact JSON, same order). */
    byte[] json(String machine, long firstTs, long lastTs, long gapMs) {
      StringBuilder sb = new StringBuilder(320);
      sb.append("{\"machine\":\"").append(machine);
      sb.append("\",\"zone\":\"").append(ZONES[zone]);
      sb.append("\",\"game\":\"").append(game >= 1 ? GAMES[game - 1] : "");
      sb.append("\",\"start\":").append(firstTs);
      sb.append(",\"end\":").append(lastTs + gapMs);
      sb.append(",\"firstTs\":").append(firstTs);
      sb.append(",\"lastTs\":").append(lastTs);
      sb.append(",\"frames\":").append(frames);
      sb.append(",\"hits\":").append(hits);
      sb.append(",\"totalImpact\":").append(impactSum);
      if (impactMax > 0) {
        sb.append(",\"maxImpact\":").append(impactMax);
      }
      sb.append(",\"impactTypes\":{");
      for (int i = 0; i < 5; i++) {
        sb.append(i > 0 ? "," : "").append('"').append(IMPACT_TYPES[i]).append("\":").append(types[i]);
      }
      sb.append("},\"directions\":{");
      for (int i = 0; i < 4; i++) {
        sb.append(i > 0 ? "," : "").append('"').append(DIRECTIONS[i]).append("\":").append(directions[i]);
      }
      return sb.append("}}").toString().getBytes(StandardCharsets.US_ASCII);
    }
  }

  // --- serdes (compact, fixed-width) -----------------------------------------------------------

  static final class FrameSerde implements Serde<Frame> {
    static final int SIZE = 8 + 4 + 1 + 1 + 4 * 3 + 4 * 9;

    @Override
    public Serializer<Frame> serializer() {
      return (topic, f) -> {
        if (f == null) {
          return null;
        }
        ByteBuffer b = ByteBuffer.allocate(SIZE);
        b.putLong(f.ts).putInt(f.machine).put((byte) f.zone).put((byte) f.game);
        b.putInt(f.hits).putInt(f.impactSum).putInt(f.impactMax);
        for (int v : f.types) {
          b.putInt(v);
        }
        for (int v : f.directions) {
          b.putInt(v);
        }
        return b.array();
      };
    }

    @Override
    public Deserializer<Frame> deserializer() {
      return (topic, data) -> {
        if (data == null) {
          return null;
        }
        ByteBuffer b = ByteBuffer.wrap(data);
        Frame f = new Frame();
        f.ts = b.getLong();
        f.machine = b.getInt();
        f.zone = b.get();
        f.game = b.get();
        f.hits = b.getInt();
        f.impactSum = b.getInt();
        f.impactMax = b.getInt();
        for (int i = 0; i < 5; i++) {
          f.types[i] = b.getInt();
        }
        for (int i = 0; i < 4; i++) {
          f.directions[i] = b.getInt();
        }
        return f;
      };
    }
  }

  static final class SessionSerde implements Serde<Session> {
    static final int SIZE = 8 + 1 + 1 + 8 * 3 + 4 + 8 * 9;

    @Override
    public Serializer<Session> serializer() {
      return (topic, s) -> {
        if (s == null) {
          return null;
        }
        ByteBuffer b = ByteBuffer.allocate(SIZE);
        b.putLong(s.latestTs).put((byte) s.zone).put((byte) s.game);
        b.putLong(s.frames).putLong(s.hits).putLong(s.impactSum).putInt(s.impactMax);
        for (long v : s.types) {
          b.putLong(v);
        }
        for (long v : s.directions) {
          b.putLong(v);
        }
        return b.array();
      };
    }

    @Override
    public Deserializer<Session> deserializer() {
      return (topic, data) -> {
        if (data == null) {
          return null;
        }
        ByteBuffer b = ByteBuffer.wrap(data);
        Session s = new Session();
        s.latestTs = b.getLong();
        s.zone = b.get();
        s.game = b.get();
        s.frames = b.getLong();
        s.hits = b.getLong();
        s.impactSum = b.getLong();
        s.impactMax = b.getInt();
        for (int i = 0; i < 5; i++) {
          s.types[i] = b.getLong();
        }
        for (int i = 0; i < 4; i++) {
          s.directions[i] = b.getLong();
        }
        return s;
      };
    }
  }
}
