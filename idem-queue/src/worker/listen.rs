//! Wake-up on new work: one `LISTEN` connection per [`Workers`](crate::Workers).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::Notify;

use crate::db::fragments::CHANNEL;

/// How long to wait before reconnecting a lost listener. Polling covers the gap.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// Listens for this queue's notifications (payload `name`) and wakes idle workers; reconnects
/// after failures, waking the workers then too, in case a notification was missed meanwhile.
/// `listening` says whether a notification sent now would reach the workers.
pub(crate) async fn listen(
    pool: PgPool,
    name: String,
    wake: Arc<Notify>,
    listening: Arc<AtomicBool>,
) {
    loop {
        match PgListener::connect_with(&pool).await {
            Ok(mut listener) => match listener.listen(CHANNEL).await {
                Ok(()) => {
                    listening.store(true, Ordering::SeqCst);
                    wake.notify_waiters();
                    loop {
                        match listener.recv().await {
                            Ok(notification) if notification.payload() == name => {
                                wake.notify_waiters()
                            }
                            Ok(_) => {}
                            Err(e) => {
                                listening.store(false, Ordering::SeqCst);
                                tracing::warn!(error = %e, "idem queue listener lost; polling until it is back");
                                break;
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "idem queue cannot LISTEN; polling meanwhile"),
            },
            Err(e) => {
                tracing::warn!(error = %e, "idem queue listener cannot connect; polling meanwhile")
            }
        }
        tokio::time::sleep(RECONNECT_AFTER).await;
    }
}
