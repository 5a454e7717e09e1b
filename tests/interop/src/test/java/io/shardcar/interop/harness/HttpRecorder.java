package io.shardcar.interop.harness;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Predicate;

/**
 * The HTTP endpoint that HTTP jobs call in this suite: a plain HTTP/1.1 server on a free loopback
 * port (bound to port 0) that records every request as it came on the wire: the request line, each
 * header line's raw bytes (name and value as sent), the body, and when the request arrived and
 * when it was answered ({@code 200} with the recorder's answer, by default {@code text/plain}
 * {@code ok}; {@code Connection: close}). A request that
 * {@link #hold(Predicate)} matches is answered only once the hold is lifted, so that a test can kill
 * the caller in the middle of an item.
 */
public final class HttpRecorder implements AutoCloseable {
  /** One request. {@code headers}: name as sent → raw value bytes (ISO-8859-1 text, i.e. the bytes). */
  public record Request(long arrived, long answered, String method, String target, Map<String, String> headers,
      byte[] body) {
    /** A header's raw value (bytes as ISO-8859-1 chars), by case-insensitive name; null when absent. */
    public String header(String name) {
      for (Map.Entry<String, String> e : headers.entrySet()) {
        if (e.getKey().equalsIgnoreCase(name)) {
          return e.getValue();
        }
      }
      return null;
    }

    /** The header's name as the client spelled it; null when absent. */
    public String headerName(String name) {
      return headers.keySet().stream().filter(k -> k.equalsIgnoreCase(name)).findFirst().orElse(null);
    }

    /** A header's value decoded as UTF-8. */
    public String headerUtf8(String name) {
      String raw = header(name);
      return raw == null ? null : new String(raw.getBytes(StandardCharsets.ISO_8859_1), StandardCharsets.UTF_8);
    }

    public boolean answeredYet() {
      return answered != Long.MAX_VALUE;
    }

    @Override
    public String toString() {
      return method + " " + target + " at " + arrived + ".." + (answeredYet() ? answered : "open") + " " + headers;
    }
  }

  private final ServerSocket server;
  private final Thread acceptor;
  private final List<Request> requests = new CopyOnWriteArrayList<>();
  private final List<Socket> open = new CopyOnWriteArrayList<>();
  private volatile Predicate<Request> hold = r -> false;
  private final Object lock = new Object();
  private volatile boolean closed;

  private final java.nio.file.Path logFile;
  private final byte[] answer;

  public HttpRecorder() {
    this(null);
  }

  /** A recorder that writes every request it saw to {@code logFile} when it is closed (for reading after a failure). */
  public HttpRecorder(java.nio.file.Path logFile) {
    this(logFile, "text/plain", "ok");
  }

  /**
   * A recorder that answers every request with {@code body} of {@code contentType} (e.g. a DingTalk
   * robot's {@code {"errcode":0,"errmsg":"ok"}}), and writes what it saw to {@code logFile} when closed.
   */
  public HttpRecorder(java.nio.file.Path logFile, String contentType, String body) {
    this.logFile = logFile;
    byte[] b = body.getBytes(StandardCharsets.UTF_8);
    byte[] head = ("HTTP/1.1 200 OK\r\nContent-Type: " + contentType + "\r\nContent-Length: " + b.length
        + "\r\nConnection: close\r\n\r\n").getBytes(StandardCharsets.ISO_8859_1);
    this.answer = new byte[head.length + b.length];
    System.arraycopy(head, 0, answer, 0, head.length);
    System.arraycopy(b, 0, answer, head.length, b.length);
    try {
      server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    } catch (IOException e) {
      throw new IllegalStateException("cannot listen on loopback", e);
    }
    acceptor = new Thread(this::accept, "http-recorder");
    acceptor.setDaemon(true);
    acceptor.start();
  }

  /** {@code http://127.0.0.1:{port}}. */
  public String base() {
    return "http://127.0.0.1:" + server.getLocalPort();
  }

