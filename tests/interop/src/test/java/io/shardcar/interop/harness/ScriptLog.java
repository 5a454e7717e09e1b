package io.shardcar.interop.harness;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongUnaryOperator;
import java.util.stream.Stream;

/**
 * The script that SCRIPT jobs run in this suite, on both sides ({@code record.sh}, written into the
 * test's directory), and what it recorded. ElasticJob's script executor and the sidecar run it the
 * same way: {@code /bin/sh record.sh DIR [ARGS...] JSON}, the sharding context JSON last. Each run
 * appends to {@code DIR/item-{shardingItem}.log} one {@code start} line and, when it ran to its end,
 * one {@code end} line (one {@code write(2)} each, {@code O_APPEND}), with tab-separated fields:
 * event, time (epoch ms), the parent's pid ({@code $PPID}: the ElasticJob JVM or the sidecar, who
 * ran it), its own pid, {@code $SHARDCAR_EXECUTION_ID} and {@code $SHARDCAR_FENCING_TOKEN} (empty
 * under ElasticJob), and every argument it got, separated by {@code \037} (the JSON is the last).
 *
 * <p>While {@code DIR/slow-{parent pid}} exists a run does not end (it polls the file), so a test
 * can kill the parent in the middle of an item; a run whose parent is gone stops without its
 * {@code end} line.
 */
public final class ScriptLog {
  static final String SCRIPT = String.join("\n",
      "#!/bin/sh",
      "# record.sh DIR [ARGS...] JSON: see io.shardcar.interop.harness.ScriptLog",
      "dir=$1",
      "who=$PPID",
      "for json; do :; done",
      "item=$(printf '%s' \"$json\" | sed -n 's/.*\"shardingItem\":\\([0-9][0-9]*\\).*/\\1/p')",
      "args=$(printf '%s\\037' \"$@\")",
      "rec() {",
      "  line=\"$1\t$(date +%s%3N)\t$who\t$$\t${SHARDCAR_EXECUTION_ID:-}\t${SHARDCAR_FENCING_TOKEN:-}\t$args\"",
      "  printf '%s\\n' \"$line\" >> \"$dir/item-$item.log\"",
      "}",
      "rec start",
      "while [ -e \"$dir/slow-$who\" ]; do",
      "  kill -0 \"$who\" 2>/dev/null || exit 1",
      "  sleep 0.05",
      "done",
      "rec end",
      "");

  /** One run of the script: from its {@code start} line to its {@code end} line (if any). */
  public record ScriptRun(int item, long start, long end, boolean finished, long parent, long pid, String executionId,
      String fencingToken, List<String> args) {
    /** The sharding context JSON: the last argument. */
    public String json() {
      return args.get(args.size() - 1);
    }

    /** The arguments before the JSON, without the directory. */
    public List<String> argsBeforeJson() {
      return args.subList(1, args.size() - 1);
    }

    public boolean overlaps(ScriptRun o) {
      return start < o.end && o.start < end;
    }

    @Override
    public String toString() {
      return "item " + item + " by pid " + parent + " [" + start + ".." + (end == Long.MAX_VALUE ? "open" : end) + "]"
          + (executionId.isEmpty() ? "" : " execution " + executionId) + " " + json();
    }
  }

  private final Path dir;

  private ScriptLog(Path dir) {
    this.dir = dir;
  }

  /** Writes {@code record.sh} into {@code dir}. */
  public static ScriptLog in(Path dir) {
    try {
      Files.writeString(dir.resolve("record.sh"), SCRIPT, StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return new ScriptLog(dir);
  }

  /** The script's command line, for {@code script.command.line}: {@code /bin/sh DIR/record.sh DIR} and {@code extra}. */
  public String commandLine(String extra) {
    return "/bin/sh " + dir.resolve("record.sh") + " " + dir + (extra.isEmpty() ? "" : " " + extra);
  }

  /** While on, runs started by {@code parentPid} do not end. */
  public void slow(long parentPid, boolean on) {
    Path f = dir.resolve("slow-" + parentPid);
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
   * Every run so far, by start time. A run without an {@code end} line ends at
   * {@code endOfUnfinished.applyAsLong(parent pid)} (e.g. when its killed parent was confirmed dead;
   * {@link Long#MAX_VALUE}: still running).
   */
  public List<ScriptRun> runs(LongUnaryOperator endOfUnfinished) {
    List<ScriptRun> runs = new ArrayList<>();
    try (Stream<Path> files = Files.list(dir)) {
      for (Path f : files.filter(p -> p.getFileName().toString().matches("item-\\d+\\.log")).toList()) {
        int item = Integer.parseInt(f.getFileName().toString().replaceAll("\\D", ""));
        String text = Files.readString(f, StandardCharsets.UTF_8);
        int last = text.lastIndexOf('\n');
        if (last < 0) {
          continue;
        }
        Map<Long, String[]> ends = new HashMap<>();
        List<String[]> starts = new ArrayList<>();
        for (String line : text.substring(0, last).split("\n")) {
          String[] f6 = line.split("\t", 7);
          if (f6.length < 7) {
            continue;
          }
          if (f6[0].equals("start")) {
            starts.add(f6);
          } else if (f6[0].equals("end")) {
            ends.put(Long.parseLong(f6[3]), f6);
          }
        }
        for (String[] s : starts) {
          long pid = Long.parseLong(s[3]);
          long parent = Long.parseLong(s[2]);
          String[] e = ends.get(pid);
          long end = e != null ? Long.parseLong(e[1]) : endOfUnfinished.applyAsLong(parent);
          String argText = s[6].endsWith("\037") ? s[6].substring(0, s[6].length() - 1) : s[6];
          runs.add(new ScriptRun(item, Long.parseLong(s[1]), end, e != null, parent, pid, s[4], s[5],
              List.copyOf(Arrays.asList(argText.split("\037", -1)))));
        }
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    runs.sort(Comparator.comparingLong(ScriptRun::start));
    return runs;
  }

  /** No two runs of one item overlap in time, whoever ran them. */
  public static void assertNoOverlap(List<ScriptRun> runs, String state) {
    List<String> clashes = new ArrayList<>();
    for (int i = 0; i < runs.size(); i++) {
      for (int j = i + 1; j < runs.size(); j++) {
        if (runs.get(i).item() == runs.get(j).item() && runs.get(i).overlaps(runs.get(j))) {
          clashes.add(runs.get(i) + "\n    overlaps " + runs.get(j));
        }
      }
    }
    if (!clashes.isEmpty()) {
      throw new AssertionError("script runs overlap:\n  " + String.join("\n  ", clashes) + "\n" + state);
    }
  }
}
