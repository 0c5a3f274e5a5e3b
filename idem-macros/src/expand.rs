//! Writing the code: the original function, its body wrapped in one idempotent call.

use proc_macro2::{Delimiter, Ident, Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{ItemFn, Token};

use crate::attr::Args;
use crate::template::Segment;
use crate::validate::{result_types, validate, Validated};

/// The module of idem-core that generated code calls: the version of the contract between this
/// macro and the runtime is in its name (see idem-core's `private.rs`).
const PRIVATE: &str = "__private_v1";

/// Parse, validate, expand. On an error in the attribute, the error is emitted next to a
/// fallback of the function with the signature callers expect (see [`fallback`]), so the user
/// sees the attribute's error and not a cascade in every caller.
pub(crate) fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        // A function whose body does not parse keeps syn's own error, which points into it.
        Err(error) if is_fn(&item) => return with_error(item, error),
        Err(_) => {
            let span = item
                .clone()
                .into_iter()
                .next()
                .map_or_else(Span::call_site, |t| t.span());
            let error = syn::Error::new(
                span,
                "`#[idempotent]` goes on an `async fn` that returns `Result<T, E>`",
            );
            return with_error(item, error);
        }
    };
    let args = match syn::parse2::<Args>(args) {
        Ok(args) => args,
        Err(error) => return fallback(func, None, error),
    };
    let krate = args.krate.clone();
    match validate(args, func.clone()) {
        Ok(validated) => expand(validated),
        Err(error) => fallback(func, krate, error),
    }
}

