package io.shardcar.client;

import java.util.Collections;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * The items this instance owns now (item number to parameter), whether it is the job's leader,
 * and the sharding epoch, which grows with every change of the job's sharding.
 */
public record Assignment(SortedMap<Integer, String> items, boolean leader, long epoch) {
  /** Before the first assignment arrives. */
  public static final Assignment NONE = new Assignment(new TreeMap<>(), false, -1);

  public Assignment {
    items = Collections.unmodifiableSortedMap(new TreeMap<>(items));
  }

  /** The item numbers, ascending. */
  public Set<Integer> itemNumbers() {
    return items.keySet();
  }
}
