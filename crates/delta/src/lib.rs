//! The delta engine: signatures, deltas, patches and the in-place planner.
//! (Being written; see the delta engine issue.)
