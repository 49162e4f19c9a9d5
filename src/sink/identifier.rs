//! Table and column names come from configuration; they are checked and quoted so that
//! configuration can never inject SQL.

/// Accepts `name` or `schema.name`, each part a plain SQL identifier of at most 63 bytes.
pub fn validate(name: &str) -> Result<(), String> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 {
        return Err(format!(
            "{name:?} is not a table name (at most schema.table)"
        ));
    }
    for part in parts {
        let mut chars = part.chars();
        let ok_start = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let ok_rest = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok_start || !ok_rest || part.len() > 63 {
            return Err(format!(
                "{name:?} is not a plain identifier (letters, digits and _, starting with a letter or _)"
            ));
        }
    }
    Ok(())
}

/// The quoted form of a validated name: `"schema"."table"`.
pub fn quote(name: &str) -> String {
    name.split('.')
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(".")
}

/// The MySQL-quoted form of a validated name: `` `schema`.`table` ``.
pub fn backtick(name: &str) -> String {
    name.split('.')
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_anything_but_plain_names() {
        assert!(validate("records").is_ok());
        assert!(validate("ingest.records_2").is_ok());
        for bad in [
            "records; drop table x",
            "a.b.c",
            "1abc",
            "",
            "re\"cords",
            "a b",
            "tab-le",
        ] {
            assert!(validate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quotes_each_part() {
        assert_eq!(quote("s.t"), "\"s\".\"t\"");
        assert_eq!(backtick("s.key"), "`s`.`key`");
    }
}
