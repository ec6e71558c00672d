//! Admission warnings' length: the one clipper for every warning the webhook sends (the
//! policy layers' notes, enforcement-mode warnings, the route-index warnings).

/// Longest warning the API server shows comfortably (Kubernetes' guidance for admission
/// warnings); longer ones are cut with an ellipsis.
pub const MAX_WARNING_LEN: usize = 120;

/// `w` cut to at most `max` characters (not bytes: a cut never splits a character), the cut
/// marked with "…".
pub fn clip(w: &str, max: usize) -> String {
    if w.chars().count() <= max {
        return w.to_string();
    }
    let mut out: String = w.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_characters_and_marks_the_cut() {
        assert_eq!(clip("short", MAX_WARNING_LEN), "short");
        let exact = "a".repeat(MAX_WARNING_LEN);
        assert_eq!(clip(&exact, MAX_WARNING_LEN), exact);
        let cyrillic = "\u{430}".repeat(200);
        let c = clip(&cyrillic, MAX_WARNING_LEN);
        assert_eq!(c.chars().count(), MAX_WARNING_LEN);
        assert!(c.ends_with('…') && c.starts_with('\u{430}'));
        assert_eq!(clip("abc", 0), "…");
    }
}
