package io.shardcar.client;

import java.time.Duration;
import java.util.Map;

/**
 * A worker's validated settings, shared by its registrations. {@code itemConcurrency} is the
 * executor size (handlers of one job at once, whatever execution they belong to);
 * {@code maxConcurrentExecutions} the executions of one job at once, as every subscription tells the
 * sidecar (1 to 1024, at most {@code itemConcurrency}).
 */
record Settings(
    String target,
    long pid,
    String instanceId,
    String instanceSuffix,
    Map<String, String> labels,
    int itemConcurrency,
    int maxConcurrentExecutions,
    Duration connectTimeout,
    Duration backoffInitial,
    Duration backoffMax,
    Duration answerTimeout,
    Duration drainTimeout,
    boolean stopOnDrain,
    WorkerListener listener,
    ItemTracing tracing) {}
