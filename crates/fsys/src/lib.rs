//! The only crate that touches the file system (to be built by the mirror issue).
