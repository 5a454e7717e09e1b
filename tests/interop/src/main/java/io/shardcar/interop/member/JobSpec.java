package io.shardcar.interop.member;

import java.io.IOException;
import java.io.Reader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;

/**
 * One job as a test hands it to a member process: a properties file with ElasticJob's field names
 * ({@code jobName, shardingTotalCount, cron, shardingItemParameters, jobParameter, failover, misfire,
 * monitorExecution, jobShardingStrategyType, overwrite, description, disabled, jobErrorHandlerType}),
 * {@code prop.KEY} for each of the job's props, plus {@code namespace} (ElasticJob members),
 * {@code withConfig} (shardcar workers: {@code false} subscribes by name only) and {@code resident}
 * (shardcar workers: hold the items with a {@code ResidentHandler}). Absent optional fields are left
 * unset, so each side's own defaults apply.
 */
public final class JobSpec {
  private final Properties p;

  private JobSpec(Properties p) {
    this.p = p;
  }

  public static JobSpec load(Path file) {
    Properties p = new Properties();
    try (Reader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
      p.load(r);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return new JobSpec(p);
  }

  public String get(String key) {
    return p.getProperty(key);
  }

  public boolean has(String key) {
    return p.getProperty(key) != null;
  }

  public String jobName() {
    return p.getProperty("jobName");
  }

  public int total() {
    return Integer.parseInt(p.getProperty("shardingTotalCount", "1"));
  }

  public boolean flag(String key) {
    return Boolean.parseBoolean(p.getProperty(key, "false"));
  }

  /** Every key of the spec (e.g. to find the {@code prop.*} keys of a typed job). */
  public java.util.Set<String> keys() {
    return p.stringPropertyNames();
  }
}
