package io.shardcar.interop.member;

import java.io.FileOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The facts a member process writes for the test to read: one line per event, appended to
 * {@code {dir}/{member}.rec}, {@code key=value} pairs separated by tabs, the first one
 * {@code ev=...}, every one with {@code t=} (epoch milliseconds on the host's clock, which every
 * process of the suite shares). Each line is one {@code write(2)} on a file opened with
 * {@code O_APPEND}, so a reader sees whole lines (a last line without its newline is incomplete
 * and skipped by the reader).
 *
 * <p>Events: {@code ready} (a member's instance of a job is up), {@code registered} (a shardcar
 * worker's instance and the effective configuration), {@code assignment} (its items changed),
 * {@code start} / {@code end} (one item run), {@code shutdown} (remote shutdown or drain seen),
 * {@code startFailed}, {@code exit}.
 */
public final class Records {
  private final FileOutputStream out;

  public Records(Path dir, String member) {
    try {
      out = new FileOutputStream(dir.resolve(member + ".rec").toFile(), true);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** A map builder: {@code kv("job", "a", "item", 1)}. */
  public static Map<String, String> kv(Object... pairs) {
    Map<String, String> m = new LinkedHashMap<>();
    for (int i = 0; i + 1 < pairs.length; i += 2) {
      m.put(String.valueOf(pairs[i]), pairs[i + 1] == null ? "" : String.valueOf(pairs[i + 1]));
    }
    return m;
  }

  public synchronized void emit(String ev, Map<String, String> fields) {
    StringBuilder line = new StringBuilder("ev=").append(ev).append("\tt=").append(System.currentTimeMillis());
    for (Map.Entry<String, String> e : fields.entrySet()) {
      line.append('\t').append(e.getKey()).append('=').append(clean(e.getValue()));
    }
    line.append('\n');
    try {
      out.write(line.toString().getBytes(StandardCharsets.UTF_8));
      out.flush();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static String clean(String s) {
    return s.replace('\t', ' ').replace('\n', ' ').replace('\r', ' ');
  }
}
