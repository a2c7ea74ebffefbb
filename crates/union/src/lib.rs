//! The FUSE union file system (to be built by the union issue).
