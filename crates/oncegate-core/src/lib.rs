//! The pure identity engine of oncegate: it reads webhook bodies strictly, canonicalizes them,
//! applies a contract's key hierarchy and runs the decision matrix.
//!
//! Nothing in this crate does I/O, reads the clock, the environment or a random source: time,
//! secrets, identifiers and the store's answers come in as arguments. That is what lets every
//! decision be replayed and tested as a plain function call.

#![warn(missing_docs)]

pub mod batch;
pub mod canon;
pub mod contract;
pub mod corpus;
pub mod identity;
pub mod ids;
pub mod json;
pub mod matrix;
pub mod pointer;
pub mod reconcile;
pub mod strategy;
