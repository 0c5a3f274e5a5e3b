//! The effect journal: for side effects whose provider takes no idempotency key, record each
//! named effect of a claimed run in the store, so a retry of the same work skips what was done.
//!
//! Two modes, for the two ways a crash between the effect and its record can be allowed to go:
//!
//! - [`Journal::at_least_once`]: run the effect, then record it. A crash between the two
//!   repeats the effect on the retry: an effect is never skipped, and may happen twice.
//! - [`Journal::at_most_once`]: record the intent first, then run the effect, then record it
//!   done. An effect never happens twice, and may be skipped: a crash between intent and done
//!   skips the effect on the retry, and the retry learns [`Effect::Unknown`], so an operator
//!   can reconcile. An effect that returned `Err` also stays unknown: its provider may have
//!   acted before failing.
//!
//! Both work only inside a claimed run, which they find through [`crate::context`] together
//! with the store the run claimed its key in (so there is no store to pass, and no way to pass
//! the wrong one). They are fenced by the claim's token (a run that lost its claim cannot
//! record), and hand a retry the recorded output (JSON, as with `replay`).
//!
//! In transactional mode the journal is not available: the claim is not committed until the
//! body's transaction is, so a journal write (on another connection) cannot see it and reports
//! [`JournalError::LostClaim`]. Write the effect's record in the transaction instead.
//!
//! ```
//! use idem_core::journal::{Effect, Journal};
//! use idem_core::{idempotent, MemoryStore};
//!
//! #[idempotent(key = "order:{id}", store = store)]
//! async fn fulfil(store: &MemoryStore, id: u64) -> Result<u32, std::io::Error> {
//!     let journal = Journal::new();
//!     // An email API with no idempotency key: journaled.
//!     let receipt = journal
//!         .at_least_once("send-receipt", async { Ok::<_, std::io::Error>(7u32) })
//!         .await
//!         .map_err(std::io::Error::other)?;
//!     Ok(receipt.into_value().unwrap_or_default())
//! }
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! assert!(fulfil(&MemoryStore::new(), 1).await.unwrap().is_executed());
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::time::Duration;

use crate::codec::{Codec, JsonReplay, Replayable};
use crate::context::{self, CallContext};
use crate::error::{CodecError, Operation, StoreError};
use crate::store::{EffectRecord, EffectState, Fenced};

/// How long journal entries are kept by default: a week, longer than any retry window.
pub const DEFAULT_JOURNAL_KEEP: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Journals effects of the current call, in the store the call claimed its key in.
#[derive(Debug, Clone, Copy)]
pub struct Journal {
    keep: Duration,
}

impl Default for Journal {
    fn default() -> Journal {
        Journal::new()
    }
}

/// What happened to a journaled effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect<T> {
    /// It ran now and was recorded.
    Ran(T),
    /// An earlier run of this work did it; this is its recorded output.
    Skipped(T),
    /// At-most-once: an earlier run recorded the intent but not the completion (it crashed, was
    /// cancelled, or the effect failed). It may or may not have happened, so it was not run
    /// again. Reconcile by hand.
    Unknown,
}

impl<T> Effect<T> {
    /// The output, ran now or recorded before.
    pub fn into_value(self) -> Option<T> {
        match self {
            Effect::Ran(v) | Effect::Skipped(v) => Some(v),
            Effect::Unknown => None,
        }
    }
}

/// Why a journaled effect did not run or could not be recorded.
#[derive(Debug)]
#[non_exhaustive]
pub enum JournalError<E> {
    /// Not inside an idempotent call's body (or a spawned task without
    /// [`context::propagate`]).
    NotInCall,
    /// The effect ran and returned this error. Nothing was recorded as done.
    Effect(E),
    /// The store failed. With `effect_ran`, the effect happened but is not recorded.
    Store {
        /// The store's error.
        source: StoreError,
        /// Whether the effect had run.
        effect_ran: bool,
    },
    /// A newer run took the key over: this run may not record. With `effect_ran`, the effect
    /// happened and the newer run may repeat it.
    LostClaim {
        /// Whether the effect had run.
        effect_ran: bool,
    },
    /// The output could not be encoded or a recorded one decoded.
    Codec(CodecError),
}

