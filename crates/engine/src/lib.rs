//! The orchestrator: mirror and sync pipelines over the Replica trait (to be built).
