//! `accord union` (owned by the union issue; not built yet).

use crate::exit;

#[derive(clap::Args)]
pub struct UnionArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<String>,
}

pub fn run(_args: UnionArgs) -> i32 {
    eprintln!("accord union: this command is not built yet; nothing was done.");
    exit::UNAVAILABLE
}
