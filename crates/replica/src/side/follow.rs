//! How a sync's archive remembers links it followed (`--follow`), so that
//! switching the option on or off between runs is no change by itself.
//!
//! A file or directory seen through a followed link is recorded with the
//! link's target in `Entry::link_target` (which a plain file or directory
//! never has). A later run that does not follow that link sees a symlink
//! with the same target where the archive holds what it led to: that is
//! the same, unchanged path seen the other way, not an update. The side
//! reports it as the archive recorded it (and what the archive holds
//! beneath a directory link, unwalked), so the archive keeps the followed
//! view and a run that follows again compares the target with it; a write
//! there from the other side finds a link where it expects a file or a
//! directory and fails the path ("changed during sync"), writing nothing.
//! The other way round, a run that starts following a link recorded as a
//! plain symlink cannot know whether its target changed since, so the path
//! is an update on each side that follows it: equal contents on both sides
//! agree silently, different ones are a conflict.

use accord_model::{Entry, Kind, Observed};

/// What this side holds at a path, for detection and the archive:
/// what the archive recorded when `current` is the symlink it recorded as
/// followed (the same link target, not followed now), else `current`.
pub fn seen_either_way(archived: Option<&Observed>, current: Option<Observed>) -> Option<Observed> {
    if unfollowed(archived, current.as_ref()) {
        return archived.cloned();
    }
    current
}

/// Is `current` the symlink the archive recorded as followed, not
/// followed now? (Its archived subtree is then kept, not walked.)
pub fn unfollowed(archived: Option<&Observed>, current: Option<&Observed>) -> bool {
    match (archived, current) {
        (Some(was), Some(now)) => unfollowed_since(&was.entry, &now.entry),
        _ => false,
    }
}

/// Is `now` the symlink whose target `was` was seen through?
fn unfollowed_since(was: &Entry, now: &Entry) -> bool {
    now.kind == Kind::Symlink
        && was.kind != Kind::Symlink
        && was.link_target.is_some()
        && was.link_target == now.link_target
}

/// Set what the archive records for a path just written on one side: a
/// written file or directory is seen through a link there only when that
/// side held it through one (`held`, its entry as scanned, of the same
/// kind); the source's own link, if any, is not the written side's.
pub fn seen_as_written(recorded: &mut Entry, held: Option<&Entry>) {
    if recorded.kind == Kind::Symlink {
        return;
    }
    recorded.link_target = held
        .filter(|held| held.kind == recorded.kind)
        .and_then(|held| held.link_target.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_model::{Props, RelPath, Time};

    fn entry(kind: Kind, link_target: Option<&str>) -> Observed {
        Observed {
            entry: Entry {
                path: RelPath::new(b"l").unwrap(),
                kind,
                size: 3,
                props: Props::default(),
                dev: 1,
                ino: 2,
                nlink: 1,
                rdev: 0,
                blocks: 0,
                link_target: link_target.map(|t| t.as_bytes().to_vec()),
                hash: None,
            },
            ctime: Time::default(),
        }
    }

    #[test]
    fn a_followed_link_no_longer_followed_is_unchanged() {
        let was = entry(Kind::File, Some("../x"));
        let now = entry(Kind::Symlink, Some("../x"));
        assert!(unfollowed(Some(&was), Some(&now)));
        assert_eq!(seen_either_way(Some(&was), Some(now)), Some(was));
    }

    #[test]
    fn a_retargeted_or_plain_path_is_seen_as_it_is() {
        let was = entry(Kind::File, Some("../x"));
        let now = entry(Kind::Symlink, Some("../y"));
        assert_eq!(seen_either_way(Some(&was), Some(now.clone())), Some(now));
        let plain = entry(Kind::File, None);
        let link = entry(Kind::Symlink, Some("f"));
        assert_eq!(
            seen_either_way(Some(&plain), Some(link.clone())),
            Some(link)
        );
        // Followed now, recorded as a link: an update, judged as usual.
        let recorded_link = entry(Kind::Symlink, Some("../x"));
        let followed = entry(Kind::File, Some("../x"));
        assert!(!unfollowed(Some(&recorded_link), Some(&followed)));
        assert_eq!(
            seen_either_way(Some(&recorded_link), Some(followed.clone())),
            Some(followed)
        );
        assert_eq!(seen_either_way(Some(&was), None), None);
    }

    #[test]
    fn a_written_path_is_seen_through_a_link_only_where_it_was() {
        let mut written = entry(Kind::File, Some("../x")).entry;
        seen_as_written(&mut written, None);
        assert_eq!(written.link_target, None);
        let held = entry(Kind::File, Some("t")).entry;
        seen_as_written(&mut written, Some(&held));
        assert_eq!(written.link_target, Some(b"t".to_vec()));
        let mut link = entry(Kind::Symlink, Some("s")).entry;
        seen_as_written(&mut link, None);
        assert_eq!(link.link_target, Some(b"s".to_vec()));
    }
}
