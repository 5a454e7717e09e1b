//! The scalar analysis of the SnakeYAML-exact writer (`yaml`): which styles a string may be
//! written in, decided over its UTF-16 code units as Java sees them.

pub(super) fn is_linebr(c: u16) -> bool {
    matches!(c, 0x0A | 0x85 | 0x2028 | 0x2029)
}

fn is_null_bl_t(c: u32) -> bool {
    matches!(c, 0 | 0x20 | 0x09)
}

fn is_null_bl_t_linebr(c: u32) -> bool {
    matches!(c, 0 | 0x20 | 0x09 | 0x0D | 0x0A | 0x85 | 0x2028 | 0x2029)
}

/// SnakeYAML's `StreamReader.isPrintable` for one code point.
pub(super) fn is_printable(c: u32) -> bool {
    matches!(c, 0x09 | 0x0A | 0x0D | 0x20..=0x7E | 0x85 | 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
}

pub(super) fn code_point_at(s: &[u16], i: usize) -> u32 {
    let c = s[i];
    if (0xD800..0xDC00).contains(&c) && i + 1 < s.len() && (0xDC00..0xE000).contains(&s[i + 1]) {
        0x10000 + (((c as u32) - 0xD800) << 10) + ((s[i + 1] as u32) - 0xDC00)
    } else {
        c as u32
    }
}

pub(super) fn char_count(c: u32) -> usize {
    if c >= 0x10000 {
        2
    } else {
        1
    }
}

pub(super) struct Analysis {
    pub(super) empty: bool,
    pub(super) multiline: bool,
    pub(super) allow_block_plain: bool,
    pub(super) allow_single_quoted: bool,
    pub(super) allow_block: bool,
}

/// SnakeYAML 2.x `Emitter.analyzeScalar` (block context only).
pub(super) fn analyze(s: &[u16]) -> Analysis {
    if s.is_empty() {
        return Analysis {
            empty: true,
            multiline: false,
            allow_block_plain: true,
            allow_single_quoted: true,
            allow_block: false,
        };
    }
    let len = s.len();
    let mut block_indicators = false;
    let mut line_breaks = false;
    let mut special = false;
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let leading_zero = len > 1
        && s[0] == u16::from(b'0')
        && s[1..]
            .iter()
            .all(|&c| (0x30..=0x39).contains(&c) || c == u16::from(b'_'));
    let starts = |p: &str| s.len() >= 3 && s[..3].iter().copied().eq(p.encode_utf16());
    if starts("---") || starts("...") {
        block_indicators = true;
    }
    let mut preceded_by_ws = true;
    let mut followed_by_ws = len == 1 || is_null_bl_t_linebr(code_point_at(s, 1));
    let mut previous_space = false;
    let mut previous_break = false;
    let mut index = 0;
    while index < len {
        let c = code_point_at(s, index);
        if index == 0 {
            if "#,[]{}&*!|>'\"%@`".chars().any(|x| x as u32 == c) {
                block_indicators = true;
            }
            if (c == '?' as u32 || c == ':' as u32) && followed_by_ws {
                block_indicators = true;
            }
            if c == '-' as u32 && followed_by_ws {
                block_indicators = true;
            }
        } else {
            if c == ':' as u32 && followed_by_ws {
                block_indicators = true;
            }
            if c == '#' as u32 && preceded_by_ws {
                block_indicators = true;
            }
        }
        let is_break = c <= 0xFFFF && is_linebr(c as u16);
        if is_break {
            line_breaks = true;
        }
        if !(c == 0x0A || (0x20..=0x7E).contains(&c)) {
            let unicode = c == 0x85
                || (0xA0..=0xD7FF).contains(&c)
                || (0xE000..=0xFFFD).contains(&c)
                || (0x10000..=0x10FFFF).contains(&c);
            if !unicode {
                special = true;
            }
        }
        if c == ' ' as u32 {
            leading_space |= index == 0;
            trailing_space |= index == len - 1;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break {
            leading_break |= index == 0;
            trailing_break |= index == len - 1;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        index += char_count(c);
        preceded_by_ws = is_null_bl_t(c) || is_break;
        followed_by_ws = true;
        if index + 1 < len {
            let next = index + char_count(code_point_at(s, index));
            if next < len {
                followed_by_ws = is_null_bl_t(code_point_at(s, next)) || is_break;
            }
        }
    }
    let mut a = Analysis {
        empty: false,
        multiline: line_breaks,
        allow_block_plain: true,
        allow_single_quoted: true,
        allow_block: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break || leading_zero {
        a.allow_block_plain = false;
    }
    if trailing_space {
        a.allow_block = false;
    }
    if break_space {
        a.allow_block_plain = false;
        a.allow_single_quoted = false;
    }
    if space_break || special {
        a.allow_block_plain = false;
        a.allow_single_quoted = false;
        a.allow_block = false;
    }
    if block_indicators {
        a.allow_block_plain = false;
    }
    a
}
