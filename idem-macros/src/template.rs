//! Key templates: `"reminder:{user_id}:{day}"` split into literal text and placeholders.

use proc_macro2::Span;
use std::ops::Range;
use syn::LitStr;

/// One piece of a key template.
pub(crate) enum Segment {
    /// Text copied into the key as is (braces already unescaped).
    Text(String),
    /// `{param}` or `{param.field.sub}`.
    Placeholder(Placeholder),
}

pub(crate) struct Placeholder {
    /// `param`, then the field names.
    pub path: Vec<String>,
    /// Where the placeholder (braces included) sits in the template's text.
    pub range: Range<usize>,
}

impl Placeholder {
    pub fn root(&self) -> &str {
        &self.path[0]
    }
}

/// A parsed key template with the literal it came from.
pub(crate) struct Template {
    pub lit: LitStr,
    pub segments: Vec<Segment>,
}

impl Template {
    pub fn parse(lit: LitStr) -> syn::Result<Template> {
        let text = lit.value();
        if text.is_empty() {
            return Err(syn::Error::new(
                lit.span(),
                "the key template is empty; name the unit of work, like \
                 `key = \"reminder:{user_id}:{day}\"`",
            ));
        }
        let mut segments = Vec::new();
        let mut literal = String::new();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'{' if bytes.get(i + 1) == Some(&b'{') => {
                    literal.push('{');
                    i += 2;
                }
                b'}' if bytes.get(i + 1) == Some(&b'}') => {
                    literal.push('}');
                    i += 2;
                }
                b'}' => {
                    return Err(error_at(
                        &lit,
                        i..i + 1,
                        "unmatched `}` in the key template; write `}}` for a literal brace",
                    ))
                }
                b'{' => {
                    let Some(len) = text[i + 1..].find(['}', '{']) else {
                        return Err(error_at(
                            &lit,
                            i..text.len(),
                            "unclosed `{` in the key template; close the placeholder with `}`, \
                             or write `{{` for a literal brace",
                        ));
                    };
                    let close = i + 1 + len;
                    if bytes[close] == b'{' {
                        return Err(error_at(
                            &lit,
                            i..close,
                            "unclosed `{` in the key template; close the placeholder with `}`, \
                             or write `{{` for a literal brace",
                        ));
                    }
                    let range = i..close + 1;
                    let inner = &text[i + 1..close];
                    let placeholder = parse_placeholder(&lit, inner, range)?;
                    if !literal.is_empty() {
                        segments.push(Segment::Text(std::mem::take(&mut literal)));
                    }
                    segments.push(Segment::Placeholder(placeholder));
                    i = close + 1;
                }
                _ => {
                    let ch = text[i..].chars().next().unwrap_or_default();
                    literal.push(ch);
                    i += ch.len_utf8();
                }
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Text(literal));
        }
        let template = Template { lit, segments };
        template.check_separators()?;
        Ok(template)
    }

    /// Between two placeholders there must be text, and it must not start with `%`: the text's
    /// first character is what tells where a value ends (values are escaped so they never
    /// contain it), and `%` starts an escape.
    fn check_separators(&self) -> syn::Result<()> {
        for pair in self.segments.windows(2) {
            if let [Segment::Placeholder(a), Segment::Placeholder(b)] = pair {
                return Err(error_at(
                    &self.lit,
                    a.range.start..b.range.end,
                    &format!(
                        "placeholders `{}` and `{}` need text between them, or two different \
                         pairs of values would render the same key; write `{}:{}`",
                        &self.lit.value()[a.range.clone()],
                        &self.lit.value()[b.range.clone()],
                        &self.lit.value()[a.range.clone()],
                        &self.lit.value()[b.range.clone()],
                    ),
                ));
            }
        }
        for (i, segment) in self.segments.iter().enumerate() {
            let between = i > 0 && i + 1 < self.segments.len();
            if let Segment::Text(text) = segment {
                if between && text.starts_with('%') {
                    return Err(syn::Error::new(
                        self.lit.span(),
                        "text between placeholders may not start with `%`: `%` escapes \
                         characters inside the values; put another separator first, like `:%`",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The characters escaped inside interpolated values: the first character of the text
    /// between each two placeholders (what marks where a value ends), and `%` (which starts an
    /// escape), so distinct values always render distinct keys. Empty (nothing is escaped) when
    /// there is at most one placeholder.
    pub fn reserved(&self) -> String {
        let mut reserved = String::new();
        for (i, segment) in self.segments.iter().enumerate() {
            let between = i > 0 && i + 1 < self.segments.len();
            if let (true, Segment::Text(text)) = (between, segment) {
                let first = text.chars().next().expect("text segments are not empty");
                if !reserved.contains(first) {
                    reserved.push(first);
                }
            }
        }
        if !reserved.is_empty() {
            reserved.insert(0, '%');
        }
        reserved
    }

    pub fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Placeholder(p) => Some(p),
            Segment::Text(_) => None,
        })
    }

    /// The span of `range` inside the literal where the compiler can point there (nightly),
    /// else of the whole literal.
    pub fn span_of(&self, range: Range<usize>) -> Span {
        subspan(&self.lit, range)
    }
}

fn parse_placeholder(lit: &LitStr, inner: &str, range: Range<usize>) -> syn::Result<Placeholder> {
    let shown = &lit.value()[range.clone()];
    if inner.trim().is_empty() {
        return Err(error_at(
            lit,
            range,
            "empty placeholder `{}` in the key template; name a parameter inside it, like \
             `{user_id}`",
        ));
    }
    if let Some((_, spec)) = inner.split_once(':') {
        return Err(error_at(
            lit,
            range,
            &format!(
                "format spec `:{spec}` in placeholder `{shown}` is not supported; placeholders \
                 render with `Display`, so format the value in a parameter or a `Display` type"
            ),
        ));
    }
    let path: Vec<String> = inner.split('.').map(str::to_owned).collect();
    let valid = path.iter().all(|part| is_identifier(part));
    if !valid {
        return Err(error_at(
            lit,
            range,
            &format!(
                "placeholder `{shown}` is not a parameter name or field path; write `{{param}}` \
                 or `{{param.field}}`"
            ),
        ));
    }
    Ok(Placeholder { path, range })
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
        || s.parse::<u32>().is_ok() // tuple fields: `{pair.0}`
}

fn error_at(lit: &LitStr, range: Range<usize>, message: &str) -> syn::Error {
    syn::Error::new(subspan(lit, range), message)
}

/// Narrows the literal's span to `range` of its value. Only possible where the compiler offers
/// sub-spans (nightly) and the literal is written without escapes; otherwise the whole literal.
fn subspan(lit: &LitStr, range: Range<usize>) -> Span {
    let token = lit.token();
    let source = token.to_string();
    if source.len() == lit.value().len() + 2 && source.starts_with('"') {
        if let Some(span) = token.subspan(range.start + 1..range.end + 1) {
            return span;
        }
    }
    lit.span()
}
