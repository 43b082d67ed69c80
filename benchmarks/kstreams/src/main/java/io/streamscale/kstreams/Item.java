package io.streamscale.kstreams;

/**
 * What a checking step forwards: a usable value, or a dead letter (the record's original value
 * bytes; its headers say why), split apart right after.
 */
final class Item<T> {
  final T ok;
  final byte[] raw;
  final boolean dead;

  private Item(T ok, byte[] raw, boolean dead) {
    this.ok = ok;
    this.raw = raw;
    this.dead = dead;
  }

  static <T> Item<T> ok(T value) {
    return new Item<>(value, null, false);
  }

  static <T> Item<T> dead(byte[] raw) {
    return new Item<>(null, raw, true);
  }
}
