//! Pure planning: mirror plans and two-way reconciliation (to be built).
