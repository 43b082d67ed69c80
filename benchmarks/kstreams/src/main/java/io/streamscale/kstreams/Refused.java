package io.streamscale.kstreams;

import java.nio.charset.StandardCharsets;
import java.util.Optional;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.streams.processor.api.RecordMetadata;

/**
 * A record a pipeline cannot use: the dead-letter error code and sentence of the project
 * (src/streamscale/pipelines/deadletter.py), and the dead letter's headers.
 */
final class Refused extends Exception {
  static final String NOT_JSON = "not_json";
  static final String WRONG_TYPE = "wrong_type";
  static final String MISSING_FIELD = "missing_field";
  static final String INVALID_VALUE = "invalid_value";
  static final String NULL_KEY = "null_key";
  static final String NULL_VALUE = "null_value";
  static final String UNDECODABLE_HIT = "undecodable_hit";

  final String error;
  final String detail;

  Refused(String error, String detail) {
    super(detail, null, false, false);
    this.error = error;
    this.detail = detail;
  }

  /** The headers of a dead letter: error, error.detail, source.topic/partition/offset. */
  static Headers headers(String error, String detail, Optional<RecordMetadata> source) {
    RecordHeaders h = new RecordHeaders();
    h.add("error", bytes(error));
    h.add("error.detail", bytes(detail));
    RecordMetadata m = source.orElse(null);
    h.add("source.topic", bytes(m == null ? "" : m.topic()));
    h.add("source.partition", bytes(m == null ? "-1" : Integer.toString(m.partition())));
    h.add("source.offset", bytes(m == null ? "-1" : Long.toString(m.offset())));
    return h;
  }

  Headers headers(Optional<RecordMetadata> source) {
    return headers(error, detail, source);
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
