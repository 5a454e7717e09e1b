package io.shardcar.interop.harness;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;

/**
 * A job as a member is told to run it (ElasticJob's field names; see
 * {@code io.shardcar.interop.member.JobSpec}). Unset fields stay unset.
 */
public final class Job {
  /** A Quartz cron that never fires during a test (1 January 2099): runs come from triggers only. */
  public static final String NEVER = "0 0 0 1 1 ? 2099";

  private final Map<String, String> fields = new LinkedHashMap<>();

  private Job(String name) {
    fields.put("jobName", name);
  }

  public static Job named(String name) {
    return new Job(name);
  }

  public String name() {
    return fields.get("jobName");
  }

  /** The item count set, 0 when unset. */
  public int total() {
    return Integer.parseInt(fields.getOrDefault("shardingTotalCount", "0"));
  }

  public Job total(int n) {
    return set("shardingTotalCount", n);
  }

  public Job cron(String cron) {
    return set("cron", cron);
  }

  public Job params(String params) {
    return set("shardingItemParameters", params);
  }

  public Job jobParameter(String p) {
    return set("jobParameter", p);
  }

  public Job failover(boolean b) {
    return set("failover", b);
  }

  public Job strategy(String type) {
    return set("jobShardingStrategyType", type);
  }

  public Job overwrite(boolean b) {
    return set("overwrite", b);
  }

  public Job description(String d) {
    return set("description", d);
  }

  /**
   * A typed job for {@code TypedElasticJobMember}: ElasticJob's job type ({@code SCRIPT}, {@code HTTP}),
   * which ElasticJob writes into the job root instead of a class name.
   */
  public Job type(String elasticJobType) {
    return set("elasticJobType", elasticJobType);
  }

  /** One of the job's props ({@code script.command.line}, {@code http.uri}, {@code dingtalk.webhook}, ...). */
  public Job prop(String key, String value) {
    return set("prop." + key, value);
  }

  /** ElasticJob's {@code jobErrorHandlerType} ({@code LOG}, {@code DINGTALK}, ...); its settings are {@link #prop}s. */
  public Job errorHandler(String type) {
    return set("jobErrorHandlerType", type);
  }

  /** shardcar workers: subscribe with this configuration ({@code false}: by job name only). */
  public Job withConfig(boolean b) {
    return set("withConfig", b);
  }

  /**
   * shardcar workers: a resident job, whose items they hold with a {@code ResidentHandler}
   * ({@code registerResident}); with {@link #withConfig} the config is built resident (no cron,
   * failover off).
   */
  public Job resident(boolean b) {
    return set("resident", b);
  }

  public Job set(String key, Object value) {
    fields.put(key, String.valueOf(value));
    return this;
  }

  public Job copy() {
    Job j = new Job(name());
    j.fields.putAll(fields);
    return j;
  }

  Properties toProperties() {
    Properties p = new Properties();
    p.putAll(fields);
    return p;
  }
}
