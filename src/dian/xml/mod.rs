//! XML read back for signing and checking: `tree` (a document as an arena of elements) and
//! `c14n` (its canonical forms). Writing is quick-xml's, in `crate::dian::ubl`.

pub mod c14n;
pub mod tree;
