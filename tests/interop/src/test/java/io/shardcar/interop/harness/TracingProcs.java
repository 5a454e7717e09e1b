package io.shardcar.interop.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.Stream;

/**
 * The processes of the tracing tests that {@link Cluster} does not start, each in a cluster's
 * namespace and test directory: sidecars writing into ElasticJob's tracing tables
 * ({@link TracingSidecar}), ElasticJob members configured with ElasticJob's RDB tracing
 * ({@code TracingElasticJobMember}) and shardcar workers ({@code ShardcarMember}) on those sidecars;
 * both kinds of member fail the items listed in their control file ({@link Cluster#fail}).
 * {@link #close()} kills them all, members first (use try-with-resources, closed before the
 * clusters and the database).
 */
public final class TracingProcs implements AutoCloseable {
  private final List<Proc> procs = new CopyOnWriteArrayList<>();
  private final Path socketDir;

  public TracingProcs() {
    try {
      // Unix socket paths must stay short (108 bytes): a temp dir, not target/.
      this.socketDir = Files.createTempDirectory("sct-");
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** A sidecar in {@code c}'s namespace advertising {@code ip}, writing into {@code tracingDb} (a {@code postgres://} URL). */
  public TracingSidecar sidecar(Cluster c, String ip, String tracingDb) {
    TracingSidecar s = TracingSidecar.start(c.zkConnect(), c.namespace(), ip, tracingDb, socketDir, c.dir());
    procs.add(s);
    return s;
  }

  /** An ElasticJob member JVM in {@code c}'s namespace tracing into {@code database} of {@code pg}, waited for until ready. */
  public Member elasticJob(Cluster c, String name, PostgresServer pg, String database, Job... jobs) {
    Member m = member(c, Member.Side.ELASTICJOB, "io.shardcar.interop.member.TracingElasticJobMember", name,
        List.of("--zk", c.zkConnect(), "--namespace", c.namespace(), "--session-ms", "4000",
            "--tracing-url", pg.jdbcUrl(database), "--tracing-user", PostgresServer.USER,
            "--tracing-password", PostgresServer.PASSWORD), jobs);
    return m;
  }

  /** A shardcar worker JVM on {@code sidecar}, waited for until registered. */
  public Member shardcar(Cluster c, String name, TracingSidecar sidecar, Job... jobs) {
    return member(c, Member.Side.SHARDCAR, "io.shardcar.interop.member.ShardcarMember", name,
        List.of("--target", sidecar.target()), jobs);
  }

  private Member member(Cluster c, Member.Side side, String mainClass, String name, List<String> extra, Job... jobs) {
    List<String> cmd = new ArrayList<>(List.of(Layout.java().toString(), "-Xmx192m", "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1", "-Xss512k", "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
        "-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        "-cp", Layout.memberClasspath(), mainClass, "--dir", c.dir().toString(), "--name", name,
        "--parent", Long.toString(ProcessHandle.current().pid())));
    cmd.addAll(extra);
    int n = 0;
    for (Job job : jobs) {
      Path file = c.dir().resolve(name + "-job" + (++n) + ".properties");
      try (Writer w = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
        job.toProperties().store(w, "job spec for " + name);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      cmd.add("--job");
      cmd.add(file.toString());
    }
    Member m = new Member(c, side, name, cmd, c.dir().resolve(name + ".log"));
    procs.add(m);
    Await.until(m + " ready in " + Stream.of(jobs).map(Job::name).toList(), Duration.ofSeconds(60), () -> {
      for (Rec r : m.recs()) {
        if (r.is("startFailed")) {
          throw new AssertionError(m + " failed to start " + r.job() + ": " + r.get("error") + "\n" + m.logTail(3000));
        }
      }
      if (!m.isAlive()) {
        throw new AssertionError(m + " exited before it was ready:\n" + m.logTail(4000));
      }
      return Stream.of(jobs).allMatch(j -> m.readyInstance(j.name()).isPresent());
    }, () -> m.logTail(4000));
    return m;
  }

  /** Stops one process now (SIGKILL), e.g. a sidecar that was only needed for a while. */
  public void stop(Proc p) {
    p.close();
  }

  @Override
  public void close() {
    for (Proc p : procs) {
      if (p instanceof Member) {
        p.close();
      }
    }
    for (Proc p : procs) {
      p.close();
    }
    TempDirs.deleteTree(socketDir);
  }
}
