package io.shardcar.interop.harness;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

/**
 * Reads the test's namespace straight from ZooKeeper (Curator, no cache): the nodes ElasticJob and
 * shardcar write are the facts the tests assert on.
 */
public final class Zk implements AutoCloseable {
  private final CuratorFramework client;

  Zk(String connect, String namespace) {
    client = CuratorFrameworkFactory.builder().connectString(connect).namespace(namespace)
        .sessionTimeoutMs(20_000).connectionTimeoutMs(10_000).retryPolicy(new ExponentialBackoffRetry(100, 3)).build();
    client.start();
    try {
      if (!client.blockUntilConnected(20, java.util.concurrent.TimeUnit.SECONDS)) {
        throw new IllegalStateException("cannot connect to ZooKeeper at " + connect);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  /** The node's data as UTF-8, or null when it does not exist. */
  public String data(String path) {
    try {
      byte[] b = client.getData().forPath(path);
      return b == null ? "" : new String(b, StandardCharsets.UTF_8);
    } catch (KeeperException.NoNodeException e) {
      return null;
    } catch (Exception e) {
      throw new IllegalStateException("read " + path, e);
    }
  }

  public Stat stat(String path) {
    try {
      return client.checkExists().forPath(path);
    } catch (Exception e) {
      throw new IllegalStateException("stat " + path, e);
    }
  }

  public boolean exists(String path) {
    return stat(path) != null;
  }

  /** Children, sorted ascending; empty when the node does not exist. */
  public List<String> children(String path) {
    try {
      List<String> c = new ArrayList<>(client.getChildren().forPath(path));
      Collections.sort(c);
      return c;
    } catch (KeeperException.NoNodeException e) {
      return List.of();
    } catch (Exception e) {
      throw new IllegalStateException("children " + path, e);
    }
  }

  /** Creates a persistent empty node (and its parents) unless it exists. */
  public void createIfAbsent(String path) {
    try {
      client.create().creatingParentsIfNeeded().forPath(path);
    } catch (KeeperException.NodeExistsException e) {
      // already there
    } catch (Exception e) {
      throw new IllegalStateException("create " + path, e);
    }
  }

  public void delete(String path) {
    try {
      client.delete().forPath(path);
    } catch (KeeperException.NoNodeException e) {
      // already gone
    } catch (Exception e) {
      throw new IllegalStateException("delete " + path, e);
    }
  }

  /** {@code sharding/{i}/instance} of every item that has one. */
  public Map<Integer, String> owners(String job) {
    Map<Integer, String> m = new TreeMap<>();
    for (String item : children("/" + job + "/sharding")) {
      String owner = data("/" + job + "/sharding/" + item + "/instance");
      if (owner != null) {
        m.put(Integer.valueOf(item), owner);
      }
    }
    return m;
  }

  /** The items {@code instance} owns. */
  public List<Integer> itemsOf(String job, String instance) {
    List<Integer> l = new ArrayList<>();
    owners(job).forEach((i, o) -> {
      if (o.equals(instance)) {
        l.add(i);
      }
    });
    return l;
  }

  public String leader(String job) {
    return data("/" + job + "/leader/election/instance");
  }

  public List<String> instances(String job) {
    return children("/" + job + "/instances");
  }

  /** No resharding pending or in progress. */
  public boolean shardingSettled(String job) {
    return !exists("/" + job + "/leader/sharding/necessary") && !exists("/" + job + "/leader/sharding/processing");
  }

  /** One node of a dump: its path, its data as UTF-8 text, whether it is ephemeral. */
  public record Node(String path, String data, boolean ephemeral) {}

  /** The subtree under {@code path}, depth first, children in ascending order (nodes gone meanwhile are left out). */
  public List<Node> nodes(String path) {
    List<Node> out = new ArrayList<>();
    nodes(path, out);
    return out;
  }

  private void nodes(String path, List<Node> out) {
    Stat st = stat(path);
    String d = data(path);
    if (st == null || d == null) {
      return;
    }
    out.add(new Node(path, d, st.getEphemeralOwner() != 0));
    for (String c : children(path)) {
      nodes(path.equals("/") ? "/" + c : path + "/" + c, out);
    }
  }

  /** The subtree under {@code path}: one line per node, its data and whether it is ephemeral. */
  public String tree(String path) {
    StringBuilder sb = new StringBuilder();
    tree(path, sb);
    return sb.toString();
  }

  private void tree(String path, StringBuilder sb) {
    Stat st = stat(path);
    if (st == null) {
      return;
    }
    String d = data(path);
    sb.append(path).append(st.getEphemeralOwner() != 0 ? " (ephemeral)" : "").append(" = ")
        .append(d == null ? "(gone)" : d.replace("\n", "\\n")).append('\n');
    for (String c : children(path)) {
      tree(path.equals("/") ? "/" + c : path + "/" + c, sb);
    }
  }

  @Override
  public void close() {
    client.close();
  }
}
