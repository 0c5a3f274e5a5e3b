//! Writing the code: the original function, its body wrapped in one idempotent call.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::ItemFn;

use crate::attr::Args;
use crate::template::Segment;
use crate::validate::{validate, Validated};

/// Parse, validate, expand. On any error the function is emitted unchanged next to the error,
/// so the rest of the crate still type-checks and the user sees one message.
pub(crate) fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    let func: ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
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
    let parsed = syn::parse2::<Args>(args).and_then(|args| validate(args, func));
    match parsed {
        Ok(validated) => expand(validated),
        Err(error) => with_error(item, error),
    }
}

fn with_error(item: TokenStream, error: syn::Error) -> TokenStream {
    let error = error.to_compile_error();
    quote!(#item #error)
}

fn expand(v: Validated) -> TokenStream {
    let Validated {
        mut func,
        template,
        store,
        lease,
        keep,
        wait,
        fingerprint,
        clients,
        replay,
        transaction,
        krate,
        ok_ty,
        err_ty,
        output_span,
    } = v;
    let krate = krate.map_or_else(|| quote!(::idem_core), |path| path.to_token_stream());
    let private = quote!(#krate::__private);

    // The key: one `format_args!` over the template, each placeholder an expression.
    let lit_span = template.lit.span();
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
                values.push(quote_spanned!(span=> &#root #(.#fields)*));
            }
        }
    }
    let key = quote_spanned! {lit_span=>
        #private::render_key(::core::format_args!(#format #(, #values)*))
    };

    let store_span = store.span();
    // Two steps, so a temporary in the expression (`&app.store`, `app.store()`) lives for the
    // whole call: `let x = &(expr);` extends it, a function argument would not.
    let store = quote_spanned! {store_span=>
        let __idem_store_ref = &(#store);
        let __idem_store: &dyn #private::Store = #private::as_store(__idem_store_ref);
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
            .fingerprint_result((|| -> #private::Result<#private::Fingerprint, #private::CodecError> {
                #private::Result::Ok(#private::Fingerprint::builder() #(#fields)* .finish())
            })())
        }
    });

    let name = func.sig.ident.to_string();
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
    // `replay` is spanned on `T`, so a non-serializable output is reported there; a store
    // without transactions is reported on the `store` expression.
    let run = match &transaction {
        None => {
            let work = quote!(async { #fake_return #body });
            if replay {
                quote_spanned!(ok_ty.span()=> __idem_call.run_replay(#work).await)
            } else {
                quote!(__idem_call.run(#work).await)
            }
        }
        Some(tx) => {
            // Claim in a transaction, run the body with it, then commit or roll back; all in
            // the call's span. (Spelled out rather than passing the body as a closure: a
            // closure borrowing the transaction would make the future lose `Send`.)
            let codec = if replay {
                quote_spanned!(ok_ty.span()=> #private::JsonReplay)
            } else {
                quote!(#private::NoReplay)
            };
            let store = quote_spanned!(store_span=> #private::as_transactional(__idem_store_ref));
            quote! {
                let __idem_span = __idem_call.span();
                #private::Instrument::instrument(
                    async {
                        match __idem_call.begin_in_transaction(#store, #codec).await {
                            #private::Result::Err(__idem_error) => {
                                #private::Result::Err(__idem_error)
                            }
                            #private::Result::Ok(#private::TxBegun::Settled(__idem_outcome)) => {
                                #private::Result::Ok(__idem_outcome)
                            }
                            #private::Result::Ok(#private::TxBegun::Claimed(
                                mut __idem_tx,
                                __idem_pending,
                            )) => {
                                let __idem_result = {
                                    let #tx = &mut __idem_tx;
                                    #private::catch_unwind(__idem_pending.scope(async { #fake_return #body })).await
                                };
                                __idem_pending.finish(__idem_tx, __idem_result).await
                            }
                        }
                    },
                    __idem_span,
                )
                .await
            }
        }
    };
    let new_body = quote! {{
        #store
        // Built in its own statement: the key's `format_args!` temporaries are not `Send` and
        // must not live across the `.await` below.
        let __idem_call = #private::Call::from_rendered(__idem_store, #key)
            .name(::core::concat!(::core::module_path!(), "::", #name))
            #lease #keep #wait #fingerprint;
        #run
    }};
    func.block = syn::parse2(new_body).expect("generated body parses");
    let output = quote_spanned! {output_span=>
        -> ::core::result::Result<#krate::Outcome<#ok_ty>, #krate::Error<#err_ty>>
    };
    func.sig.output = syn::parse2(output).expect("generated return type parses");
    func.into_token_stream()
}
