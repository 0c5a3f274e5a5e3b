//! `lease = "30s"`-style durations, read at compile time.

use syn::LitStr;

/// A duration option: its literal (for spans) and its value in milliseconds.
pub(crate) struct DurationArg {
    pub lit: LitStr,
    pub millis: u64,
}

const UNITS: &str = "ms, s, m, h or d";

impl DurationArg {
    pub fn parse(lit: LitStr) -> syn::Result<DurationArg> {
        let text = lit.value();
        let fail = || {
            syn::Error::new(
                lit.span(),
                format!(
                    "malformed duration {text:?}: write a whole number followed by one of \
                     {UNITS}, like \"30s\", \"500ms\" or \"7d\""
                ),
            )
        };
        let digits = text.chars().take_while(char::is_ascii_digit).count();
        let (number, unit) = text.split_at(digits);
        let number: u64 = number.parse().map_err(|_| fail())?;
        let per_unit: u64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(fail()),
        };
        let millis = number
            .checked_mul(per_unit)
            .ok_or_else(|| syn::Error::new(lit.span(), format!("duration {text:?} is too long")))?;
        Ok(DurationArg { lit, millis })
    }
}
