//! What the pages read and act on: the records' store, the queue where there is one, and the
//! dashboard's secrets.

use std::sync::Arc;

use idem_core::Inspect;
use idem_queue::Queue;

use crate::auth::Auth;

#[derive(Clone)]
pub(crate) struct Source {
    pub records: Arc<dyn Inspect>,
    pub queue: Option<Queue>,
    pub auth: Arc<Auth>,
}
