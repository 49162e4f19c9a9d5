//! Credentials never reach a log line or an error message: passwords in URLs
//! (`scheme://user:secret@host`) are replaced before text leaves the process.

/// Replaces the password of every `scheme://user:password@` in `text` with `***`.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first '/', whitespace or quote; a password is
        // what lies between ':' and the last '@' in it.
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon + 1]);
                out.push_str("***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// stderr, with credentials redacted from every write (tracing writes one event per call).
pub struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_passwords_in_urls() {
        assert_eq!(
            redact("cannot connect to postgres://user:secret@db:5432/x: refused"),
            "cannot connect to postgres://user:***@db:5432/x: refused"
        );
        assert_eq!(
            redact("amqp://guest:p@ss:w0rd@mq/%2f"),
            "amqp://guest:***@mq/%2f"
        );
        assert_eq!(
            redact("sqlite://out.db and http://host:80/x"),
            "sqlite://out.db and http://host:80/x"
        );
        assert_eq!(redact("no url here"), "no url here");
        assert_eq!(redact("a postgres://u@h/db b"), "a postgres://u@h/db b");
    }
}
