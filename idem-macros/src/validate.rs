//! Checks that need the whole picture: the arguments against the function they annotate.

use proc_macro2::Span;
use syn::spanned::Spanned;
use syn::{Expr, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType, Type};

use crate::attr::Args;
use crate::duration::DurationArg;
use crate::template::Template;

/// Everything expansion needs, checked.
pub(crate) struct Validated {
    pub func: ItemFn,
    pub template: Template,
    /// `scope = ".."`, if given (else the function's name).
    pub scope: Option<syn::LitStr>,
    pub store: Expr,
    pub lease: Option<DurationArg>,
    pub keep: Option<DurationArg>,
    pub wait: Option<DurationArg>,
    pub fingerprint: Vec<Ident>,
    pub clients: Vec<Ident>,
    pub replay: bool,
    pub transaction: Option<Ident>,
    pub krate: Option<syn::Path>,
    /// `T` and `E` of the function's `Result<T, E>`, and the span of the return type.
    pub ok_ty: Type,
    pub err_ty: Type,
    pub output_span: Span,
}

/// Collects every error instead of stopping at the first, so one build shows them all.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

const USAGE: &str = "write `#[idempotent(key = \"job:{id}\", store = app.store)]`";

pub(crate) fn validate(args: Args, func: ItemFn) -> syn::Result<Validated> {
    let mut errors = Errors::default();

    if func.sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            func.sig.fn_token.span,
            "`#[idempotent]` needs an `async fn`: the claim is a store round trip; \
             write `async fn`",
        ));
    }
    let result = result_types(&func.sig.output, &func.sig);
    if let Err(e) = &result {
        errors.push(e.clone());
    }

    let params = parameters(&func);
    let template = match args.key {
        None => {
            errors.push(syn::Error::new(
                Span::call_site(),
                format!("missing `key`: {USAGE}"),
            ));
            None
        }
        Some(lit) => match Template::parse(lit) {
            Ok(template) => Some(template),
            Err(e) => {
                errors.push(e);
                None
            }
        },
    };
    if let Some(template) = &template {
        for placeholder in template.placeholders() {
            let root = placeholder.root();
            if !params.iter().any(|p| p == root) {
                errors.push(syn::Error::new(
                    template.span_of(placeholder.range.clone()),
                    unknown_param_message(
                        &format!(
                            "placeholder `{{{}}}` in the key",
                            placeholder.path.join(".")
                        ),
                        root,
                        &params,
                    ),
                ));
            }
        }
    }

    if args.store.is_none() {
        errors.push(syn::Error::new(
            Span::call_site(),
            format!(
                "missing `store`: name the store to claim keys in, like `store = app.store` or \
                 `store = self.store`; {USAGE}"
            ),
        ));
    }

    let fingerprint = check_list(
        args.fingerprint,
        "fingerprint",
        "list the inputs that must match when the key is reused, like \
         `fingerprint(amount, currency)`, or remove it",
        &params,
        &mut errors,
    );
    let clients = check_list(
        args.clients,
        "clients",
        "list the side-effect clients to hand the key to, like `clients(payments)`, or remove it",
        &params,
        &mut errors,
    );

    if let Some(tx) = &args.transaction {
        let name = tx.to_string();
        if params.contains(&name) {
            errors.push(syn::Error::new(
                tx.span(),
                format!(
                    "`transaction = {name}` would hide the parameter `{name}`; name the \
                     transaction binding something else, like `transaction = db_tx`"
                ),
            ));
        }
    }

    for (name, arg) in [
        ("lease", &args.lease),
        ("keep", &args.keep),
        ("wait", &args.wait),
    ] {
        if let Some(arg) = arg {
            if arg.millis == 0 {
                errors.push(syn::Error::new(
                    arg.lit.span(),
                    format!("`{name}` must be longer than zero"),
                ));
            }
        }
    }

    errors.finish()?;
    let (ok_ty, err_ty, output_span) = result?;
    Ok(Validated {
        template: template.expect("checked above"),
        scope: args.scope,
        store: args.store.expect("checked above"),
        lease: args.lease,
        keep: args.keep,
        wait: args.wait,
        fingerprint,
        clients,
        replay: args.replay.is_some(),
        transaction: args.transaction,
        krate: args.krate,
        ok_ty,
        err_ty,
        output_span,
        func,
    })
}

