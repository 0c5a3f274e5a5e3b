//! Where a record lives in the table: the key schema and the names of the attributes, and how
//! a key (with its scope) and a journal entry become the item's key.

use aws_sdk_dynamodb::types::AttributeValue;
use idem_core::{Key, DEFAULT_SCOPE};
use std::collections::HashMap;
use std::fmt;

/// Separates a scope from its key in an item's id: keys and scopes hold no control characters,
/// so the id reads back unambiguously. The default scope writes the key alone, as Powertools
/// writes its ids, so a table can be shared.
const SCOPE_SEPARATOR: char = '\u{1}';

/// Separates a record's id from the name of one of its journal entries.
const EFFECT_SEPARATOR: char = '\u{2}';

/// The table's layout: its key schema and the names of the attributes idem reads and writes.
///
/// The default is the layout of Powertools for AWS Lambda's idempotency utility: a partition key
/// `id`, and `expiration` (epoch seconds, the table's TTL attribute), `in_progress_expiration`
/// (epoch milliseconds), `status` (`INPROGRESS`, `COMPLETED`), `data` (the stored answer) and
/// `validation` (the inputs' fingerprint). A function moved from Python to Rust can keep its
/// table: idem reads the records Powertools wrote (a completed one is a duplicate with its
/// stored answer) and writes records in the same shape, with a few attributes of its own
/// (`idem_fence`, `idem_until`, `idem_completed`, `idem_token`, `idem_holder`).
///
/// ```
/// use idem_store_dynamodb::TableLayout;
///
/// // Powertools' layout with a sort key: every record under one partition value.
/// let layout = TableLayout::default()
///     .partition_key("pk")
///     .sort_key("sk", "idempotency#orders")
///     .unwrap();
/// assert_eq!(layout.partition_key_name(), "pk");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct TableLayout {
    pub(crate) partition_key: String,
    /// The sort key's name and the partition value every record shares.
    pub(crate) sort_key: Option<(String, String)>,
    pub(crate) expiration: String,
    pub(crate) in_progress_expiration: String,
    pub(crate) status: String,
    pub(crate) data: String,
    pub(crate) validation: String,
}

impl Default for TableLayout {
    fn default() -> Self {
        TableLayout {
            partition_key: "id".into(),
            sort_key: None,
            expiration: "expiration".into(),
            in_progress_expiration: "in_progress_expiration".into(),
            status: "status".into(),
            data: "data".into(),
            validation: "validation".into(),
        }
    }
}

impl fmt::Debug for TableLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableLayout")
            .field("partition_key", &self.partition_key)
            .field("sort_key", &self.sort_key)
            .field("expiration", &self.expiration)
            .finish_non_exhaustive()
    }
}

/// A layout idem cannot use: two attributes under one name, or an empty name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidLayout(String);

impl fmt::Display for InvalidLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidLayout {}

/// The attributes idem writes besides the layout's.
pub(crate) mod own {
    /// The claim's fencing token.
    pub const FENCE: &str = "idem_fence";
    /// When the record stops counting, in epoch milliseconds: the lease's end while claimed,
    /// the end of `keep` once completed.
    pub const UNTIL: &str = "idem_until";
    /// When the work completed, in epoch milliseconds.
    pub const COMPLETED: &str = "idem_completed";
    /// The claim's token (a claim sent again after its answer was lost is its own).
    pub const TOKEN: &str = "idem_token";
    /// Who claimed it (`host:pid`).
    pub const HOLDER: &str = "idem_holder";
    /// All of them, for the layout's check.
    pub const ALL: [&str; 5] = [FENCE, UNTIL, COMPLETED, TOKEN, HOLDER];
}

impl TableLayout {
    /// The partition key's name (default `id`).
    pub fn partition_key(mut self, name: &str) -> TableLayout {
        self.partition_key = name.into();
        self
    }

    /// Keeps every record under one partition value, `partition_value`, with the record's id in
    /// the sort key `name`: Powertools' `sort_key_attr` layout (its partition value is
    /// `idempotency#<function name>`).
    pub fn sort_key(
        mut self,
        name: &str,
        partition_value: &str,
    ) -> Result<TableLayout, InvalidLayout> {
        if partition_value.is_empty() {
            return Err(InvalidLayout(
                "a sort-key layout needs a partition value".into(),
            ));
        }
        self.sort_key = Some((name.into(), partition_value.into()));
        self.validated()
    }

