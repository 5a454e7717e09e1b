package io.shardcar.interop.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.api.JobAPIFactory;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.api.JobConfigurationAPI;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.api.JobOperateAPI;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.api.JobStatisticsAPI;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.api.ServerStatisticsAPI;
import org.apache.shardingsphere.elasticjob.lite.lifecycle.api.ShardingStatisticsAPI;

/**
 * One test's mixed cluster on the suite's ZooKeeper: a namespace of its own, sidecars, ElasticJob
 * member JVMs and shardcar worker JVMs, their records, and ElasticJob's lifecycle API on the same
 * namespace. {@link #close()} kills every process it started (use try-with-resources) and leaves
 * the logs, the records and a dump of the namespace in {@code target/interop-logs/{test}/}.
 */
public final class Cluster implements AutoCloseable {
  private final String test;
  private final String namespace;
  private final Path dir;
  private final Path socketDir;
  private final ZooKeeperServer zooKeeper;
  private final Zk zk;
  private final List<Proc> procs = new CopyOnWriteArrayList<>();
  private final Map<String, Member> members = new LinkedHashMap<>();
  private final Map<String, Integer> specCount = new HashMap<>();

  private Cluster(String test) {
    this.test = test;
    this.zooKeeper = ZooKeeperServer.get();
    this.namespace = "interop-" + test.replaceAll("[^A-Za-z0-9]", "") + "-" + Long.toHexString(System.nanoTime() & 0xffffff);
    try {
      this.dir = Files.createDirectories(Layout.logRoot().resolve(test.replaceAll("[^A-Za-z0-9._-]", "_") + "-" + System.currentTimeMillis()));
      // Unix socket paths must stay short (108 bytes): a temp dir, not target/.
      this.socketDir = Files.createTempDirectory("sci-");
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    this.zk = new Zk(zooKeeper.connectString(), namespace);
  }

  public static Cluster start(String test) {
    return new Cluster(test);
  }

  public String namespace() {
    return namespace;
  }

  public String zkConnect() {
    return zooKeeper.connectString();
  }

  public Path dir() {
    return dir;
  }

  public Zk zk() {
    return zk;
  }

  // ---- processes ----------------------------------------------------------------------------

  /** A sidecar advertising {@code ip} (127.0.0.2, 127.0.0.3, ...), ready to serve. */
  public Sidecar sidecar(String ip) {
    Sidecar s = Sidecar.start(zooKeeper.connectString(), namespace, ip, socketDir, dir);
    procs.add(s);
    return s;
  }

  /** An ElasticJob member JVM running {@code jobs}, waited for until every job started. */
  public Member elasticJob(String name, Job... jobs) {
    Member m = elasticJobStarting(name, jobs);
    awaitReady(m, jobs);
    return m;
  }

  /** An ElasticJob member JVM running {@code jobs}, not waited for. */
  public Member elasticJobStarting(String name, Job... jobs) {
    List<String> args = new ArrayList<>(List.of("--zk", zooKeeper.connectString(), "--namespace", namespace,
        "--session-ms", "4000"));
    return startMember(Member.Side.ELASTICJOB, "io.shardcar.interop.member.ElasticJobMember", name, args, jobs);
  }

  /**
   * An ElasticJob member JVM running typed jobs ({@code SCRIPT}, {@code HTTP}: {@link Job#type},
   * {@link Job#prop}) with ElasticJob's own executors, waited for until every job started. Its
   * locale is {@code C.UTF-8}, so that the JVM passes arguments to scripts in UTF-8 as the sidecar does.
   */
  public Member typedElasticJob(String name, Job... jobs) {
    Member m = typedElasticJobStarting(name, jobs);
    awaitReady(m, jobs);
    return m;
  }

  /** {@link #typedElasticJob}, not waited for. */
  public Member typedElasticJobStarting(String name, Job... jobs) {
    List<String> args = new ArrayList<>(List.of("--zk", zooKeeper.connectString(), "--namespace", namespace,
        "--session-ms", "4000", "--parent", Long.toString(ProcessHandle.current().pid())));
    return startTypedMember(name, List.of(), args, jobs);
  }

  /**
   * {@link #typedElasticJob} in a PID namespace of its own ({@code unshare}, root only) where the JVM
   * gets process id {@code pid}, so that its ElasticJob instance id is {@code {ip}@-@{pid}}: for
   * test vectors with stable ids. It has no parent watch (the test JVM is not visible from inside);
   * killing it kills the namespace ({@code --kill-child}).
   */
  public Member typedElasticJobWithPid(String name, int pid, Job... jobs) {
    List<String> prefix = List.of("unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c",
        "echo " + (pid - 1) + " > /proc/sys/kernel/ns_last_pid && \"$@\"", "sh");
    List<String> args = new ArrayList<>(List.of("--zk", zooKeeper.connectString(), "--namespace", namespace,
        "--session-ms", "4000"));
    Member m = startTypedMember(name, prefix, args, jobs);
    awaitReady(m, jobs);
    return m;
  }

  /** ElasticJob's sharding service logs each sharding it begins and ends, and each wait of a member for one, at debug. */
  private static final String SHARDING_DEBUG =
      "-Dorg.slf4j.simpleLogger.log.org.apache.shardingsphere.elasticjob.lite.internal.sharding=debug";

  private Member startTypedMember(String name, List<String> prefix, List<String> extra, Job... jobs) {
    if (members.containsKey(name)) {
      throw new IllegalArgumentException("member name " + name + " already used in this test (records are per name)");
    }
    List<String> cmd = new ArrayList<>(prefix);
    cmd.addAll(List.of(Layout.java().toString(), "-Xmx192m", "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1", "-Xss512k", "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
        "-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        SHARDING_DEBUG, "-cp", Layout.memberClasspath(), "io.shardcar.interop.member.TypedElasticJobMember", "--dir", dir.toString(),
        "--name", name));
    cmd.addAll(extra);
    for (Job job : jobs) {
      cmd.add("--job");
      cmd.add(writeSpec(name, job).toString());
    }
    Member m = new Member(this, Member.Side.ELASTICJOB, name, cmd, dir.resolve(name + ".log"),
        Map.of("LC_ALL", "C.UTF-8", "LANG", "C.UTF-8"));
    procs.add(m);
    members.put(name, m);
    return m;
  }

  /** A shardcar worker JVM on {@code sidecar} subscribed to {@code jobs}, waited for until registered. */
  public Member shardcar(String name, Sidecar sidecar, Job... jobs) {
    Member m = startMember(Member.Side.SHARDCAR, "io.shardcar.interop.member.ShardcarMember", name,
        new ArrayList<>(List.of("--target", sidecar.target())), jobs);
    awaitReady(m, jobs);
    return m;
  }

  private Member startMember(Member.Side side, String mainClass, String name, List<String> extra, Job... jobs) {
    if (members.containsKey(name)) {
      throw new IllegalArgumentException("member name " + name + " already used in this test (records are per name)");
    }
    List<String> cmd = new ArrayList<>(List.of(Layout.java().toString(), "-Xmx192m", "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1", "-Xss512k", "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
        "-Dorg.slf4j.simpleLogger.showDateTime=true", "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        SHARDING_DEBUG, "-cp", Layout.memberClasspath(), mainClass, "--dir", dir.toString(), "--name", name,
        "--parent", Long.toString(ProcessHandle.current().pid())));
    cmd.addAll(extra);
    for (Job job : jobs) {
      cmd.add("--job");
      cmd.add(writeSpec(name, job).toString());
    }
    Member m = new Member(this, side, name, cmd, dir.resolve(name + ".log"));
    procs.add(m);
    members.put(name, m);
    return m;
  }

  private Path writeSpec(String member, Job job) {
    int n = specCount.merge(member, 1, Integer::sum);
    Path file = dir.resolve(member + "-job" + n + ".properties");
    try (Writer w = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
      job.toProperties().store(w, "job spec for " + member);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return file;
  }

  private void awaitReady(Member m, Job... jobs) {
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
  }

  /** Creates (or removes) the member's control file that makes its next item runs last until removed. */
  public void slow(Member m, boolean on) {
    Path f = dir.resolve(m.member() + ".slow");
    try {
      if (on) {
        Files.writeString(f, "slow");
      } else {
        Files.deleteIfExists(f);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /**
   * Makes {@code m}'s runs of {@code items} fail from now on, every time (none: no item fails). The
   * member's job throws once the item's body is over, on either side (the member's
   * {@code {member}.fail} file).
   */
  public void fail(Member m, Integer... items) {
    control(m, ".fail", items);
  }

  /**
   * Makes the next run of each of {@code items} by {@code m} fail, and only that run: the member takes
   * the item out of its {@code {member}.fail-once} file as it fails it.
   */
  public void failOnce(Member m, Integer... items) {
    control(m, ".fail-once", items);
  }

  private void control(Member m, String suffix, Integer... items) {
    Path f = dir.resolve(m.member() + suffix);
    try {
      if (items.length == 0) {
        Files.deleteIfExists(f);
      } else {
        // Written whole and moved into place: the member never reads half a file.
        Path tmp = dir.resolve(m.member() + suffix + ".tmp");
        Files.writeString(tmp, Stream.of(items).map(String::valueOf).collect(Collectors.joining(",")), StandardCharsets.UTF_8);
        Files.move(tmp, f, java.nio.file.StandardCopyOption.ATOMIC_MOVE, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  // ---- facts ---------------------------------------------------------------------------------

  /** The records of one member. */
  public List<Rec> recs(String member) {
    Path f = dir.resolve(member + ".rec");
    if (!Files.exists(f)) {
      return List.of();
    }
    try {
      String s = Files.readString(f, StandardCharsets.UTF_8);
      int end = s.lastIndexOf('\n');
      if (end < 0) {
        return List.of();
      }
      List<Rec> out = new ArrayList<>();
      for (String line : s.substring(0, end).split("\n")) {
        if (!line.isBlank()) {
          out.add(Rec.parse(member, line));
        }
      }
      return out;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The records of every member, in time order. */
  public List<Rec> recs() {
    return members.keySet().stream().flatMap(m -> recs(m).stream())
        .sorted(Comparator.comparingLong(Rec::t)).collect(Collectors.toList());
  }

  /** Every item run of {@code job} so far, by start time. */
  public List<Run> runs(String job) {
    List<Run> runs = new ArrayList<>();
    for (Map.Entry<String, Member> e : members.entrySet()) {
      Map<String, Rec> ends = new HashMap<>();
      List<Rec> recs = recs(e.getKey());
      recs.stream().filter(r -> r.is("end") && job.equals(r.job())).forEach(r -> ends.put(r.get("run"), r));
      for (Rec r : recs) {
        if (r.is("start") && job.equals(r.job())) {
          Rec end = ends.get(r.get("run"));
          long until = end != null ? end.t() : e.getValue().killedAt() > 0 ? e.getValue().killedAt() : Long.MAX_VALUE;
          runs.add(new Run(e.getKey(), r.get("side"), job, r.item(), r.t(), until, end != null, r, end));
        }
      }
    }
    runs.sort(Comparator.comparingLong(Run::start));
    return runs;
  }

  /** Runs of {@code job} by {@code member} that started at or after {@code since}. */
  public List<Run> runsOf(String job, Member member, long since) {
    return runs(job).stream().filter(r -> r.member().equals(member.member()) && r.start() >= since).toList();
  }

  /**
   * Nothing of {@code job} runs or is about to: every run recorded has ended, no item has a
   * {@code sharding/{i}/running} node and no {@code trigger/{instance}} node is left. An ElasticJob
   * member clears its running flag before it removes its running nodes, and drops a trigger that
   * finds the flag set; a sidecar removes them when the worker's answer is written. So a trigger
   * sent once this holds is run by every member, not dropped or turned into a misfire.
   */
  public boolean idle(String job) {
    if (!runs(job).stream().allMatch(Run::finished) || !zk.children("/" + job + "/trigger").isEmpty()) {
      return false;
    }
    return zk.children("/" + job + "/sharding").stream().noneMatch(i -> zk.exists("/" + job + "/sharding/" + i + "/running"));
  }

  /**
   * No two runs of one item of {@code job} overlap in time, whoever ran them, but for an overlap
   * with a run ElasticJob's leader made on a stale cache ({@link #staleLeaderRun}), which is shown
   * and set aside.
   */
  public void assertNoOverlap(String job) {
    List<Run> runs = runs(job);
    List<String> clashes = new ArrayList<>();
    List<String> elasticJobs = new ArrayList<>();
    for (int i = 0; i < runs.size(); i++) {
      for (int j = i + 1; j < runs.size(); j++) {
        Run a = runs.get(i);
        Run b = runs.get(j);
        if (a.item() == b.item() && a.overlaps(b)) {
          String clash = a + "\n    overlaps " + b;
          if (staleLeaderRun(a) || staleLeaderRun(b)) {
            elasticJobs.add(clash);
          } else {
            clashes.add(clash);
          }
        }
      }
    }
    if (!elasticJobs.isEmpty()) {
      // Not a fault of shardcar's: ElasticJob's own hazard (docs/elasticjob-compat.md §6). Shown
      // in the test's output, so that how often it happens stays visible.
      System.err.println("overlaps of " + job + " set aside: an ElasticJob leader ran an item it had just given"
          + " away, reading its cache before it caught up with its own reshard (ElasticJob #2195):\n  "
          + String.join("\n  ", elasticJobs));
    }
    if (!clashes.isEmpty()) {
      throw new AssertionError("item runs of " + job + " overlap:\n  " + String.join("\n  ", clashes) + "\n" + state(job));
    }
  }

  /**
   * Whether {@code r} is an ElasticJob leader's run of an item that ZooKeeper gave to another
   * instance when it started (and not its failover), as an ElasticJob leader does when its cache
   * lags the reshard it has just written (ElasticJob #2195, docs/elasticjob-compat.md §6). An
   * overlap with such a run is ElasticJob's: no peer can keep it from running the item, and its
   * {@code running} write replaces the peer's node whenever the peer started first.
   */
  static boolean staleLeaderRun(Run r) {
    String self = r.startRec().get("instance");
    String owner = r.startRec().get("owner");
    return "elasticjob".equals(r.side()) && self != null && owner != null && !owner.isEmpty() && !owner.equals(self)
        && !self.equals(r.startRec().get("failovering")) && self.equals(r.startRec().get("leader"));
  }

  /** The job's nodes and the latest records, for failure messages. */
  public String state(String job) {
    List<Rec> recs = recs();
    List<Rec> tail = recs.subList(Math.max(0, recs.size() - 60), recs.size());
    return "--- ZooKeeper /" + namespace + "/" + job + " ---\n" + zk.tree("/" + job) + "--- latest records ---\n" + Rec.lines(tail);
  }

  /** {@link Await#until} with the job's state in the failure message. */
  public void await(String job, String what, Duration timeout, BooleanSupplier condition) {
    Await.until(what, timeout, condition, () -> state(job));
  }

  // ---- ElasticJob's lifecycle API on this namespace ------------------------------------------

  public JobOperateAPI operateApi() {
    return JobAPIFactory.createJobOperateAPI(zooKeeper.connectString(), namespace, null);
  }

  public JobConfigurationAPI configApi() {
    return JobAPIFactory.createJobConfigurationAPI(zooKeeper.connectString(), namespace, null);
  }

  public JobStatisticsAPI jobStatsApi() {
    return JobAPIFactory.createJobStatisticsAPI(zooKeeper.connectString(), namespace, null);
  }

  public ShardingStatisticsAPI shardingStatsApi() {
    return JobAPIFactory.createShardingStatisticsAPI(zooKeeper.connectString(), namespace, null);
  }

  public ServerStatisticsAPI serverStatsApi() {
    return JobAPIFactory.createServerStatisticsAPI(zooKeeper.connectString(), namespace, null);
  }

  // ---- teardown -------------------------------------------------------------------------------

  @Override
  public void close() {
    try {
      Files.writeString(dir.resolve("zookeeper-namespace.txt"), zk.tree("/"), StandardCharsets.UTF_8);
    } catch (RuntimeException | IOException e) {
      // best effort: the dump is for reading after a failure
    }
    // Members first (their sidecars must not see them as crashed workers longer than needed).
    for (Proc p : procs) {
      if (p instanceof Member) {
        p.close();
      }
    }
    for (Proc p : procs) {
      p.close();
    }
    zk.close();
    TempDirs.deleteTree(socketDir);
  }

  @Override
  public String toString() {
    return test + " in namespace " + namespace;
  }
}
