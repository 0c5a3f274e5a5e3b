//! What operators read and change in the schedules' table: list, pause, resume, store,
//! remove.

use idem_core::{Operation, StoreError};

use super::schedule::Schedule;
use super::state::ScheduleState;
use crate::queue::{failed, Queue};

impl Queue {
    /// Every schedule's state, by name: what `idem schedules list` shows.
    pub async fn schedules(&self) -> Result<Vec<ScheduleState>, StoreError> {
        self.sql
            .schedules
            .list(self.store.pool())
            .await
            .map_err(failed(Operation::Get))
    }

    /// Pauses the schedule `name` without a deploy: schedulers pass over its ticks from now
    /// on (neither enqueued nor counted as missed) until it is resumed; ticks that fell due
    /// before the pause are still enqueued or counted. Returns whether it exists.
    pub async fn pause_schedule(&self, name: &str) -> Result<bool, StoreError> {
        self.sql
            .schedules
            .pause(self.store.pool(), name, true)
            .await
            .map_err(failed(Operation::Schedule))
    }

    /// Resumes the paused schedule `name`: it fires from its next tick after now (the ticks
    /// of the pause are not caught up). A schedule that is not paused is left as it is.
    /// Returns whether it exists.
    pub async fn resume_schedule(&self, name: &str) -> Result<bool, StoreError> {
        self.sql
            .schedules
            .pause(self.store.pool(), name, false)
            .await
            .map_err(failed(Operation::Schedule))
    }

    /// Stores `schedule` in the database, replacing a stored one of its name: a schedule that
    /// no program declares, which a scheduler of [`stored_schedules`](Self::stored_schedules)
    /// (`idem worker`) fires. Its ticks start now.
    pub async fn store_schedule(&self, schedule: &Schedule) -> Result<(), StoreError> {
        schedule
            .check()
            .map_err(|e| StoreError::msg(e.to_string()).during(Operation::Schedule))?;
        let stored = schedule.to_stored().to_string();
        self.sql
            .schedules
            .store(
                self.store.pool(),
                schedule.name(),
                &schedule.spec(),
                &stored,
            )
            .await
            .map_err(failed(Operation::Schedule))
    }

    /// The schedules stored in the database ([`store_schedule`](Self::store_schedule)). A
    /// stored definition this version cannot read is an error, naming it.
    pub async fn stored_schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        let rows = self
            .sql
            .schedules
            .stored(self.store.pool())
            .await
            .map_err(failed(Operation::Get))?;
        rows.into_iter()
            .map(|(name, stored)| {
                let value: serde_json::Value = serde_json::from_str(&stored)
                    .map_err(|e| StoreError::msg(format!("stored schedule {name:?}: {e}")))?;
                Schedule::from_stored(&name, &value)
                    .map_err(|e| StoreError::msg(e.to_string()).during(Operation::Get))
            })
            .collect()
    }

    /// Deletes the state of the schedule `name` (its jobs stay in the queue). For a schedule
    /// no longer in the code; one a running scheduler still declares starts again from its
    /// next tick. Returns whether it existed.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool, StoreError> {
        self.sql
            .schedules
            .remove(self.store.pool(), name)
            .await
            .map_err(failed(Operation::Purge))
    }
}
