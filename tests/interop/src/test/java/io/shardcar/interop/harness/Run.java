package io.shardcar.interop.harness;

/**
 * One item run, from a member's {@code start} record to its {@code end} record ({@code endRec}, null
 * while there is none). A run without an end whose member was killed ended, at the latest, when the
 * kill was confirmed; one whose member is alive is still going ({@link Long#MAX_VALUE}).
 */
public record Run(String member, String side, String job, int item, long start, long end, boolean finished, Rec startRec,
    Rec endRec) {
  public String source() {
    return startRec.get("source");
  }

  /** {@code completed}, {@code failed} (the member's fail switch), {@code cancelled} or {@code interrupted}; null before the end. */
  public String outcome() {
    return endRec == null ? null : endRec.get("outcome");
  }

  public boolean overlaps(Run o) {
    return start < o.end && o.start < end;
  }

  @Override
  public String toString() {
    return member + "[" + job + "#" + item + " " + start + ".." + (end == Long.MAX_VALUE ? "open" : end)
        + (finished ? "" : " (no end)") + " " + startRec.f() + "]";
  }
}
