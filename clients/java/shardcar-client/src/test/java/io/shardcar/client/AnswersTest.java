package io.shardcar.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/** ReportFailure and Decline texts: at most 16384 bytes of UTF-8, never a split character. */
class AnswersTest {
  private static int utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8).length;
  }

  @Test
  void shortTextsAreKept() {
    assertEquals("", Answers.truncateUtf8("", 16384));
    assertEquals("boom é € 😀", Answers.truncateUtf8("boom é € 😀", 16384));
    String exactly = "x".repeat(16384);
    assertEquals(exactly, Answers.truncateUtf8(exactly, 16384));
  }

  @Test
  void longTextsAreCutToTheLimitInBytes() {
    assertEquals(16384, utf8(Answers.truncateUtf8("x".repeat(20_000), 16384)));
    // 2-, 3- and 4-byte characters: the cut falls inside one; it is dropped whole.
    for (String c : new String[] {"é", "€", "😀"}) {
      String text = "a" + c.repeat(10_000);
      String cut = Answers.truncateUtf8(text, 16384);
      assertTrue(utf8(cut) <= 16384 && utf8(cut) > 16384 - utf8(c), c + ": " + utf8(cut));
      assertTrue(text.startsWith(cut));
      assertTrue(!Character.isHighSurrogate(cut.charAt(cut.length() - 1)), "no half surrogate pair");
      assertEquals(cut, new String(cut.getBytes(StandardCharsets.UTF_8), StandardCharsets.UTF_8), "valid UTF-8");
    }
    assertEquals("ab", Answers.truncateUtf8("ab😀", 5));
    assertEquals("ab😀", Answers.truncateUtf8("ab😀c", 6));
  }

  @Test
  void aHandlersFailureTextIsTruncatedAtTheSource() {
    Exception deep = new IllegalStateException("é".repeat(9_000), new RuntimeException("€".repeat(9_000)));
    String text = JobRegistration.describe(deep);
    assertTrue(utf8(text) <= Answers.MAX_TEXT_BYTES, "bytes: " + utf8(text));
    assertTrue(text.startsWith("java.lang.IllegalStateException: éé"));
  }
}