  public int port() {
    return server.getLocalPort();
  }

  /** Requests matching {@code which} are answered only when a later hold no longer matches them (or on close). */
  public void hold(Predicate<Request> which) {
    synchronized (lock) {
      hold = which;
      lock.notifyAll();
    }
  }

  /** Every request so far (those still held with {@code answered} = {@link Long#MAX_VALUE}), by arrival. */
  public List<Request> requests() {
    List<Request> l = new ArrayList<>(requests);
    l.sort(Comparator.comparingLong(Request::arrived));
    return l;
  }

  private void accept() {
    while (!closed) {
      try {
        Socket s = server.accept();
        open.add(s);
        Thread t = new Thread(() -> serve(s), "http-recorder-conn");
        t.setDaemon(true);
        t.start();
      } catch (IOException e) {
        return;
      }
    }
  }

  private void serve(Socket s) {
    try (s) {
      InputStream in = s.getInputStream();
      String requestLine = line(in);
      if (requestLine == null || requestLine.isEmpty()) {
        return;
      }
      long arrived = System.currentTimeMillis();
      Map<String, String> headers = new LinkedHashMap<>();
      for (String h = line(in); h != null && !h.isEmpty(); h = line(in)) {
        int colon = h.indexOf(':');
        if (colon > 0) {
          headers.put(h.substring(0, colon), h.substring(colon + 1).strip());
        }
      }
      String[] parts = requestLine.split(" ");
      byte[] body = new byte[0];
      for (Map.Entry<String, String> e : headers.entrySet()) {
        if (e.getKey().equalsIgnoreCase("content-length")) {
          body = in.readNBytes(Integer.parseInt(e.getValue().trim()));
        } else if (e.getKey().equalsIgnoreCase("transfer-encoding")) {
          body = ("(unsupported transfer-encoding " + e.getValue() + ")").getBytes(StandardCharsets.UTF_8);
        }
      }
      Request pending = new Request(arrived, Long.MAX_VALUE, parts[0], parts.length > 1 ? parts[1] : "", headers, body);
      requests.add(pending);
      synchronized (lock) {
        while (!closed && hold.test(pending)) {
          lock.wait(1000);
        }
      }
      OutputStream out = s.getOutputStream();
      out.write(answer);
      out.flush();
      long answered = System.currentTimeMillis();
      requests.set(requests.indexOf(pending), new Request(arrived, answered, pending.method(), pending.target(), headers, body));
    } catch (IOException e) {
      // the caller went away (e.g. killed while held)
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      open.remove(s);
    }
  }

  /** One header line, its bytes as ISO-8859-1 chars, without CRLF; null at the end of the stream. */
  private static String line(InputStream in) throws IOException {
    ByteArrayOutputStream b = new ByteArrayOutputStream();
    int c;
    while ((c = in.read()) != -1) {
      if (c == '\n') {
        byte[] bytes = b.toByteArray();
        int n = bytes.length > 0 && bytes[bytes.length - 1] == '\r' ? bytes.length - 1 : bytes.length;
        return new String(bytes, 0, n, StandardCharsets.ISO_8859_1);
      }
      b.write(c);
    }
    return b.size() == 0 ? null : b.toString(StandardCharsets.ISO_8859_1);
  }

  @Override
  public void close() {
    if (logFile != null) {
      StringBuilder sb = new StringBuilder();
      for (Request r : requests()) {
        sb.append(r).append("\n  body: ").append(new String(r.body(), StandardCharsets.UTF_8)).append('\n');
      }
      try {
        java.nio.file.Files.writeString(logFile, sb.toString(), StandardCharsets.UTF_8);
      } catch (IOException e) {
        // best effort
      }
    }
    closed = true;
    synchronized (lock) {
      lock.notifyAll();
    }
    try {
      server.close();
    } catch (IOException e) {
      // closing
    }
    for (Socket s : open) {
      try {
        s.close();
      } catch (IOException e) {
        // closing
      }
    }
  }
}
