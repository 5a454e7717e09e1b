package io.shardcar.client;

import java.time.Duration;
import java.util.Map;

/** A worker's validated settings, shared by its registrations. */
record Settings(
    String target,
    long pid,
    String instanceId,
    String instanceSuffix,
    Map<String, String> labels,
    int itemConcurrency,
    Duration connectTimeout,
    Duration backoffInitial,
    Duration backoffMax,
    Duration answerTimeout,
    Duration shutdownGracePeriod,
    boolean reconnectAfterShutdown,
    WorkerListener listener,
    ItemTracing tracing) {}
