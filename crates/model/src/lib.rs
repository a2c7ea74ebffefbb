//! Shared types of Accord: paths inside a replica, entries, properties. No I/O.
