//! Parsing `#[idempotent(...)]`'s arguments into [`Args`], keeping every value's span.

use proc_macro2::Span;
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

use crate::duration::DurationArg;

mod kw {
    syn::custom_keyword!(key);
    syn::custom_keyword!(scope);
    syn::custom_keyword!(store);
    syn::custom_keyword!(lease);
    syn::custom_keyword!(keep);
    syn::custom_keyword!(fingerprint);
    syn::custom_keyword!(replay);
    syn::custom_keyword!(wait);
    syn::custom_keyword!(detach);
    syn::custom_keyword!(transaction);
    syn::custom_keyword!(clients);
}

/// Every option the attribute takes, as written, in the order the docs list them: the one list
/// that the error messages quote and the parser's tests check against (and against the docs).
pub(crate) const OPTIONS: &[&str] = &[
    "key",
    "scope",
    "store",
    "lease",
    "keep",
    "fingerprint(..)",
    "replay",
    "wait",
    "detach",
    "transaction",
    "clients(..)",
    "crate",
];

/// "`key`, `store`, ... or `crate`", for messages.
pub(crate) fn options_list() -> String {
    let quoted: Vec<String> = OPTIONS.iter().map(|o| format!("`{o}`")).collect();
    let (last, rest) = quoted.split_last().expect("options exist");
    format!("{} or {last}", rest.join(", "))
}

/// The attribute's arguments, as written. Each is set at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub key: Option<LitStr>,
    pub scope: Option<LitStr>,
    pub store: Option<Expr>,
    pub lease: Option<DurationArg>,
    pub keep: Option<DurationArg>,
    pub wait: Option<DurationArg>,
    pub fingerprint: Option<ParamList>,
    pub clients: Option<ParamList>,
    pub replay: Option<Span>,
    pub detach: Option<Span>,
    pub transaction: Option<Ident>,
    pub krate: Option<syn::Path>,
}

/// `fingerprint(a, b)` or `clients(a, b)`: the keyword's span and the named parameters.
pub(crate) struct ParamList {
    pub span: Span,
    pub params: Vec<Ident>,
}

/// Stores `value` in `slot`, or reports the second occurrence of an option at `span`.
fn set_once<T>(slot: &mut Option<T>, value: T, name: &str, span: Span) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            span,
            format!("`{name}` is given more than once; keep one"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

/// A flag (`replay`, `detach`): the keyword alone, no value.
fn flag(input: ParseStream, name: &str) -> syn::Result<()> {
    if input.peek(Token![=]) {
        return Err(syn::Error::new(
            input.span(),
            format!("`{name}` is a flag and takes no value: write `{name}`"),
        ));
    }
    Ok(())
}

fn string_value(input: ParseStream, name: &str, example: &str) -> syn::Result<LitStr> {
    input.parse::<Token![=]>()?;
    let expr: Expr = input.parse()?;
    match expr {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new(
            other.span(),
            format!("`{name}` takes a string literal, like `{name} = {example}`"),
        )),
    }
}

