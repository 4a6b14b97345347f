//! The `oncegate` command end to end: the real binary, real files, real stdin.

mod serve;
mod tools;
