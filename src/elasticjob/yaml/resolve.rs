//! SnakeYAML's implicit resolver (YAML 1.1 types: bool, int, float, null, timestamp, merge,
//! value), which decides whether a plain scalar reads back as a string. A string that would
//! read back as something else must be quoted when written.

/// True if SnakeYAML would read `s`, written plain, back as a string.
pub(super) fn resolves_to_str(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false; // empty = null
    };
    let b = s.as_bytes();
    let non_str = match first {
        'y' | 'Y' | 'n' | 'N' | 't' | 'T' | 'f' | 'F' | 'o' | 'O' => {
            is_bool(s) || matches!(s, "null" | "Null" | "NULL")
        }
        '~' => s == "~",
        '-' | '+' => is_int(b) || is_float(b),
        '0'..='9' => is_int(b) || is_float(b) || is_timestamp(b),
        '.' => is_float(b),
        '<' => s == "<<",
        '=' => s == "=",
        '!' | '&' | '*' => s.len() == 1,
        _ => false,
    };
    !non_str
}

fn is_bool(s: &str) -> bool {
    matches!(
        s,
        "yes"
            | "Yes"
            | "YES"
            | "no"
            | "No"
            | "NO"
            | "true"
            | "True"
            | "TRUE"
            | "false"
            | "False"
            | "FALSE"
            | "on"
            | "On"
            | "ON"
            | "off"
            | "Off"
            | "OFF"
    )
}

fn all_in(b: &[u8], f: impl Fn(u8) -> bool) -> bool {
    b.iter().all(|&c| f(c))
}

fn strip_sign(b: &[u8]) -> &[u8] {
    match b.first() {
        Some(b'-' | b'+') => &b[1..],
        _ => b,
    }
}

/// `(:[0-5]?[0-9])+`
fn is_sexagesimal_tail(b: &[u8]) -> bool {
    if b.first() != Some(&b':') {
        return false;
    }
    b[1..].split(|&c| c == b':').all(|g| match g {
        [d] => d.is_ascii_digit(),
        [d1, d2] => (b'0'..=b'5').contains(d1) && d2.is_ascii_digit(),
        _ => false,
    })
}

/// `[0-9][0-9_]*` (or `[1-9][0-9_]*` when `nonzero`).
fn is_digits_head(b: &[u8], nonzero: bool) -> bool {
    match b.split_first() {
        Some((f, rest)) => {
            (if nonzero {
                (b'1'..=b'9').contains(f)
            } else {
                f.is_ascii_digit()
            }) && all_in(rest, |c| c.is_ascii_digit() || c == b'_')
        }
        None => false,
    }
}

fn is_int(b: &[u8]) -> bool {
    let r = strip_sign(b);
    let any = |t: &[u8], f: &dyn Fn(u8) -> bool| t.iter().any(|&c| f(c));
    if let Some(t) = r.strip_prefix(b"0b") {
        if all_in(t, |c| c == b'0' || c == b'1' || c == b'_') && any(t, &|c| c != b'_') {
            return true;
        }
    }
    if let Some(t) = r.strip_prefix(b"0x") {
        if all_in(t, |c| c.is_ascii_hexdigit() || c == b'_') && any(t, &|c| c != b'_') {
            return true;
        }
    }
    if let Some(t) = r.strip_prefix(b"0") {
        if t.is_empty()
            || (all_in(t, |c| (b'0'..=b'7').contains(&c) || c == b'_') && any(t, &|c| c != b'_'))
        {
            return true;
        }
    }
    if is_digits_head(r, true) {
        return true;
    }
    if let Some(i) = r.iter().position(|&c| c == b':') {
        return is_digits_head(&r[..i], true) && is_sexagesimal_tail(&r[i..]);
    }
    false
}

/// `[eE][-+]?[0-9]+`
fn is_exponent(b: &[u8]) -> bool {
    match b.split_first() {
        Some((b'e' | b'E', rest)) => {
            let d = strip_sign(rest);
            !d.is_empty() && all_in(d, |c| c.is_ascii_digit())
        }
        _ => false,
    }
}

/// `[0-9_]*` followed by an optional exponent; `min` digits/underscores required.
fn is_fraction_exp(b: &[u8], min: usize) -> bool {
    let n = b
        .iter()
        .take_while(|&&c| c.is_ascii_digit() || c == b'_')
        .count();
    n >= min && (n == b.len() || is_exponent(&b[n..]))
}