impl Parse for Args {
    fn parse(input: ParseStream) -> syn::Result<Args> {
        let mut args = Args::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            let span = input.span();
            if lookahead.peek(kw::key) {
                input.parse::<kw::key>()?;
                input.parse::<Token![=]>()?;
                let expr: Expr = input.parse()?;
                let lit = match expr {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(lit), ..
                    }) => lit,
                    other => {
                        return Err(syn::Error::new(
                            other.span(),
                            "`key` must be a string literal template, like \
                             `key = \"reminder:{user_id}:{day}\"`; to use a computed key, pass it \
                             as a parameter and write `key = \"{param}\"`",
                        ))
                    }
                };
                set_once(&mut args.key, lit, "key", span)?;
            } else if lookahead.peek(kw::scope) {
                input.parse::<kw::scope>()?;
                let lit = string_value(input, "scope", "\"reminders\"")?;
                set_once(&mut args.scope, lit, "scope", span)?;
            } else if lookahead.peek(kw::store) {
                input.parse::<kw::store>()?;
                input.parse::<Token![=]>()?;
                let expr: Expr = input.parse()?;
                set_once(&mut args.store, expr, "store", span)?;
            } else if lookahead.peek(kw::lease) {
                input.parse::<kw::lease>()?;
                let lit = string_value(input, "lease", "\"30s\"")?;
                set_once(&mut args.lease, DurationArg::parse(lit)?, "lease", span)?;
            } else if lookahead.peek(kw::keep) {
                input.parse::<kw::keep>()?;
                let lit = string_value(input, "keep", "\"7d\"")?;
                set_once(&mut args.keep, DurationArg::parse(lit)?, "keep", span)?;
            } else if lookahead.peek(kw::wait) {
                input.parse::<kw::wait>()?;
                let lit = string_value(input, "wait", "\"10s\"")?;
                set_once(&mut args.wait, DurationArg::parse(lit)?, "wait", span)?;
            } else if lookahead.peek(kw::fingerprint) {
                input.parse::<kw::fingerprint>()?;
                let list = param_list(input, "fingerprint", "amount, currency", span)?;
                set_once(&mut args.fingerprint, list, "fingerprint", span)?;
            } else if lookahead.peek(kw::clients) {
                input.parse::<kw::clients>()?;
                let list = param_list(input, "clients", "payments, mailer", span)?;
                set_once(&mut args.clients, list, "clients", span)?;
            } else if lookahead.peek(kw::replay) {
                input.parse::<kw::replay>()?;
                flag(input, "replay")?;
                set_once(&mut args.replay, span, "replay", span)?;
            } else if lookahead.peek(kw::detach) {
                input.parse::<kw::detach>()?;
                flag(input, "detach")?;
                set_once(&mut args.detach, span, "detach", span)?;
            } else if lookahead.peek(kw::transaction) {
                input.parse::<kw::transaction>()?;
                input.parse::<Token![=]>()?;
                let ident: Ident = input.parse().map_err(|e| {
                    syn::Error::new(
                        e.span(),
                        "`transaction` names the binding the body gets the open transaction \
                         as, like `transaction = tx`",
                    )
                })?;
                set_once(&mut args.transaction, ident, "transaction", span)?;
            } else if lookahead.peek(Token![crate]) {
                input.parse::<Token![crate]>()?;
                let lit = string_value(input, "crate", "\"my_idem\"")?;
                let path = lit.parse_with(syn::Path::parse_mod_style).map_err(|_| {
                    syn::Error::new(
                        lit.span(),
                        "`crate` takes the path of the renamed idem-core dependency, like \
                         `crate = \"my_idem\"`",
                    )
                })?;
                set_once(&mut args.krate, path, "crate", span)?;
            } else if input.peek(Ident) {
                let unknown: Ident = input.parse()?;
                return Err(syn::Error::new(
                    unknown.span(),
                    format!(
                        "unknown option `{unknown}`; expected one of {}",
                        options_list()
                    ),
                ));
            } else {
                // Not `lookahead.error()`: its list would be a second spelling of the options.
                return Err(syn::Error::new(
                    span,
                    format!("expected an option, one of {}", options_list()),
                ));
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

/// `(a, b)` after `fingerprint` or `clients`.
fn param_list(input: ParseStream, name: &str, example: &str, span: Span) -> syn::Result<ParamList> {
    if !input.peek(syn::token::Paren) {
        return Err(syn::Error::new(
            span,
            format!("`{name}` lists parameters in parentheses, like `{name}({example})`"),
        ));
    }
    let content;
    syn::parenthesized!(content in input);
    let params: Punctuated<Ident, Token![,]> =
        content.parse_terminated(Ident::parse_any_param, Token![,])?;
    Ok(ParamList {
        span,
        params: params.into_iter().collect(),
    })
}

/// Parameter names include `self`, which is a keyword to `syn`.
trait ParseAnyParam {
    fn parse_any_param(input: ParseStream) -> syn::Result<Ident>;
}

impl ParseAnyParam for Ident {
    fn parse_any_param(input: ParseStream) -> syn::Result<Ident> {
        if input.peek(Token![self]) {
            let token: Token![self] = input.parse()?;
            return Ok(Ident::new("self", token.span));
        }
        input.parse()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each listed option is one the parser takes (a value is supplied where it needs one), so
    /// the list in the messages is the parser's list.
    #[test]
    fn every_listed_option_parses() {
        for option in OPTIONS {
            let written = match *option {
                "key" => "key = \"k:{id}\"".to_owned(),
                "scope" => "scope = \"reminders\"".to_owned(),
                "store" => "store = app.store".to_owned(),
                "lease" | "keep" | "wait" => format!("{option} = \"1s\""),
                "fingerprint(..)" => "fingerprint(id)".to_owned(),
                "clients(..)" => "clients(mailer)".to_owned(),
                "replay" | "detach" => (*option).to_owned(),
                "transaction" => "transaction = tx".to_owned(),
                "crate" => "crate = \"my_idem\"".to_owned(),
                other => panic!("the test does not know how to write `{other}`"),
            };
            syn::parse_str::<Args>(&written)
                .unwrap_or_else(|e| panic!("`{written}` does not parse: {e}"));
        }
    }

    /// The crate docs that users read (idem-core's) list every option.
    #[test]
    fn the_docs_list_every_option() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../idem-core/src/lib.rs"
        ))
        .expect("idem-core's lib.rs");
        for option in OPTIONS {
            let name = option.trim_end_matches("(..)");
            let listed = docs.lines().any(|line| {
                let Some(text) = line.strip_prefix("//!     ") else {
                    return false;
                };
                text.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with([' ', '(', ',']))
            });
            assert!(listed, "idem-core's crate docs do not list `{option}`");
        }
    }
}
