//! Closed vocabularies: an enum whose values are stored and sent as fixed lowercase words
//! (`past_due`, `addon_proration`). `vocabulary!` writes the word of each value once; the
//! enum reads and writes it (`as_str`, `parse`, serde), and `store` maps it to a text column
//! (the database refuses any other word: migration 000016).

/// Declares a closed vocabulary: `vocabulary! { pub enum Cycle { Monthly => "monthly", … } }`.
macro_rules! vocabulary {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident => $word:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        $vis enum $name {
            $($(#[$variant_meta])* #[serde(rename = $word)] $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Every value's word, in declaration order.
            pub const WORDS: &'static [&'static str] = &[$($word),+];

            /// The stored and wire word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word),+
                }
            }

            /// The value of a word; `None` for any other string (case matters).
            pub fn parse(raw: &str) -> Option<Self> {
                match raw {
                    $($word => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub(crate) use vocabulary;
