//! Client input quoted in error messages: at most [`MAX_CHARS`] characters of it, so an
//! answer never echoes a large or hostile input back in full.

use std::fmt;

pub const MAX_CHARS: usize = 100;

/// Displays its text cut to [`MAX_CHARS`] characters, with `…` when something was cut.
pub struct Excerpt<'a>(pub &'a str);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(MAX_CHARS) {
            Some((cut, _)) => write!(f, "{}…", &self.0[..cut]),
            None => f.write_str(self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_short_text_and_cuts_long_text_on_a_character_boundary() {
        assert_eq!(Excerpt("alr_1").to_string(), "alr_1");
        let exact = "é".repeat(MAX_CHARS);
        assert_eq!(Excerpt(&exact).to_string(), exact);
        let long = format!("{exact}tail");
        assert_eq!(Excerpt(&long).to_string(), format!("{exact}…"));
    }
}
