//! An operating system error in the words people read: the system's own
//! text ("No such file or directory") without the "(os error 2)" that
//! Rust's `io::Error` adds after it, which tells a user nothing more.

use std::fmt;
use std::io;

/// `io::Error` shown without its errno tail (see the module).
pub struct IoWords<'a>(pub &'a io::Error);

impl fmt::Display for IoWords<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        let trimmed = match (self.0.raw_os_error(), text.rfind(" (os error ")) {
            (Some(_), Some(at)) if text.ends_with(')') => &text[..at],
            _ => &text,
        };
        f.write_str(trimmed)
    }
}

/// `io_words(&e).to_string()`, for messages built with `format!`.
pub fn io_words(e: &io::Error) -> IoWords<'_> {
    IoWords(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_errno_tail_is_left_out() {
        let e = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(io_words(&e).to_string(), "No such file or directory");
    }

    #[test]
    fn other_errors_are_shown_whole() {
        let e = io::Error::other("bad thing (os error 5)");
        assert_eq!(io_words(&e).to_string(), "bad thing (os error 5)");
    }
}
