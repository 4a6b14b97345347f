//! The `oncegate` command end to end: the real binary, real files, real stdin.

mod archive;
mod binary;
mod catalog;
mod corpus;
mod deploy;
mod discovery;
mod failover;
mod forward;
mod full_disk;
mod help;
mod json;
mod migrate;
mod operation_scope;
mod pipes;
mod programs;
mod queue;
mod readme;
mod reconcile;
mod replica;
mod safety;
mod serve;
mod service;
mod shadow;
mod signal;
mod toolchain;
mod tools;