    /// The TTL attribute's name (default `expiration`, epoch seconds).
    pub fn expiration_attr(mut self, name: &str) -> TableLayout {
        self.expiration = name.into();
        self
    }

    /// The name of the in-progress lease's end (default `in_progress_expiration`, epoch ms).
    pub fn in_progress_expiration_attr(mut self, name: &str) -> TableLayout {
        self.in_progress_expiration = name.into();
        self
    }

    /// The status attribute's name (default `status`).
    pub fn status_attr(mut self, name: &str) -> TableLayout {
        self.status = name.into();
        self
    }

    /// The stored answer's attribute name (default `data`).
    pub fn data_attr(mut self, name: &str) -> TableLayout {
        self.data = name.into();
        self
    }

    /// The fingerprint's attribute name (default `validation`).
    pub fn validation_attr(mut self, name: &str) -> TableLayout {
        self.validation = name.into();
        self
    }

    /// The partition key's name.
    pub fn partition_key_name(&self) -> &str {
        &self.partition_key
    }

    /// The sort key's name, when the layout has one.
    pub fn sort_key_name(&self) -> Option<&str> {
        self.sort_key.as_ref().map(|(name, _)| name.as_str())
    }

    /// The TTL attribute's name.
    pub fn expiration_name(&self) -> &str {
        &self.expiration
    }

    /// This layout, if every attribute has a name of its own and none is empty.
    pub fn validated(self) -> Result<TableLayout, InvalidLayout> {
        let mut names: Vec<&str> = vec![
            &self.partition_key,
            &self.expiration,
            &self.in_progress_expiration,
            &self.status,
            &self.data,
            &self.validation,
        ];
        if let Some((sort, _)) = &self.sort_key {
            names.push(sort);
        }
        names.extend(own::ALL);
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() {
                return Err(InvalidLayout("an attribute name may not be empty".into()));
            }
            if names[..i].contains(name) {
                return Err(InvalidLayout(format!(
                    "the attribute name {name:?} is used twice in the table layout"
                )));
            }
        }
        Ok(self)
    }

    /// The item key of `id`.
    pub(crate) fn item_key(&self, id: String) -> HashMap<String, AttributeValue> {
        let mut key = HashMap::with_capacity(2);
        match &self.sort_key {
            None => {
                key.insert(self.partition_key.clone(), AttributeValue::S(id));
            }
            Some((sort, value)) => {
                key.insert(self.partition_key.clone(), AttributeValue::S(value.clone()));
                key.insert(sort.clone(), AttributeValue::S(id));
            }
        }
        key
    }

    /// The attribute that holds an item's id.
    pub(crate) fn id_attr(&self) -> &str {
        self.sort_key
            .as_ref()
            .map_or(&self.partition_key, |(sort, _)| sort)
    }
}

/// The id of `key`'s record: the key alone in the default scope, else the scope, a separator
/// and the key.
pub(crate) fn record_id(key: &Key) -> String {
    if key.scope() == DEFAULT_SCOPE {
        key.as_str().to_owned()
    } else {
        format!("{}{SCOPE_SEPARATOR}{}", key.scope(), key.as_str())
    }
}

/// The id of the journal entry of `effect` under `key`.
pub(crate) fn effect_id(key: &Key, effect: &str) -> String {
    format!("{}{EFFECT_SEPARATOR}{effect}", record_id(key))
}

/// Whether an id names a journal entry (else a record).
pub(crate) fn is_effect(id: &str) -> bool {
    id.contains(EFFECT_SEPARATOR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_scope_writes_the_key_alone_and_others_stay_apart() {
        let plain = Key::new("order-1").unwrap();
        assert_eq!(record_id(&plain), "order-1");
        let scoped = Key::new("order-1").unwrap().with_scope("mail").unwrap();
        assert_eq!(record_id(&scoped), "mail\u{1}order-1");
        assert!(!is_effect(&record_id(&scoped)));
        assert!(is_effect(&effect_id(&scoped, "send")));
    }

    #[test]
    fn a_layout_naming_one_attribute_twice_is_refused() {
        let twice = TableLayout::default().status_attr("data").validated();
        assert!(twice.unwrap_err().to_string().contains("\"data\""));
        let own = TableLayout::default().data_attr("idem_fence").validated();
        assert!(own.is_err(), "idem's own attributes are taken too");
        assert!(TableLayout::default().validated().is_ok());
    }
}
