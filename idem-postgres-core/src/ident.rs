//! Schema and table names, checked before they reach SQL.

use idem_core::StoreError;

/// The longest name accepted. PostgreSQL truncates identifiers at 63 bytes, and the store
/// derives `<table>_fence` and `<table>_expires_at` from the table name.
pub const MAX_IDENT_LEN: usize = 48;

/// Checks that `name` is a plain lowercase SQL identifier: `[a-z_][a-z0-9_]*`, at most
/// [`MAX_IDENT_LEN`] bytes. Anything else is refused, so a name can never inject SQL or need
/// quoting rules.
pub fn validate_ident(what: &str, name: &str) -> Result<(), StoreError> {
    let mut chars = name.chars();
    let first_ok = matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c == '_' || c.is_ascii_lowercase() || c.is_ascii_digit());
    if first_ok && rest_ok && name.len() <= MAX_IDENT_LEN && !name.starts_with("pg_") {
        return Ok(());
    }
    Err(StoreError::msg(format!(
        "invalid {what} name {name:?}: use a lowercase identifier of at most {MAX_IDENT_LEN} \
         bytes made of a-z, 0-9 and _ (not starting with a digit or pg_), like \"idem\""
    )))
}

#[cfg(test)]
mod tests {
    use super::validate_ident;

    #[test]
    fn plain_identifiers_pass() {
        for ok in ["idem", "idem_records", "_x", "a1", "jobs_2026"] {
            assert!(validate_ident("table", ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn anything_that_needs_quoting_is_refused() {
        for bad in [
            "",
            "Idem",
            "1abc",
            "idem-records",
            "idem records",
            "idem\"; DROP TABLE users; --",
            "idem.records",
            "pg_catalog",
            "é",
            &"x".repeat(49),
        ] {
            let err = validate_ident("table", bad).unwrap_err();
            assert!(
                err.to_string().contains("invalid table name"),
                "{bad}: {err}"
            );
        }
    }
}
