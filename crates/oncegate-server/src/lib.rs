//! The oncegate HTTP service: the only crate that knows HTTP and JSON wire types.
