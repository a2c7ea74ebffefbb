//! Bytes kept in the queue's claims (`TaskQueue::claim`), whose owners
//! are text: written as hex, and read back checked, since whatever the
//! store hands back is untrusted.

/// `bytes` as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes `owner` holds as hex, if it is hex of at most `max_len`
/// bytes.
pub(crate) fn unhex(owner: &str, max_len: usize) -> Option<Vec<u8>> {
    let digits = owner.as_bytes();
    if !digits.len().is_multiple_of(2) || digits.len() > 2 * max_len {
        return None;
    }
    // Digit by digit: `from_str_radix` would also take a sign.
    let digit = |d: u8| (d as char).to_digit(16).map(|v| v as u8);
    digits
        .chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_read_back_and_anything_else_is_refused() {
        let bytes = b"a/\x00\xff".to_vec();
        assert_eq!(unhex(&hex(&bytes), 4), Some(bytes.clone()));
        assert_eq!(unhex(&hex(&bytes), 3), None, "longer than allowed");
        assert_eq!(unhex("abc", 4), None, "odd length");
        assert_eq!(unhex("zz", 4), None, "not hex");
        assert_eq!(unhex("+1", 4), None, "a sign is not a digit");
        assert_eq!(unhex("é1", 4), None, "not ASCII");
    }
}
