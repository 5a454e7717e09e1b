package io.shardcar.interop.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A real PostgreSQL for the suite, as the Rust harness starts one ({@code tests/common/postgres.rs}):
 * Debian's {@code postgresql} package ({@code scripts/install-deps.sh}), {@code initdb} into a
 * temporary directory, {@code postgres} on a free loopback port with its Unix socket in that
 * directory. PostgreSQL refuses to run as root, so when the tests do, both run as {@code nobody}
 * ({@code setpriv}; the directory is handed to that user). {@link #close()} stops the server (fast
 * shutdown, then SIGKILL) and removes the directory; the server is also killed if the test JVM exits.
 *
 * <p>The cluster has a superuser {@code postgres} and, made by {@link #start}, a role {@link #USER}
 * (password {@link #PASSWORD}) owning the database {@link #DATABASE}; {@link #createDatabase} makes
 * more. Override: {@code SHARDCAR_TEST_PG_BIN}, the directory of {@code initdb} and {@code postgres}
 * (default: the newest {@code /usr/lib/postgresql/*}{@code /bin}).
 */
public final class PostgresServer implements AutoCloseable {
  public static final String USER = "shardcar";
  public static final String PASSWORD = "sidecar-test-pw";
  public static final String DATABASE = "elasticjob";
  private static final String SUPERUSER_PASSWORD = "pg-test-superuser";

  private final Path dir;
  private final int port;
  private final Proc proc;

  private PostgresServer(Path dir, int port, Proc proc) {
    this.dir = dir;
    this.port = port;
    this.proc = proc;
  }

  /** Creates a cluster, starts it, and creates {@link #USER} and {@link #DATABASE}; the server's log goes to {@code logDir}. */
  public static PostgresServer start(Path logDir) {
    Path bin = binDir();
    int[] runAs = unprivileged();
    Path dir;
    try {
      dir = Files.createTempDirectory("shardcar-interop-pg-");
      Files.createDirectory(dir.resolve("sockets"));
      Files.writeString(dir.resolve("pwfile"), SUPERUSER_PASSWORD + "\n", StandardCharsets.UTF_8);
      if (runAs != null) {
        for (Path p : List.of(dir, dir.resolve("sockets"), dir.resolve("pwfile"))) {
          Files.setAttribute(p, "unix:uid", runAs[0]);
          Files.setAttribute(p, "unix:gid", runAs[1]);
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException("cannot prepare a directory for PostgreSQL", e);
    }
    Path initLog = logDir.resolve("postgres-initdb-" + System.nanoTime() % 100000 + ".log");
    try {
      run(command(bin, "initdb", runAs, "-D", dir.resolve("data").toString(), "-U", "postgres", "-E", "UTF8", "--locale=C",
          "--no-sync", "--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile=" + dir.resolve("pwfile")), dir, initLog);
    } catch (RuntimeException | Error e) {
      TempDirs.deleteTree(dir);
      throw e;
    }
    int port = ZooKeeperServer.freePort();
    List<String> cmd = command(bin, "postgres", runAs, "-D", dir.resolve("data").toString(), "-p", Integer.toString(port),
        "-k", dir.resolve("sockets").toString(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
        "-c", "synchronous_commit=off", "-c", "full_page_writes=off", "-c", "shared_buffers=16MB",
        "-c", "max_connections=60");
    Proc proc;
    try {
      proc = new Proc("postgres", cmd, logDir.resolve("postgres-" + port + ".log"), Map.of("LC_ALL", "C"));
    } catch (RuntimeException e) {
      TempDirs.deleteTree(dir);
      throw e;
    }
    PostgresServer pg = new PostgresServer(dir, port, proc);
    try {
      Await.until("PostgreSQL serving on 127.0.0.1:" + port, Duration.ofSeconds(60), () -> {
        if (!proc.isAlive()) {
          throw new IllegalStateException("postgres exited:\n" + proc.logTail(4000));
        }
        try (Connection c = DriverManager.getConnection(pg.jdbcUrl("postgres"), "postgres", SUPERUSER_PASSWORD)) {
          return c.isValid(2);
        } catch (SQLException e) {
          return false;
        }
      }, () -> proc.logTail(4000));
      pg.superuser("CREATE ROLE " + USER + " LOGIN PASSWORD '" + PASSWORD + "'");
      pg.createDatabase(DATABASE);
    } catch (RuntimeException | Error e) {
      pg.close();
      throw e;
    }
    return pg;
  }

  /** A new database owned by {@link #USER}. */
  public void createDatabase(String name) {
    superuser("CREATE DATABASE " + name + " OWNER " + USER);
  }

  private void superuser(String sql) {
    try (Connection c = DriverManager.getConnection(jdbcUrl("postgres"), "postgres", SUPERUSER_PASSWORD);
         Statement s = c.createStatement()) {
      s.execute(sql);
    } catch (SQLException e) {
      throw new IllegalStateException(sql, e);
    }
  }

  public int port() {
    return port;
  }

  /** {@code jdbc:postgresql://127.0.0.1:{port}/{database}}. */
  public String jdbcUrl(String database) {
    return "jdbc:postgresql://127.0.0.1:" + port + "/" + database;
  }

  /** {@code postgres://shardcar:...@127.0.0.1:{port}/{database}}: a sidecar's {@code --tracing-db}. */
  public String url(String database) {
    return "postgres://" + USER + ":" + PASSWORD + "@127.0.0.1:" + port + "/" + database;
  }

  /** A connection as {@link #USER} to {@code database}. */
  public Connection connect(String database) {
    try {
      return DriverManager.getConnection(jdbcUrl(database), USER, PASSWORD);
    } catch (SQLException e) {
      throw new IllegalStateException("cannot log in to " + jdbcUrl(database), e);
    }
  }

  public String logTail(int chars) {
    return proc.logTail(chars);
  }

  @Override
  public void close() {
    if (proc.isAlive()) {
      // Fast shutdown: sessions are ended, no shared memory is left behind.
      try {
        new ProcessBuilder("kill", "-INT", Long.toString(proc.pid())).start().waitFor(10, TimeUnit.SECONDS);
      } catch (IOException e) {
        // SIGKILL below
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      if (proc.waitFor(Duration.ofSeconds(10)) < 0) {
        proc.close();
      }
    }
    TempDirs.deleteTree(dir);
  }

  /** The directory of {@code initdb} and {@code postgres}. */
  private static Path binDir() {
    String override = System.getenv("SHARDCAR_TEST_PG_BIN");
    if (override != null && !override.isEmpty()) {
      return Path.of(override);
    }
    List<Integer> versions = new ArrayList<>();
    try (Stream<Path> dirs = Files.list(Path.of("/usr/lib/postgresql"))) {
      dirs.forEach(d -> {
        try {
          if (Files.isExecutable(d.resolve("bin/postgres"))) {
            versions.add(Integer.valueOf(d.getFileName().toString()));
          }
        } catch (NumberFormatException e) {
          // not a version directory
        }
      });
    } catch (IOException e) {
      // none
    }
    if (versions.isEmpty()) {
      throw new IllegalStateException("no PostgreSQL under /usr/lib/postgresql/*/bin: install Debian's postgresql "
          + "(scripts/install-deps.sh) or set SHARDCAR_TEST_PG_BIN");
    }
    return Path.of("/usr/lib/postgresql", Integer.toString(versions.stream().max(Comparator.naturalOrder()).get()), "bin");
  }

  /** {@code nobody}'s uid and gid when the tests run as root, else null. */
  private static int[] unprivileged() {
    if (!"0".equals(output("id", "-u"))) {
      return null;
    }
    return new int[] {Integer.parseInt(output("id", "-u", "nobody")), Integer.parseInt(output("id", "-g", "nobody"))};
  }

  private static List<String> command(Path bin, String program, int[] runAs, String... args) {
    List<String> cmd = new ArrayList<>();
    if (runAs != null) {
      cmd.addAll(List.of("setpriv", "--reuid=" + runAs[0], "--regid=" + runAs[1], "--clear-groups"));
    }
    cmd.add(bin.resolve(program).toString());
    cmd.addAll(List.of(args));
    return cmd;
  }

  private static void run(List<String> cmd, Path dir, Path log) {
    try {
      Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).redirectOutput(log.toFile()).start();
      p.getOutputStream().close();
      if (!p.waitFor(120, TimeUnit.SECONDS)) {
        p.destroyForcibly();
        throw new IllegalStateException(cmd + " did not finish in 120 s");
      }
      if (p.exitValue() != 0) {
        throw new IllegalStateException(cmd + " exited " + p.exitValue() + ":\n" + Files.readString(log, StandardCharsets.UTF_8));
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  private static String output(String... cmd) {
    try {
      Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
      p.waitFor(10, TimeUnit.SECONDS);
      return out;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }
}
