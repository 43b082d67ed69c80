package io.streamscale.kstreams;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Iterator;
import java.util.Map;

/**
 * JSON in and out as the project reads and writes it: records are parsed as Python's
 * {@code json.loads} would (one JSON document, nothing after it), and text is written as
 * Python's {@code json.dumps} writes it (ASCII only, the same escapes), so that output bytes
 * are the project's.
 */
final class Json {
  static final ObjectMapper MAPPER =
      new ObjectMapper()
          .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)
          .enable(DeserializationFeature.USE_BIG_DECIMAL_FOR_FLOATS);

  private static final char[] HEX = "0123456789abcdef".toCharArray();
  private static final BigInteger LONG_MIN = BigInteger.valueOf(Long.MIN_VALUE);
  private static final BigInteger LONG_MAX = BigInteger.valueOf(Long.MAX_VALUE);

  private Json() {}

  /** The JSON object in {@code raw}, or null when it is not JSON or not an object. */
  static JsonNode object(byte[] raw) {
    try {
      JsonNode node = MAPPER.readTree(raw);
      return node != null && node.isObject() ? node : null;
    } catch (Exception e) { // not JSON, not UTF-8, trailing data
      return null;
    }
  }

  /** A field as Python sees it: absent and JSON null are both "no value". */
  static JsonNode field(JsonNode obj, String name) {
    JsonNode v = obj.get(name);
    return v == null || v.isNull() ? null : v;
  }

  /** An integer JSON number that fits a signed 64-bit integer (Python int, not bool). */
  static boolean isLong(JsonNode v) {
    if (!v.isIntegralNumber()) {
      return false;
    }
    if (v.canConvertToLong()) {
      return true;
    }
    BigInteger b = v.bigIntegerValue();
    return b.compareTo(LONG_MIN) >= 0 && b.compareTo(LONG_MAX) <= 0;
  }

  /** {@code s} as Python's {@code json.dumps(s)} writes it (ensure_ascii). */
  static StringBuilder string(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\n' -> sb.append("\\n");
        case '\r' -> sb.append("\\r");
        case '\t' -> sb.append("\\t");
        case '\b' -> sb.append("\\b");
        case '\f' -> sb.append("\\f");
        default -> {
          if (c >= 0x20 && c <= 0x7e) {
            sb.append(c);
          } else {
            sb.append("\\u")
                .append(HEX[(c >> 12) & 0xf])
                .append(HEX[(c >> 8) & 0xf])
                .append(HEX[(c >> 4) & 0xf])
                .append(HEX[c & 0xf]);
          }
        }
      }
    }
    return sb.append('"');
  }

  /** Python's {@code json.dumps(value)} of a parsed JSON value (default separators). */
  static String pyDumps(JsonNode v) {
    StringBuilder sb = new StringBuilder();
    pyDumps(sb, v);
    return sb.toString();
  }

  private static void pyDumps(StringBuilder sb, JsonNode v) {
    if (v == null || v.isNull()) {
      sb.append("null");
    } else if (v.isBoolean()) {
      sb.append(v.booleanValue() ? "true" : "false");
    } else if (v.isIntegralNumber()) {
      sb.append(v.bigIntegerValue());
    } else if (v.isNumber()) {
      sb.append(pyFloat(v.decimalValue().doubleValue()));
    } else if (v.isTextual()) {
      string(sb, v.textValue());
    } else if (v.isArray()) {
      sb.append('[');
      for (int i = 0; i < v.size(); i++) {
        sb.append(i > 0 ? ", " : "");
        pyDumps(sb, v.get(i));
      }
      sb.append(']');
    } else {
      sb.append('{');
      boolean more = false;
      for (Iterator<Map.Entry<String, JsonNode>> it = v.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> e = it.next();
        sb.append(more ? ", " : "");
        string(sb, e.getKey()).append(": ");
        pyDumps(sb, e.getValue());
        more = true;
      }
      sb.append('}');
    }
  }

  /** Python's {@code repr(float)} (best effort: the shortest digits Java finds). */
  static String pyFloat(double d) {
    if (Double.isNaN(d)) {
      return "NaN";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "Infinity" : "-Infinity";
    }
    if (d == 0) {
      return (1 / d < 0) ? "-0.0" : "0.0";
    }
    BigDecimal b = new BigDecimal(Double.toString(d)).stripTrailingZeros();
    int exp = b.precision() - b.scale() - 1; // decimal exponent of the first digit
    if (exp >= -4 && exp < 16) {
      String plain = b.toPlainString();
      return plain.contains(".") ? plain : plain + ".0";
    }
    String digits = b.unscaledValue().abs().toString();
    String mantissa = digits.length() > 1 ? digits.charAt(0) + "." + digits.substring(1) : digits;
    return (b.signum() < 0 ? "-" : "")
        + mantissa
        + "e"
        + (exp < 0 ? "-" : "+")
        + (Math.abs(exp) < 10 ? "0" : "")
        + Math.abs(exp);
  }
}
