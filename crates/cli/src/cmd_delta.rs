//! `accord delta` (being written).
use crate::exit;

#[derive(clap::Args)]
pub struct DeltaArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<String>,
}

pub fn run(_args: DeltaArgs) -> i32 {
    exit::UNAVAILABLE
}
