//! What a two-way sync leaves out: `--exclude` patterns and `.accordignore`
//! files, in gitignore syntax, matched by the mirror's matcher
//! (`accord_fsys::IgnoreRules`); and always the backup directory at the
//! top of a root.
//!
//! An excluded path is out of the run on both sides. Each side applies its
//! own rules on its own host: its walk neither lists an excluded entry nor,
//! when its archive still holds one from before the rule, takes it as
//! deleted (the archive's entries there are passed over and kept, so
//! removing the rule later finds them unchanged where the files are); and
//! a lookup of a path its rules exclude answers "excluded"
//! (`SideScan::excluded`), which takes the path out of the merge with its
//! subtree. So a path excluded by either side's rules is excluded on both:
//! the sides' `.accordignore` files may differ (one not yet propagated, or
//! excluded itself), and a path one side ignores but the other does not
//! would otherwise be copied to the ignoring side again on every run.

use crate::sync::SyncFatal;
use accord_replica::{SideSession, SyncRules};

/// Tell both sides what this run leaves out (a remote side too old to
/// apply patterns refuses, which stops the run before any scan).
pub(crate) fn set_rules_of_both(
    sides: &mut [Box<dyn SideSession + '_>; 2],
    rules: &SyncRules,
    names: &[String; 2],
) -> Result<(), SyncFatal> {
    for (side, name) in sides.iter_mut().zip(names) {
        side.set_rules(rules).map_err(|failure| SyncFatal::Side {
            replica: name.clone(),
            failure,
        })?;
    }
    Ok(())
}
