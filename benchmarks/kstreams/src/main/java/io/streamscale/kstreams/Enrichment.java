package io.streamscale.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import java.math.BigDecimal;
import java.math.RoundingMode;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Map;
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
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Purchase enrichment as a Kafka Streams user writes it: purchases ({@code achats}, keyed by
 * transaction id) re-keyed by product id through a repartition topic
 * ({@code <application.id>-achats-by-product-id-repartition}) and left-joined with a KTable of
 * the compacted referential; output {@code {"id","name","price"}} keyed by the transaction id,
 * {@code "REF INCONNUE"} for an unknown or deleted product. Records that cannot be used go to
 * the dead-letter topic with the project's error codes and headers.
 *
 * <p>Output bytes are the project's (src/streamscale/pipelines/purchase_batches.py): the id as
 * an integer, the name as Python's json.dumps writes it, the price with two decimals (rounded
 * half up, as Spark reads a DECIMAL(10,2)).
 */
final class Enrichment {
  static final String REF_UNKNOWN = "REF INCONNUE";
  static final BigDecimal PRICE_LIMIT = BigDecimal.TEN.pow(8);
  private static final String WHAT = "purchase value";

  private Enrichment() {}

  /** A usable purchase: its transaction id (the output key), product id and price text. */
  record Purchase(byte[] tx, long pid, String price) {}

