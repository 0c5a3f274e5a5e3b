//! Checks that need the whole picture: the arguments against the function they annotate.

use proc_macro2::Span;
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{
    Expr, FnArg, GenericArgument, Ident, ItemFn, Lifetime, Pat, PathArguments, ReturnType, Type,
    TypeParamBound,
};

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
    /// `detach`: the span of the flag, which the body's `Send + 'static` errors point at.
    pub detach: Option<Span>,
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

    if let Some(detach) = args.detach {
        if let Some(tx) = &args.transaction {
            errors.push(syn::Error::new(
                detach,
                format!(
                    "`detach` and `transaction = {tx}` do not combine: a transactional call's \
                     claim, body and completion commit together or not at all, so a caller that \
                     goes away leaves nothing half done; remove `detach` (or remove \
                     `transaction` to run the body detached, in lease mode)"
                ),
            ));
        }
        for input in &func.sig.inputs {
            if let Some(error) = borrowed_input(input) {
                errors.push(error);
            }
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
        detach: args.detach,
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

/// Under `detach`, the error for a parameter the detached body could not own: a reference, or a
/// type with a lifetime other than `'static`. It covers the whole parameter.
fn borrowed_input(input: &FnArg) -> Option<syn::Error> {
    const CLONE: &str = " (clone it before the call if the caller keeps using it)";
    let (written, borrow, fix) = match input {
        FnArg::Receiver(receiver) => (
            tokens_text(receiver),
            borrow_in(&receiver.ty)?,
            "take `self: Arc<Self>` (calling the method on a clone of the `Arc`) or `self` by \
             value"
                .to_owned(),
        ),
        FnArg::Typed(typed) => {
            let (pattern, ty) = (tokens_text(&typed.pat), &*typed.ty);
            let borrow = borrow_in(ty)?;
            let fix = match (ty, &borrow) {
                (Type::Reference(reference), Borrow::Reference) => {
                    let elem = &*reference.elem;
                    let text = tokens_text(elem);
                    match elem {
                        _ if reference.mutability.is_some() => format!(
                            "take `{pattern}: {text}` by value, or share it as \
                             `{pattern}: Arc<Mutex<{text}>>`"
                        ),
                        Type::Path(path) if path.qself.is_none() && path.path.is_ident("str") => {
                            format!("take `{pattern}: String` or `{pattern}: Arc<str>`{CLONE}")
                        }
                        Type::Slice(slice) => format!(
                            "take `{pattern}: Vec<{}>` or `{pattern}: Arc<{text}>`{CLONE}",
                            tokens_text(&*slice.elem)
                        ),
                        Type::TraitObject(_) => format!("take `{pattern}: Arc<{text}>`{CLONE}"),
                        _ => format!("take `{pattern}: Arc<{text}>` or `{pattern}: {text}`{CLONE}"),
                    }
                }
                (_, Borrow::Reference) => {
                    format!("take an owned value in place of the reference, or an `Arc<..>`{CLONE}")
                }
                (_, Borrow::Lifetime(lifetime)) => format!(
                    "take an owned value (`'static` in place of `{lifetime}`) or an \
                     `Arc<..>`{CLONE}"
                ),
            };
            (format!("{pattern}: {}", tokens_text(ty)), borrow, fix)
        }
    };
    let borrows = match borrow {
        Borrow::Reference => "borrows from the caller".to_owned(),
        Borrow::Lifetime(lifetime) => format!("borrows from the caller for `{lifetime}`"),
    };
    Some(syn::Error::new_spanned(
        input,
        format!(
            "`detach` needs owned parameters: a detached call's body can outlive its caller, \
             and `{written}` {borrows}; {fix}"
        ),
    ))
}

/// What a `'static` task cannot hold.
enum Borrow {
    /// A reference without `'static`.
    Reference,
    /// A lifetime other than `'static`, such as the `'a` of `Cow<'a, str>`.
    Lifetime(String),
}

/// The first borrow in `ty`, if any. Function pointer types and `Fn(..)` bounds are skipped: the
/// references in their arguments are bound by the type itself (`fn(&str)` is `'static`).
fn borrow_in(ty: &Type) -> Option<Borrow> {
    match ty {
        Type::Reference(reference) => match &reference.lifetime {
            Some(lifetime) if lifetime.ident == "static" => borrow_in(&reference.elem),
            _ => Some(Borrow::Reference),
        },
        Type::Array(array) => borrow_in(&array.elem),
        Type::Slice(slice) => borrow_in(&slice.elem),
        Type::Paren(paren) => borrow_in(&paren.elem),
        Type::Group(group) => borrow_in(&group.elem),
        Type::Ptr(pointer) => borrow_in(&pointer.elem),
        Type::Tuple(tuple) => tuple.elems.iter().find_map(borrow_in),
        Type::Path(path) => {
            let qself = path.qself.as_ref().and_then(|qself| borrow_in(&qself.ty));
            qself.or_else(|| borrow_in_path(&path.path))
        }
        Type::TraitObject(object) => borrow_in_bounds(object.bounds.iter()),
        Type::ImplTrait(bounds) => borrow_in_bounds(bounds.bounds.iter()),
        _ => None,
    }
}

fn borrow_in_path(path: &syn::Path) -> Option<Borrow> {
    path.segments
        .iter()
        .find_map(|segment| match &segment.arguments {
            PathArguments::AngleBracketed(generics) => {
                generics.args.iter().find_map(|argument| match argument {
                    GenericArgument::Lifetime(lifetime) => non_static(lifetime),
                    GenericArgument::Type(ty) => borrow_in(ty),
                    GenericArgument::AssocType(assoc) => borrow_in(&assoc.ty),
                    GenericArgument::Constraint(constraint) => {
                        borrow_in_bounds(constraint.bounds.iter())
                    }
                    _ => None,
                })
            }
            _ => None,
        })
}

fn borrow_in_bounds<'a>(mut bounds: impl Iterator<Item = &'a TypeParamBound>) -> Option<Borrow> {
    bounds.find_map(|bound| match bound {
        TypeParamBound::Lifetime(lifetime) => non_static(lifetime),
        // `for<'a> Trait<'a>` binds its own lifetimes.
        TypeParamBound::Trait(bound) if bound.lifetimes.is_none() => borrow_in_path(&bound.path),
        _ => None,
    })
}

fn non_static(lifetime: &Lifetime) -> Option<Borrow> {
    (lifetime.ident != "static").then(|| Borrow::Lifetime(lifetime.to_string()))
}

/// Tokens as a reader would write them: `Cow<'a, str>`, not `Cow < 'a , str >`.
fn tokens_text(tokens: &impl ToTokens) -> String {
    let spaced = tokens.to_token_stream().to_string();
    let mut text = String::with_capacity(spaced.len());
    for piece in spaced.split(' ').filter(|piece| !piece.is_empty()) {
        let glued_after = text.ends_with(['<', '(', '[', '&']) || text.ends_with("::");
        let glued_before = piece.starts_with(['<', '>', ',', ')', ']', ';', ':'])
            || (piece.starts_with('(') && text.ends_with(|c: char| c.is_alphanumeric()));
        if !text.is_empty() && !glued_after && !glued_before {
            text.push(' ');
        }
        text.push_str(piece);
    }
    text
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
