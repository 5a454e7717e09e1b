package io.shardcar.client;

import java.util.concurrent.Future;

/**
 * One item of one execution handed to a handler. {@code generation} is the stream it came from;
 * the mutable fields belong to the registration's event thread.
 */
final class ItemRun {
  final int generation;
  final ShardingContext ctx;
  final String key;
  Future<?> future;
  boolean cancelled;

  ItemRun(int generation, ShardingContext ctx) {
    this.generation = generation;
    this.ctx = ctx;
    this.key = generation + "/" + ctx.getExecutionId() + "/" + ctx.getShardingItem();
  }
}
