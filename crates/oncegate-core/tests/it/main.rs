//! The integration tests of oncegate-core, one binary for the whole crate.

mod canon;
mod contract;
mod identity;
mod json_suite;
mod matrix;
mod shadow;
