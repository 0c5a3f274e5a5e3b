//! Running a handled request on a task of its own, so that it finishes when the client that
//! sent it goes away: hyper drops the response future, which only awaited the task.

use std::future::Future;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Runs `work` to its end on a task of the current Tokio runtime and waits for it; dropping the
/// returned future leaves the task running. A panic in `work` resumes here. `None` when the
/// task was cancelled before it finished (the runtime is shutting down). Outside a Tokio
/// runtime `work` runs inline, so dropping the returned future drops it.
pub(crate) async fn finish_detached<F>(work: F) -> Option<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match tokio::runtime::Handle::try_current() {
        // The request's span (a trace layer's, say) follows it onto the task.
        Ok(runtime) => joined(idem_core::pending::spawn(&runtime, work.in_current_span())).await,
        Err(_) => Some(work.await),
    }
}

/// The task's output; its panic, resumed; `None` when it was cancelled.
async fn joined<T>(task: JoinHandle<T>) -> Option<T> {
    match task.await {
        Ok(output) => Some(output),
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Notify;

    #[tokio::test]
    async fn the_work_finishes_when_its_waiter_is_dropped() {
        let (started, work_started) = tokio::sync::oneshot::channel();
        let gate = Arc::new(Notify::new());
        let (done, finished) = tokio::sync::oneshot::channel();
        let work = {
            let gate = gate.clone();
            async move {
                let _ = started.send(());
                gate.notified().await;
                let _ = done.send(());
            }
        };
        let waiter = tokio::spawn(finish_detached(work));
        work_started.await.unwrap();
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        gate.notify_one();
        finished.await.expect("the work ran to its end");
    }

    #[tokio::test]
    #[should_panic(expected = "in the work")]
    async fn a_panic_in_the_work_resumes_in_its_waiter() {
        finish_detached(async { panic!("in the work") }).await;
    }

    #[tokio::test]
    async fn a_task_cancelled_by_its_runtime_shutting_down_is_none_not_a_hang() {
        let other = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let task = other.spawn(std::future::pending::<()>());
        other.shutdown_background();
        assert_eq!(joined(task).await, None);
    }

    #[test]
    fn outside_a_runtime_the_work_runs_inline() {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut answer = std::pin::pin!(finish_detached(async { 7 }));
        assert_eq!(
            answer.as_mut().poll(&mut cx),
            std::task::Poll::Ready(Some(7))
        );
    }
}
