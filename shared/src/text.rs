//! Checked text: the traits every newtype that wraps validated text shares (ids, times). A
//! leaf module, so the modules that declare such types depend on it and not on each other.

/// The traits of a type that wraps checked text and has a `parse(&str) -> Option<Self>`:
/// shown as its text, converted from text only through `parse`, and into text freely.
macro_rules! text_traits {
    ($name:ident, $what:expr) => {
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;

            fn try_from(text: String) -> Result<Self, String> {
                $name::parse(&text).ok_or_else(|| format!("{text:?} is not {}", $what))
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, String> {
                $name::try_from(text.to_owned())
            }
        }
    };
}
pub(crate) use text_traits;
