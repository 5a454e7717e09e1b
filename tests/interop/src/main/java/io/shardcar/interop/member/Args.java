package io.shardcar.interop.member;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** {@code --key value} arguments; {@code --job} may repeat. */
final class Args {
  private final Map<String, String> single = new HashMap<>();
  private final List<Path> jobs = new ArrayList<>();

  Args(String[] args) {
    for (int i = 0; i + 1 < args.length; i += 2) {
      if (!args[i].startsWith("--")) {
        throw new IllegalArgumentException("expected --key value, got " + args[i]);
      }
      String key = args[i].substring(2);
      if (key.equals("job")) {
        jobs.add(Path.of(args[i + 1]));
      } else {
        single.put(key, args[i + 1]);
      }
    }
  }

  String get(String key) {
    String v = single.get(key);
    if (v == null) {
      throw new IllegalArgumentException("missing --" + key);
    }
    return v;
  }

  String get(String key, String otherwise) {
    return single.getOrDefault(key, otherwise);
  }

  List<Path> jobs() {
    return jobs;
  }

  /**
   * Exits this process once the test JVM that started it is gone, so that a test JVM killed hard
   * (no shutdown hooks) leaves no member behind.
   */
  void watchParent() {
    long parent = Long.parseLong(get("parent", "0"));
    if (parent <= 0) {
      return;
    }
    Thread t = new Thread(() -> {
      while (true) {
        if (ProcessHandle.of(parent).map(ProcessHandle::isAlive).orElse(false)) {
          try {
            Thread.sleep(500);
          } catch (InterruptedException e) {
            return;
          }
        } else {
          Runtime.getRuntime().halt(99);
        }
      }
    }, "parent-watch");
    t.setDaemon(true);
    t.start();
  }
}
