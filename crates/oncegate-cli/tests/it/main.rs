//! The `oncegate` command end to end: the real binary, real files, real stdin.

mod catalog;
mod corpus;
mod deploy;
mod forward;
mod json;
mod migrate;
mod operation_scope;
mod pipes;
mod queue;
mod reconcile;
mod safety;
mod serve;
mod service;
mod shadow;
mod tools;
