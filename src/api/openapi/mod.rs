//! The OpenAPI document's own parts: the schemas of wire values that are strings on the Rust
//! side (`schemas`), and the error responses every operation may answer from the layers
//! around its handler (`error_responses`).

pub mod error_responses;
pub mod schemas;
