//! The integration tests of oncegate-core, one binary for the whole crate.
// Tests read the shared corpora; the purity bans (clippy.toml) are for the library.
#![allow(clippy::disallowed_methods)]

mod canon;
mod contract;
mod contract_reference;
mod identity;
mod json_suite;
mod matrix;
mod provider_shapes;
mod shadow;
