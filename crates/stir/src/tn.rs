//! Telephone numbers as SHAKEN PASSporTs carry them (RFC 8225 §5.2.1):
//! digits (and `*`, `#`) only, without `+` or visual separators.

/// The longest number E.164 allows.
pub const MAX_DIGITS: usize = 15;

/// `s` (a SIP URI's user part, a `tel:` number, or a number as typed) as
/// a PASSporT `tn`: `+1 (215) 555-1212;verstat=…` → `12155551212`.
/// `None` when it is not a telephone number (letters, empty, too long).
pub fn normalise(s: &str) -> Option<String> {
    let s = s.split(';').next().unwrap_or("");
    let s = s.strip_prefix('+').unwrap_or(s);
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '0'..='9' | '*' | '#' => out.push(c),
            // RFC 3966 §5.1.1 visual separators, and spaces as typed.
            '-' | '.' | '(' | ')' | ' ' => {}
            _ => return None,
        }
    }
    (!out.is_empty() && out.len() <= MAX_DIGITS).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn numbers_lose_plus_separators_and_parameters() {
        assert_eq!(
            normalise("+1 (215) 555-1212").as_deref(),
            Some("12155551212")
        );
        assert_eq!(
            normalise("12155551212;user=phone").as_deref(),
            Some("12155551212")
        );
        assert_eq!(
            normalise("+44.20.7946.0000").as_deref(),
            Some("442079460000")
        );
        assert_eq!(normalise("*67#").as_deref(), Some("*67#"));
    }

    #[test]
    fn names_and_oversize_numbers_are_not_numbers() {
        assert_eq!(normalise("alice"), None);
        assert_eq!(normalise(""), None);
        assert_eq!(normalise("+"), None);
        assert_eq!(normalise("1234567890123456"), None);
        assert_eq!(normalise("12%34"), None);
    }
}
