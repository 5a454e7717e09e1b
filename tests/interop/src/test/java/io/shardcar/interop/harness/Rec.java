package io.shardcar.interop.harness;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;

/** One line a member wrote (see {@code io.shardcar.interop.member.Records}). */
public record Rec(String member, Map<String, String> f) {
  static Rec parse(String member, String line) {
    Map<String, String> m = new LinkedHashMap<>();
    for (String part : line.split("\t")) {
      int eq = part.indexOf('=');
      if (eq > 0) {
        m.put(part.substring(0, eq), part.substring(eq + 1));
      }
    }
    return new Rec(member, m);
  }

  public String ev() {
    return f.get("ev");
  }

  public long t() {
    return Long.parseLong(f.get("t"));
  }

  public String get(String key) {
    return f.get(key);
  }

  public String job() {
    return f.get("job");
  }

  public int item() {
    return Integer.parseInt(f.get("item"));
  }

  public boolean is(String ev) {
    return ev.equals(ev());
  }

  /** {@code items=0,2,3} of an assignment as a set. */
  public Set<Integer> items() {
    String s = f.getOrDefault("items", "");
    return s.isEmpty() ? new TreeSet<>() : Arrays.stream(s.split(",")).map(Integer::valueOf).collect(Collectors.toCollection(TreeSet::new));
  }

  @Override
  public String toString() {
    return member + " " + f;
  }

  static String lines(List<Rec> recs) {
    return recs.stream().map(Rec::toString).collect(Collectors.joining("\n  ", "  ", ""));
  }
}
