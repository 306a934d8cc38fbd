//! Checked text: the traits every newtype that wraps validated text shares (the ids), and
//! enums whose variants each have one wire name (statuses, kinds, scopes). A leaf module, so
//! the modules that declare such types depend on it and not on each other.

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

/// Declares an enum whose every variant has one wire name (`Variant = "name"`), and from that
/// one list: `ALL` and `NAMES` in declaration order, `as_str`, `parse`, `names` (for
/// messages), `Display`, `FromStr` (its error names the known names) and serde as the name.
/// `$what` words the kind of name in that error: `unknown status 'x' (pending, …)`.
macro_rules! wire_names {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident: $what:literal {
            $($(#[$variant_meta:meta])* $variant:ident = $wire:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$variant_meta])* $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($wire),+].len()] = [$($name::$variant),+];
            /// Every wire name, in the same order.
            pub const NAMES: [&'static str; [$($wire),+].len()] = [$($wire),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)+
                }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($wire => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The wire names as a sentence fragment: `a, b, c`.
            pub fn names() -> String {
                Self::NAMES.join(", ")
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(text: &str) -> Result<Self, String> {
                Self::parse(text).ok_or_else(|| format!("unknown {} '{text}' ({})", $what, Self::names()))
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <String as serde::Deserialize>::deserialize(deserializer)?;
                Self::parse(&text).ok_or_else(|| serde::de::Error::unknown_variant(&text, &Self::NAMES))
            }
        }
    };
}
pub(crate) use wire_names;

#[cfg(test)]
mod tests {
    wire_names! {
        /// A test enum.
        enum Colour: "colour" {
            /// The first.
            Red = "red",
            DeepBlue = "deep_blue",
        }
    }

    #[test]
    fn one_list_gives_names_parsing_display_and_serde() {
        assert_eq!(Colour::ALL, [Colour::Red, Colour::DeepBlue]);
        assert_eq!(Colour::NAMES, ["red", "deep_blue"]);
        assert_eq!((Colour::DeepBlue.as_str(), Colour::DeepBlue.to_string()), ("deep_blue", "deep_blue".into()));
        assert_eq!(Colour::parse("deep_blue"), Some(Colour::DeepBlue));
        for other in ["", "Red", "DeepBlue", "red "] {
            assert_eq!(Colour::parse(other), None, "{other:?}");
        }
        assert_eq!("green".parse::<Colour>(), Err("unknown colour 'green' (red, deep_blue)".to_owned()));
        assert_eq!(serde_json::to_value(Colour::DeepBlue).unwrap(), "deep_blue");
        assert_eq!(serde_json::from_value::<Colour>("red".into()).unwrap(), Colour::Red);
        let unknown = serde_json::from_value::<Colour>("green".into()).unwrap_err().to_string();
        assert!(unknown.contains("unknown variant `green`, expected `red` or `deep_blue`"), "{unknown}");
    }
}
