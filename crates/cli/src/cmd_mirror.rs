//! `accord mirror` (owned by the mirror issue; not built yet).

use crate::exit;

#[derive(clap::Args)]
pub struct MirrorArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<String>,
}

pub fn run(_args: MirrorArgs) -> i32 {
    eprintln!("accord mirror: this command is not built yet; nothing was done.");
    exit::UNAVAILABLE
}
