//! Admission warnings' length: the one clipper for every warning the webhook sends (the
//! policy layers' notes, enforcement-mode warnings, the route-index warnings).

/// Longest warning the API server shows comfortably (Kubernetes' guidance for admission
/// warnings); longer ones are cut with an ellipsis.
pub const MAX_WARNING_LEN: usize = 120;

/// `w` cut to at most `max` characters (not bytes: a cut never splits a character), the cut
/// marked with "…".
pub fn clip(w: &str, max: usize) -> String {
    // Within `max` bytes is within `max` characters: the usual warning is copied as is.
    if w.len() <= max || w.chars().count() <= max {
        return w.to_string();
    }
    // Where the character after the first `max - 1` starts, so the text kept is copied whole
    // (the warnings of a review of a full Gateway come through here; a copy per character
    // cost ~4 k instructions, bench/RESULTS.md session 31). An ASCII prefix is its own count.
    let keep = max.saturating_sub(1);
    let cut = if w.as_bytes()[..keep].is_ascii() {
        keep
    } else {
        w.char_indices().nth(keep).map_or(w.len(), |(i, _)| i)
    };
    let mut out = String::with_capacity(cut + '…'.len_utf8());
    out.push_str(&w[..cut]);
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
        assert_eq!(clip("", 0), "");
    }

    /// The clip by byte offsets says what a clip counting characters one by one says, for
    /// strings of one-, two- and three-byte characters around every bound.
    #[test]
    fn clips_as_counting_characters_does() {
        fn by_chars(w: &str, max: usize) -> String {
            if w.chars().count() <= max {
                return w.to_string();
            }
            let mut out: String = w.chars().take(max.saturating_sub(1)).collect();
            out.push('…');
            out
        }
        let pieces = ["a", "\u{430}", "…", "b.", "\u{20ac}x"];
        let mut texts = vec![String::new()];
        for n in 0..12 {
            let mut s = String::new();
            for i in 0..n {
                s.push_str(pieces[(i * 7 + n) % pieces.len()]);
            }
            texts.push(s);
        }
        for w in &texts {
            for max in 0..16 {
                assert_eq!(clip(w, max), by_chars(w, max), "{w:?} at {max}");
            }
        }
    }
}