/// Whether `item` is a function (a `fn` token before its body), however malformed.
fn is_fn(item: &TokenStream) -> bool {
    item.clone()
        .into_iter()
        .take_while(|t| !matches!(t, TokenTree::Group(g) if g.delimiter() == Delimiter::Brace))
        .any(|t| matches!(t, TokenTree::Ident(i) if i == "fn"))
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    quote!(#item #error)
}

/// The error, plus the function as callers expect it after expansion: `async`, returning
/// `Idempotent<T, E>`, with a body that adds no errors of its own (as thiserror's fallback impls
/// and tokio's default-config expansion do). A function whose return type is not `Result<T, E>`
/// has no such signature, and is emitted as written.
fn fallback(mut func: ItemFn, krate: Option<syn::Path>, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    let Ok((ok_ty, err_ty, output_span)) = result_types(&func.sig.output, &func.sig) else {
        return quote!(#func #error);
    };
    let krate = krate.map_or_else(|| quote!(::idem_core), |path| path.to_token_stream());
    func.sig.asyncness = Some(Token![async](func.sig.fn_token.span));
    func.sig.output = syn::parse2(quote_spanned! {output_span=>
        -> ::core::result::Result<#krate::Outcome<#ok_ty>, #krate::Error<#err_ty>>
    })
    .expect("generated return type parses");
    func.block = syn::parse2(quote!({
        ::core::unreachable!("`#[idempotent]` failed to expand; see the error on its attribute")
    }))
    .expect("generated body parses");
    func.attrs
        .push(syn::parse_quote!(#[allow(unused_variables, unused_mut)]));
    quote!(#func #error)
}

fn expand(v: Validated) -> TokenStream {
    let Validated {
        mut func,
        template,
        scope,
        store,
        lease,
        keep,
        wait,
        fingerprint,
        clients,
        replay,
        detach,
        transaction,
        krate,
        ok_ty,
        err_ty,
        output_span,
    } = v;
    let krate = krate.map_or_else(|| quote!(::idem_core), |path| path.to_token_stream());
    let private = Ident::new(PRIVATE, Span::call_site());
    let private = quote!(#krate::#private);

    // The key: one `format_args!` over the template, each placeholder an expression, escaped
    // (see `Template::reserved`) when the template has separators to protect.
    let lit_span = template.lit.span();
    let reserved = template.reserved();
    let mut format = String::new();
    let mut values = Vec::new();
    for segment in &template.segments {
        match segment {
            Segment::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
            Segment::Placeholder(placeholder) => {
                format.push_str("{}");
                let span = template.span_of(placeholder.range.clone());
                let root = Ident::new(placeholder.root(), span);
                let fields = placeholder.path[1..]
                    .iter()
                    .map(|field| match field.parse::<u32>() {
                        Ok(index) => syn::Index { index, span }.to_token_stream(),
                        Err(_) => Ident::new(field, span).to_token_stream(),
                    });
                let value = quote_spanned!(span=> &#root #(.#fields)*);
                values.push(if reserved.is_empty() {
                    value
                } else {
                    quote_spanned!(span=> #private::Escaped(#value, #reserved))
                });
            }
        }
    }
    let key = quote_spanned! {lit_span=>
        #private::render_key(::core::format_args!(#format #(, #values)*))
    };

    let store_span = store.span();
    // Two steps, so a temporary in the expression (`&app.store`, `app.store()`) lives for the
    // whole call: `let x = &(expr);` extends it, a function argument would not. Lease mode runs
    // on `&dyn Store` (one instance of the runtime for every store type); transactional mode on
    // the concrete store, whose transaction type the body names.
    let as_store = if transaction.is_some() {
        quote_spanned!(store_span=> #private::as_transactional(__idem_store_ref))
    } else {
        quote_spanned!(store_span=> #private::as_store(__idem_store_ref))
    };
    let store = if detach.is_some() {
        // A detached call keeps a handle of its own to the store (the runtime takes another
        // for its task): the borrow of the store expression (`app.store`) ends with this
        // statement, before the body takes the parameters along.
        quote_spanned! {store_span=>
            let __idem_shared = #private::Store::shared(#private::as_store(&(#store)));
            let __idem_store = &*__idem_shared;
        }
    } else {
        quote_spanned! {store_span=>
            let __idem_store_ref = &(#store);
            let __idem_store = #as_store;
        }
    };

    let millis = |arg: &Option<crate::duration::DurationArg>, method: &str| {
        arg.as_ref().map(|arg| {
            let method = Ident::new(method, Span::call_site());
            let ms = arg.millis;
            quote!(.#method(#private::Duration::from_millis(#ms)))
        })
    };
    let lease = millis(&lease, "lease");
    let keep = millis(&keep, "keep");
    let wait = millis(&wait, "wait");

    let fingerprint = (!fingerprint.is_empty()).then(|| {
        let fields = fingerprint.iter().map(|ident| {
            let name = ident.to_string();
            quote_spanned!(ident.span()=> .field(#name, &#ident)?)
        });
        quote! {
            let __idem_call = #private::with_fingerprint(
                __idem_call,
                (|| -> #private::Result<#private::Fingerprint, #private::CodecError> {
                    #private::Result::Ok(#private::Fingerprint::builder() #(#fields)* .finish())
                })(),
            );
        }
    });

    let name = func.sig.ident.to_string();
    // The key's scope: `scope = ".."`, or the function's name (not its module path, so moving
    // the function keeps its records; renaming it does not).
    let scope = scope.map_or_else(|| name.clone(), |lit| lit.value());
    // `clients(..)`: inside the claimed body, each named client becomes its keyed view.
    let rebind = clients.iter().map(|ident| {
        quote_spanned! {ident.span()=>
            let #ident = #private::keyed(&#ident);
        }
    });
    let body = &func.block.stmts;
    let body = quote!(#(#rebind)* #(#body)*);
    let fake_return = quote! {
        #[allow(
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::needless_return,
            clippy::let_unit_value
        )]
        if false {
            let __idem_unreachable: #private::Result<#ok_ty, #err_ty> = loop {};
            return __idem_unreachable;
        }
    };
    // `replay` is spanned on `T`, so a non-serializable output is reported there, once.
    let codec = if replay {
        quote_spanned!(ok_ty.span()=> #private::replay_codec::<#ok_ty>())
    } else {
        quote!(#private::NoReplay)
    };
    // The body, as an async block that borrows the parameters; the runtime runs it only once the
    // key is claimed.
    let run = match (&transaction, detach) {
        (None, None) => quote! {
            #private::run(__idem_call, #codec, async { #fake_return #body }).await
        },
        // Detached, the body takes its parameters along into the call's task. Spanned on
        // `detach`: a body that is not `Send + 'static` is reported there (the compiler's note
        // points at the value in the body that makes it so).
        (None, Some(detach)) => quote_spanned! {detach=>
            let __idem_body = async move { #fake_return #body };
            __idem_call.run_detached_with(#codec, __idem_body).await
        },
        // Spanned on the store: a store without transactions is reported there, once (the
        // compiler folds every use of it in this expansion into that error). The body keeps
        // its own spans.
        (Some(tx), _) => quote_spanned! {store_span=>
            // The runtime claims in a new transaction and hands it over; the body gives it back
            // with its result, to be committed with the completion or rolled back.
            let (__idem_tx_in, __idem_tx_out) = #private::handoff();
            #private::run_in_transaction(__idem_call, #codec, __idem_tx_in, async {
                let mut __idem_tx = __idem_tx_out.recv().await;
                let __idem_result = {
                    let #tx = &mut __idem_tx;
                    async { #fake_return #body }.await
                };
                (__idem_tx, __idem_result)
            })
            .await
        },
    };
    let new_body = quote! {{
        #store
        // Built in its own statement: the key's `format_args!` temporaries are not `Send` and
        // must not live across the `.await` below.
        let __idem_call = #private::call(
            __idem_store,
            #key,
            ::core::concat!(::core::module_path!(), "::", #name),
            #scope,
        )
        #lease #keep #wait;
        #fingerprint
        #run
    }};
    func.block = syn::parse2(new_body).expect("generated body parses");
    let output = quote_spanned! {output_span=>
        -> ::core::result::Result<#krate::Outcome<#ok_ty>, #krate::Error<#err_ty>>
    };
    func.sig.output = syn::parse2(output).expect("generated return type parses");
    func.into_token_stream()
}
