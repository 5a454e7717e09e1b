package io.shardcar.interop.harness;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/** Kills every child process still alive when the test JVM exits (a last resort after try/finally). */
final class Reaper {
  private static final Set<Process> LIVE = ConcurrentHashMap.newKeySet();

  static {
    Runtime.getRuntime().addShutdownHook(new Thread(() -> LIVE.forEach(p -> {
      if (p.isAlive()) {
        p.destroyForcibly();
      }
    }), "interop-reaper"));
  }

  private Reaper() {}

  static void register(Process p) {
    LIVE.add(p);
    p.onExit().thenRun(() -> LIVE.remove(p));
  }
}