/// Checks a `fingerprint(..)`/`clients(..)` list: not empty, only parameters, no repeats.
fn check_list(
    list: Option<crate::attr::ParamList>,
    option: &str,
    when_empty: &str,
    params: &[String],
    errors: &mut Errors,
) -> Vec<Ident> {
    let Some(list) = list else {
        return Vec::new();
    };
    if list.params.is_empty() {
        errors.push(syn::Error::new(
            list.span,
            format!("`{option}()` names no parameter; {when_empty}"),
        ));
    }
    for (i, ident) in list.params.iter().enumerate() {
        let name = ident.to_string();
        if !params.contains(&name) {
            errors.push(syn::Error::new(
                ident.span(),
                unknown_param_message(&format!("`{option}({name})`"), &name, params),
            ));
        } else if list.params[..i].iter().any(|earlier| *earlier == name) {
            errors.push(syn::Error::new(
                ident.span(),
                format!("`{name}` is listed twice in `{option}(..)`; keep one"),
            ));
        }
    }
    list.params
}

/// The names a placeholder or `fingerprint` may use: `self` and each parameter bound to a name.
fn parameters(func: &ItemFn) -> Vec<String> {
    func.sig
        .inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Receiver(_) => Some("self".to_owned()),
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(pat) => Some(pat.ident.to_string()),
                _ => None,
            },
        })
        .collect()
}

fn unknown_param_message(what: &str, name: &str, params: &[String]) -> String {
    let mut message = format!("{what} names no parameter of this function");
    if let Some(close) = params
        .iter()
        .filter(|p| edit_distance(p, name) <= (name.len() / 3).max(1))
        .min_by_key(|p| edit_distance(p, name))
    {
        message.push_str(&format!("; did you mean `{close}`?"));
    } else if params.is_empty() {
        message.push_str("; the function takes no named parameters");
    } else {
        let list: Vec<String> = params.iter().map(|p| format!("`{p}`")).collect();
        message.push_str(&format!("; its parameters are {}", list.join(", ")));
    }
    message
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitute = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitute.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// `T` and `E` of a `Result<T, E>` return type.
pub(crate) fn result_types(
    output: &ReturnType,
    sig: &syn::Signature,
) -> syn::Result<(Type, Type, Span)> {
    let ty =
        match output {
            ReturnType::Type(_, ty) => ty,
            ReturnType::Default => return Err(syn::Error::new(
                sig.paren_token.span.close(),
                "`#[idempotent]` functions return `Result<T, E>`: add `-> Result<(), YourError>` \
                 (an `Err` releases the claim so the work can be retried)",
            )),
        };
    let not_result = |found: &str| {
        syn::Error::new(
            ty.span(),
            format!(
                "`#[idempotent]` functions return `Result<T, E>`, found {found}; the attribute \
                 turns it into `Result<idem_core::Outcome<T>, idem_core::Error<E>>` \
                 (an `Err` releases the claim so the work can be retried)"
            ),
        )
    };
    let Type::Path(path) = &**ty else {
        return Err(not_result("another type"));
    };
    let Some(last) = path.path.segments.last() else {
        return Err(not_result("another type"));
    };
    if last.ident != "Result" {
        return Err(not_result(&format!("`{}`", last.ident)));
    }
    let PathArguments::AngleBracketed(generics) = &last.arguments else {
        return Err(not_result("`Result` without type parameters"));
    };
    let types: Vec<&Type> = generics
        .args
        .iter()
        .filter_map(|arg| match arg {
            GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    match types[..] {
        [ok, err] => Ok((ok.clone(), err.clone(), ty.span())),
        _ => Err(syn::Error::new(
            ty.span(),
            "write both type parameters, `Result<T, E>`: an alias like `io::Result<T>` or \
             `anyhow::Result<T>` hides the error type the attribute needs to name",
        )),
    }
}