fn is_float(b: &[u8]) -> bool {
    if matches!(b, b".nan" | b".NaN" | b".NAN") {
        return true;
    }
    let r = strip_sign(b);
    if matches!(r, b".inf" | b".Inf" | b".INF") {
        return true;
    }
    if let Some(t) = r.strip_prefix(b".") {
        return is_fraction_exp(t, 1);
    }
    if let Some(dot) = r.iter().position(|&c| c == b'.') {
        let head = &r[..dot];
        let tail = &r[dot + 1..];
        if is_digits_head(head, false) && is_fraction_exp(tail, 0) {
            return true;
        }
        // base 60 with a fraction
        if let Some(colon) = head.iter().position(|&c| c == b':') {
            return is_digits_head(&head[..colon], false)
                && is_sexagesimal_tail(&head[colon..])
                && all_in(tail, |c| c.is_ascii_digit() || c == b'_');
        }
        return false;
    }
    if let Some(e) = r.iter().position(|&c| c == b'e' || c == b'E') {
        return is_digits_head(&r[..e], false) && is_exponent(&r[e..]);
    }
    false
}

fn is_timestamp(b: &[u8]) -> bool {
    struct Cur<'a>(&'a [u8], usize);
    impl Cur<'_> {
        fn digits(&mut self, min: usize, max: usize) -> bool {
            let n = self.0[self.1..]
                .iter()
                .take(max)
                .take_while(|c| c.is_ascii_digit())
                .count();
            self.1 += n;
            n >= min
        }
        fn lit(&mut self, c: u8) -> bool {
            if self.0.get(self.1) == Some(&c) {
                self.1 += 1;
                true
            } else {
                false
            }
        }
        fn done(&self) -> bool {
            self.1 == self.0.len()
        }
    }
    let mut c = Cur(b, 0);
    if !(c.digits(4, 4) && c.lit(b'-')) {
        return false;
    }
    let date_start = c.1;
    if c.digits(2, 2) && c.lit(b'-') && c.digits(2, 2) && c.done() {
        return true;
    }
    c.1 = date_start;
    if !(c.digits(1, 2) && c.lit(b'-') && c.digits(1, 2)) {
        return false;
    }
    if !(c.lit(b'T') || c.lit(b't')) {
        let n = b[c.1..]
            .iter()
            .take_while(|&&x| x == b' ' || x == b'\t')
            .count();
        if n == 0 {
            return false;
        }
        c.1 += n;
    }
    if !(c.digits(1, 2) && c.lit(b':') && c.digits(2, 2) && c.lit(b':') && c.digits(2, 2)) {
        return false;
    }
    if c.lit(b'.') {
        c.digits(0, usize::MAX);
    }
    if c.done() {
        return true;
    }
    c.1 += b[c.1..]
        .iter()
        .take_while(|&&x| x == b' ' || x == b'\t')
        .count();
    if c.lit(b'Z') {
        return c.done();
    }
    if c.lit(b'-') || c.lit(b'+') {
        if !c.digits(1, 2) {
            return false;
        }
        if c.lit(b':') && !c.digits(2, 2) {
            return false;
        }
        return c.done();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolver_matches_snakeyaml_patterns() {
        for s in ["0b101", "-0x_1", "0_7", "+12_3", "190:20:30", "0", "-0"] {
            assert!(is_int(s.as_bytes()), "{s} should be int");
        }
        assert!(!is_int(b"08"));
        assert!(!is_int(b"1:60"));
        for s in [
            "1.",
            "1.5e+3",
            ".5",
            "1e3",
            "-.inf",
            ".NaN",
            "190:20:30.15",
            "1_0.0_1",
        ] {
            assert!(is_float(s.as_bytes()), "{s} should be float");
        }
        for s in ["1.2.3", ".", "e3", "1e", "-.nan"] {
            assert!(!is_float(s.as_bytes()), "{s} should not be float");
        }
        for s in [
            "2001-12-14",
            "2001-12-14t21:59:43.10-05:00",
            "2001-12-14 21:59:43.10 Z",
            "2001-1-4T1:59:43",
        ] {
            assert!(is_timestamp(s.as_bytes()), "{s} should be a timestamp");
        }
        for s in ["2001-12-1", "2001-12-14 ", "2001-12-14T21:59"] {
            assert!(!is_timestamp(s.as_bytes()), "{s} should not be a timestamp");
        }
    }
}