  static Topology topology(Map<String, String> topics) {
    String purchases = topics.getOrDefault("purchases", "achats");
    String referential = topics.getOrDefault("referential", "referentiel");
    String output = topics.getOrDefault("output", "achats-enrichis");
    String dlq = topics.getOrDefault("dlq", "enrichment-dlq");
    StreamsBuilder builder = new StreamsBuilder();

    // The referential: checked, bad records dead-lettered, the rest a table (null deletes).
    Map<String, KStream<String, Item<String>>> products =
        builder.stream(referential, Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .processValues(CheckProduct::new, Named.as("check-referential"))
            .split(Named.as("referential-"))
            .branch((k, v) -> v.dead, Branched.as("dead"))
            .defaultBranch(Branched.as("ok"));
    products.get("referential-dead")
        .mapValues(v -> v.raw, Named.as("referential-dead-letters"))
        .to(dlq, Produced.with(Serdes.String(), Serdes.ByteArray()));
    KTable<String, String> names =
        products.get("referential-ok")
            .mapValues(v -> v.ok, Named.as("product-name"))
            .toTable(
                Named.as("referential-table"),
                Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as("referential")
                    .withKeySerde(Serdes.String())
                    .withValueSerde(Serdes.String()));

    // Purchases: checked, re-keyed by product id through a repartition topic, joined.
    Map<String, KStream<byte[], Item<Purchase>>> checked =
        builder.stream(purchases, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
            .processValues(CheckPurchase::new, Named.as("check-purchases"))
            .split(Named.as("purchases-"))
            .branch((k, v) -> v.dead, Branched.as("dead"))
            .defaultBranch(Branched.as("ok"));
    checked.get("purchases-dead")
        .mapValues(v -> v.raw, Named.as("purchase-dead-letters"))
        .to(dlq, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    checked.get("purchases-ok")
        .map((tx, v) -> KeyValue.pair(Long.toString(v.ok.pid()), v.ok), Named.as("by-product-id"))
        .repartition(
            Repartitioned.<String, Purchase>as("achats-by-product-id")
                .withKeySerde(Serdes.String())
                .withValueSerde(new PurchaseSerde()))
        .leftJoin(
            names,
            Enrichment::enrich,
            Joined.with(Serdes.String(), new PurchaseSerde(), Serdes.String())
                .withName("enrich"))
        .map(
            (pid, out) -> {
              Stats.countTimed("enriched");
              return KeyValue.pair(out.getKey(), out.getValue());
            },
            Named.as("by-transaction-id"))
        .to(output, Produced.with(Serdes.ByteArray(), Serdes.ByteArray()));
    return builder.build();
  }

  /** The output record of a purchase: its transaction id and {"id","name","price"}. */
  static Map.Entry<byte[], byte[]> enrich(Purchase p, String name) {
    StringBuilder sb = new StringBuilder(64);
    sb.append("{\"id\":").append(p.pid()).append(",\"name\":");
    Json.string(sb, name == null ? REF_UNKNOWN : name);
    sb.append(",\"price\":").append(p.price()).append('}');
    return Map.entry(p.tx(), sb.toString().getBytes(StandardCharsets.UTF_8));
  }

  /**
   * A purchase as the project reads it (purchase_batches.check_purchase: Spark's from_json into
   * {@code id BIGINT, price DECIMAL(10,2)}); a purchase without a key is refused whatever its
   * value.
   */
  static Purchase checkPurchase(byte[] key, byte[] raw) throws Refused {
    if (key == null) {
      throw new Refused(Refused.NULL_KEY, "purchase key (transaction id) is null");
    }
    if (raw == null) {
      throw new Refused(Refused.NULL_VALUE, WHAT + " is null");
    }
    JsonNode obj = Json.object(raw);
    if (obj == null) {
      throw new Refused(Refused.NOT_JSON, WHAT + " is not a JSON object");
    }
    JsonNode id = Json.field(obj, "id");
    JsonNode price = Json.field(obj, "price");
    Refused wrong =
        new Refused(
            Refused.WRONG_TYPE,
            WHAT + " has a field of the wrong type (expected id an integer product id, price a decimal)");
    if (id != null && !Json.isLong(id)) {
      throw wrong;
    }
    String priceText = null;
    if (price != null) {
      if (!price.isNumber()) {
        throw wrong;
      }
      BigDecimal p = price.decimalValue().setScale(2, RoundingMode.HALF_UP);
      if (p.abs().compareTo(PRICE_LIMIT) >= 0) {
        throw wrong;
      }
      priceText = p.toPlainString();
    }
    if (id == null) {
      throw new Refused(Refused.MISSING_FIELD, WHAT + " has no id (an integer product id)");
    }
    if (price == null) {
      throw new Refused(Refused.MISSING_FIELD, WHAT + " has no price (a decimal)");
    }
    return new Purchase(key, id.longValue(), priceText);
  }

  /**
   * A referential record as the project checks it (enrichment._referential_checks): the key an
   * integer product id, the value null (a tombstone) or {"id": the key, "name": a string}.
   * Returns the name, null for a tombstone.
   */
  static String checkProduct(String key, byte[] raw) throws Refused {
    if (key == null) {
      throw new Refused(Refused.NULL_KEY, "a referential record needs its product id as key");
    }
    long pid;
    try {
      pid = Long.parseLong(key.trim());
    } catch (NumberFormatException e) {
      throw new Refused(Refused.WRONG_TYPE, "referential key is not an integer product id");
    }
    if (raw == null) {
      return null;
    }
    JsonNode obj = Json.object(raw);
    String what = "product value";
    if (obj == null) {
      throw new Refused(Refused.NOT_JSON, what + " is not a JSON object");
    }
    Refused wrong =
        new Refused(
            Refused.WRONG_TYPE,
            what + " has a field of the wrong type (expected id an integer product id, name a string)");
    JsonNode id = Json.field(obj, "id");
    JsonNode name = Json.field(obj, "name");
    if (id != null && !Json.isLong(id)) {
      throw wrong;
    }
    if (id == null) {
      throw new Refused(Refused.MISSING_FIELD, what + " has no id (an integer product id)");
    }
    if (name == null) {
      throw new Refused(Refused.MISSING_FIELD, what + " has no name (a string)");
    }
    if (!name.isTextual()) {
      throw wrong;
    }
    if (id.longValue() != pid) {
      throw new Refused(Refused.INVALID_VALUE, "product value id differs from the record key");
    }
    return name.textValue();
  }

  static final class CheckPurchase implements FixedKeyProcessor<byte[], byte[], Item<Purchase>> {
    private FixedKeyProcessorContext<byte[], Item<Purchase>> context;

    @Override
    public void init(FixedKeyProcessorContext<byte[], Item<Purchase>> context) {
      this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<byte[], byte[]> record) {
      Stats.first();
      Stats.count("purchases");
      try {
        context.forward(record.withValue(Item.ok(checkPurchase(record.key(), record.value()))));
      } catch (Refused r) {
        Stats.countTimed("purchases_dlq");
        context.forward(
            record
                .withValue(Item.<Purchase>dead(record.value()))
                .withHeaders(r.headers(context.recordMetadata())));
      }
    }
  }

  static final class CheckProduct implements FixedKeyProcessor<String, byte[], Item<String>> {
    private FixedKeyProcessorContext<String, Item<String>> context;

    @Override
    public void init(FixedKeyProcessorContext<String, Item<String>> context) {
      this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<String, byte[]> record) {
      Stats.first();
      Stats.count("referential");
      try {
        context.forward(record.withValue(Item.ok(checkProduct(record.key(), record.value()))));
      } catch (Refused r) {
        Stats.countTimed("referential_dlq");
        context.forward(
            record
                .withValue(Item.<String>dead(record.value()))
                .withHeaders(r.headers(context.recordMetadata())));
      }
    }
  }

  /** Purchase in the repartition topic: tx length, tx, product id, price text. */
  static final class PurchaseSerde implements Serde<Purchase> {
    @Override
    public Serializer<Purchase> serializer() {
      return (topic, p) -> {
        if (p == null) {
          return null;
        }
        byte[] price = p.price().getBytes(StandardCharsets.US_ASCII);
        ByteBuffer b = ByteBuffer.allocate(4 + p.tx().length + 8 + price.length);
        b.putInt(p.tx().length).put(p.tx()).putLong(p.pid()).put(price);
        return b.array();
      };
    }

    @Override
    public Deserializer<Purchase> deserializer() {
      return (topic, data) -> {
        if (data == null) {
          return null;
        }
        ByteBuffer b = ByteBuffer.wrap(data);
        byte[] tx = new byte[b.getInt()];
        b.get(tx);
        long pid = b.getLong();
        String price = new String(data, b.position(), b.remaining(), StandardCharsets.US_ASCII);
        return new Purchase(tx, pid, price);
      };
    }
  }
}
