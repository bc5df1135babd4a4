//! The fencing token's written form, as an off-host launcher records it on an instance (libvirt
//! domain metadata, or a file beside a simulated instance): the backends write and read it,
//! [`crate::remote::fence`] decides with it.

/// The metadata namespace of the fencing token on a domain.
pub const FENCE_NAMESPACE: &str = "urn:x-cumulo:fence:1";

/// The token in a metadata element such as `<fence token="12"/>` (any prefix or quotes).
pub fn parse_token(element: &str) -> Option<u64> {
    let at = element.find("token=")? + "token=".len();
    let rest = element.get(at..)?;
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let inner = rest.get(1..)?;
    let end = inner.find(quote)?;
    inner.get(..end)?.parse().ok()
}

/// The element that records `token`.
pub fn token_element(token: u64) -> String {
    format!("<fence token='{token}'/>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_read_back_whatever_the_quoting() {
        assert_eq!(parse_token(&token_element(42)), Some(42));
        assert_eq!(
            parse_token("<cf:fence xmlns:cf=\"urn:x-cumulo:fence:1\" token=\"7\"/>"),
            Some(7)
        );
        assert_eq!(parse_token("<fence/>"), None);
        assert_eq!(parse_token("<fence token='x'/>"), None);
        assert_eq!(parse_token("<fence token='1"), None);
    }
}