impl<E: fmt::Display> fmt::Display for JournalError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::NotInCall => f.write_str(
                "journaled effects run inside an idempotent call's body (use \
                 context::propagate for spawned tasks)",
            ),
            JournalError::Effect(e) => write!(f, "the effect failed: {e}"),
            JournalError::Store { source, effect_ran } => write!(
                f,
                "{source} (the effect {})",
                if *effect_ran {
                    "ran but is not recorded"
                } else {
                    "did not run"
                }
            ),
            JournalError::LostClaim { effect_ran } => write!(
                f,
                "a newer run took the key over; the effect {}",
                if *effect_ran {
                    "ran, is not recorded, and may be repeated by the newer run"
                } else {
                    "did not run"
                }
            ),
            JournalError::Codec(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for JournalError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JournalError::Effect(e) => Some(e),
            JournalError::Store { source, .. } => Some(source),
            JournalError::Codec(e) => Some(e),
            JournalError::NotInCall | JournalError::LostClaim { .. } => None,
        }
    }
}

impl Journal {
    /// The current call's journal, keeping entries for [`DEFAULT_JOURNAL_KEEP`].
    pub fn new() -> Journal {
        Journal {
            keep: DEFAULT_JOURNAL_KEEP,
        }
    }

    /// Keeps entries this long instead.
    pub fn keep(mut self, keep: Duration) -> Self {
        self.keep = keep;
        self
    }

    fn call<E>() -> Result<CallContext, JournalError<E>> {
        context::current().ok_or(JournalError::NotInCall)
    }

    async fn write<E>(
        &self,
        call: &CallContext,
        name: &str,
        state: EffectState,
        output: Option<&[u8]>,
        effect_ran: bool,
    ) -> Result<(), JournalError<E>> {
        let record = EffectRecord {
            effect: name,
            state,
            output,
            keep: self.keep,
        };
        match call
            .store()
            .record_effect(call.key(), call.fence(), record)
            .await
        {
            Ok(Fenced::Applied) => Ok(()),
            Ok(Fenced::Lost) => Err(JournalError::LostClaim { effect_ran }),
            Err(e) => Err(JournalError::Store {
                source: e.during(Operation::JournalWrite),
                effect_ran,
            }),
        }
    }

    async fn recorded<T: Replayable, E>(
        &self,
        call: &CallContext,
        name: &str,
    ) -> Result<Option<(EffectState, Option<T>)>, JournalError<E>> {
        let entry =
            call.store()
                .effect(call.key(), name)
                .await
                .map_err(|e| JournalError::Store {
                    source: e.during(Operation::JournalRead),
                    effect_ran: false,
                })?;
        match entry {
            None => Ok(None),
            Some(entry) => {
                let value = JsonReplay
                    .decode(entry.output)
                    .map_err(JournalError::Codec)?;
                Ok(Some((entry.state, value)))
            }
        }
    }

    /// Runs `effect` and records it done with its output.
    async fn run_and_record<T, E, F>(
        &self,
        call: &CallContext,
        name: &str,
        effect: F,
    ) -> Result<Effect<T>, JournalError<E>>
    where
        T: Replayable,
        F: Future<Output = Result<T, E>>,
    {
        let value = effect.await.map_err(JournalError::Effect)?;
        let output = JsonReplay.encode(&value).map_err(JournalError::Codec)?;
        self.write(call, name, EffectState::Done, output.as_deref(), true)
            .await?;
        Ok(Effect::Ran(value))
    }

    /// Runs `effect` unless an earlier run of this work recorded it done; records it after.
    pub async fn at_least_once<T, E, F>(
        &self,
        name: &str,
        effect: F,
    ) -> Result<Effect<T>, JournalError<E>>
    where
        T: Replayable,
        F: Future<Output = Result<T, E>>,
    {
        let call = Self::call()?;
        if let Some((EffectState::Done, Some(value))) = self.recorded(&call, name).await? {
            tracing::debug!(effect = name, "journaled effect done before; skipped");
            return Ok(Effect::Skipped(value));
        }
        self.run_and_record(&call, name, effect).await
    }

    /// Records the intent, runs `effect`, records it done. An earlier intent without a
    /// completion is [`Effect::Unknown`], and the effect does not run again.
    pub async fn at_most_once<T, E, F>(
        &self,
        name: &str,
        effect: F,
    ) -> Result<Effect<T>, JournalError<E>>
    where
        T: Replayable,
        F: Future<Output = Result<T, E>>,
    {
        let call = Self::call()?;
        match self.recorded(&call, name).await? {
            Some((EffectState::Done, Some(value))) => return Ok(Effect::Skipped(value)),
            Some((EffectState::Started, _)) | Some((EffectState::Done, None)) => {
                tracing::warn!(
                    effect = name,
                    "an earlier run started this effect and never recorded it done; not \
                     running it again"
                );
                return Ok(Effect::Unknown);
            }
            None => {}
        }
        self.write(&call, name, EffectState::Started, None, false)
            .await?;
        self.run_and_record(&call, name, effect).await
    }
}
