package io.shardcar.client;

/**
 * The thread side of one started item: which thread runs its handler, so that a {@code Cancel}
 * interrupts exactly that thread, and only while the handler runs, and its span (if traced)
 * records the cancellation. An item cancelled before a pool thread picked it up never calls its
 * handler.
 */
final class ItemRun {
  final RegistrationState.ItemKey key;
  final ShardingContext ctx;
  private Thread thread;
  private boolean cancelled;
  private boolean finished;
  private ItemTracing.ItemSpan span = ItemTracing.ItemSpan.NONE;

  ItemRun(RegistrationState.ItemKey key, ShardingContext ctx) {
    this.key = key;
    this.ctx = ctx;
  }

  /** On the item thread, before the handler: false when it was cancelled meanwhile (skip it). */
  synchronized boolean begin() {
    if (cancelled) {
      return false;
    }
    thread = Thread.currentThread();
    return true;
  }

  /** On the item thread, once {@link #begin()} said go: the handler's span, told of a cancel from now on. */
  synchronized ItemTracing.ItemSpan traced(ItemTracing.ItemSpan span) {
    this.span = span;
    return span;
  }

  /** A cancel decided for this item: its span notes it (once) while the handler runs. */
  synchronized void noteCancelled(String reason) {
    if (thread != null && !finished) {
      span.cancelled(reason);
    }
  }

  /** On the item thread, after the handler: no interrupt reaches it from now on. */
  synchronized void end() {
    thread = null;
    finished = true;
    Thread.interrupted(); // a cancel that raced with the return must not leak to the next item
  }

  /**
   * Interrupts the handler's thread if it is running (its span notes {@code reason}); a handler
   * not started yet will not start.
   */
  synchronized void cancel(String reason) {
    cancelled = true;
    if (thread != null && !finished) {
      span.cancelled(reason);
      thread.interrupt();
    }
  }
}
