//! Test helpers: temp roots, detection of reference tools.
