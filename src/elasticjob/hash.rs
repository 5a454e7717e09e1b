//! Java's `String.hashCode`, which ElasticJob's ODEVITY and ROUND_ROBIN strategies use to order
//! instances. It runs over UTF-16 code units with wrapping 32-bit arithmetic.

/// `s.hashCode()` as Java computes it: `h = 31 * h + c` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

#[cfg(test)]
mod tests {
    use super::java_string_hash;

    #[test]
    fn matches_java() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("demoJob"), 1_551_644_378);
        assert_eq!(java_string_hash("orderJob"), 1_234_284_943);
        assert_eq!(java_string_hash("0"), 48);
        assert_eq!(java_string_hash("1"), 49);
        // The classic example whose hash is Integer.MIN_VALUE.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        // Non-BMP characters count as two code units (a surrogate pair).
        assert_eq!(java_string_hash("😀"), 0xD83D * 31 + 0xDE00);
        assert_eq!(java_string_hash("é"), 0xE9);
    }
}
