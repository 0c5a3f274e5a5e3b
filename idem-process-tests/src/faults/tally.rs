//! What a workload's ledger says about the promise: each key's effects, set against when its
//! caller was told the work was done.

use std::collections::{BTreeMap, BTreeSet};

use super::ledger::Entry;

/// One workload's figures.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Keys the workload delivered (or was given).
    pub keys: u64,
    /// Effects begun, over every key.
    pub effects: u64,
    /// Effects begun after the key's caller had been told the work was done, other than
    /// those of [`stalled_after_done`](Tally::stalled_after_done). Must be 0.
    pub after_done: u64,
    /// Effects begun after the key was done by a process that was stopped (SIGSTOP) from
    /// before the completion until just before the effect: it had its claim, and the body's
    /// first line came after it resumed, a window no lease can close.
    pub stalled_after_done: u64,
    /// Keys never done (an effect began, and no caller was ever told it finished), and keys
    /// reported done whose effect never began: a silent skip. Must be 0.
    pub lost: u64,
    /// Keys whose callers were told different answers, or an answer of a run that never
    /// began: each caller of a key must get the answer of the one run that completed it.
    /// Must be 0.
    pub differing: u64,
    /// Keys still held by a claim once the faults had ended and a lease had passed. Must be 0.
    pub held: u64,
    /// Effects begun again while an earlier one was in flight or cut short (a killed or stalled
    /// run, taken over): what at-least-once delivery may cost, within [`bound`](Tally::bound).
    pub in_flight: u64,
    /// How many in-flight repeats the faults that hit could cause: what each could catch in
    /// flight at once in the processes it reached, for each lease it lasted.
    pub bound: u64,
    /// In-flight repeats that no fault explains: no fault that hit the first run's process (or
    /// its server's network) came between the first effect and the repeat. Must be 0.
    pub unexplained: u64,
    /// The first few keys that broke the promise, with their ledger lines, to start from.
    pub examples: Vec<String>,
}

impl Tally {
    /// Counts `entries`, in the order they happened. Every key of `must_finish` must be done,
    /// whether or not any entry names it.
    pub fn count<'k>(entries: &[Entry], must_finish: impl IntoIterator<Item = &'k str>) -> Tally {
        #[derive(Default)]
        struct Key<'e> {
            lines: Vec<&'e Entry>,
            effects: u64,
            after_done: u64,
            done: bool,
            runs: BTreeSet<&'e str>,
            answers: BTreeSet<&'e str>,
        }
        let mut keys: BTreeMap<&str, Key> = BTreeMap::new();
        for entry in entries {
            let key = keys.entry(entry.key.as_str()).or_default();
            key.lines.push(entry);
            match entry.kind {
                'E' => {
                    key.effects += 1;
                    key.after_done += u64::from(key.done);
                    key.runs.insert(&entry.run);
                }
                'D' => {
                    key.done = true;
                    if !entry.run.is_empty() {
                        key.answers.insert(&entry.run);
                    }
                }
                _ => {}
            }
        }
        let required: BTreeSet<&str> = must_finish.into_iter().collect();
        let mut tally = Tally::default();
        let unseen = required.iter().filter(|k| !keys.contains_key(*k)).count() as u64;
        tally.keys += unseen;
        tally.lost += unseen;
        for (name, key) in &keys {
            let broken = (tally.after_done, tally.lost, tally.differing);
            tally.keys += 1;
            tally.effects += key.effects;
            tally.after_done += key.after_done;
            tally.in_flight += key.effects.saturating_sub(1 + key.after_done);
            if !key.done || key.effects == 0 {
                tally.lost += 1;
            }
            if key.answers.len() > 1 || key.answers.iter().any(|a| !key.runs.contains(a)) {
                tally.differing += 1;
            }
            if broken != (tally.after_done, tally.lost, tally.differing) && tally.examples.len() < 5
            {
                let lines: Vec<String> = key
                    .lines
                    .iter()
                    .map(|e| format!("{} at {} {}", e.kind, e.micros, e.run))
                    .collect();
                tally.examples.push(format!("{name}: {}", lines.join(", ")));
            }
        }
        tally
    }

    /// Moves from [`after_done`](Tally::after_done) to
    /// [`stalled_after_done`](Tally::stalled_after_done) each effect that `stalled(done,
    /// effect)` puts down to its process having been stopped across the key's completion
    /// `done` (the first `D` of its key).
    pub fn excuse_stalled(&mut self, entries: &[Entry], stalled: impl Fn(&Entry, &Entry) -> bool) {
        let mut done: BTreeMap<&str, &Entry> = BTreeMap::new();
        for entry in entries {
            match entry.kind {
                'D' => {
                    done.entry(entry.key.as_str()).or_insert(entry);
                }
                'E' => {
                    if let Some(first) = done.get(entry.key.as_str()) {
                        if stalled(first, entry) && self.after_done > 0 {
                            self.after_done -= 1;
                            self.stalled_after_done += 1;
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Counts the in-flight repeats of `entries` (in the order they happened) that
    /// `explained(first, repeat)` does not put down to a fault: `first` is the effect a run
    /// began, `repeat` the next effect of its key, begun before the key was done.
    pub fn explain(&mut self, entries: &[Entry], explained: impl Fn(&Entry, &Entry) -> bool) {
        let mut last: BTreeMap<&str, Option<&Entry>> = BTreeMap::new();
        for entry in entries {
            let previous = last.entry(entry.key.as_str()).or_default();
            match entry.kind {
                'E' => {
                    if let Some(first) = previous.filter(|first| !explained(first, entry)) {
                        self.unexplained += 1;
                        if self.examples.len() < 5 {
                            self.examples.push(format!(
                                "{}: E at {} {}, then E at {} {}, and no fault between",
                                entry.key, first.micros, first.run, entry.micros, entry.run
                            ));
                        }
                    }
                    *previous = Some(entry);
                }
                'D' => *previous = None,
                _ => {}
            }
        }
    }

    /// What breaks the promise, if anything: repeats after completion, lost keys, held keys, or
    /// in-flight repeats past the bound or unexplained by any fault.
    pub fn violations(&self) -> Vec<String> {
        let mut broken = Vec::new();
        if self.after_done > 0 {
            broken.push(format!("{} repeats after completion", self.after_done));
        }
        if self.lost > 0 {
            broken.push(format!("{} keys lost", self.lost));
        }
        if self.differing > 0 {
            broken.push(format!("{} keys answered differently", self.differing));
        }
        if self.held > 0 {
            broken.push(format!("{} keys held past a lease", self.held));
        }
        if self.unexplained > 0 {
            broken.push(format!(
                "{} in-flight repeats that no fault explains",
                self.unexplained
            ));
        }
        if self.in_flight > self.bound {
            broken.push(format!(
                "{} in-flight repeats, over the bound of {}",
                self.in_flight, self.bound
            ));
        }
        broken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: char, key: &str) -> Entry {
        Entry {
            kind,
            key: key.into(),
            micros: 0,
            run: String::new(),
        }
    }

    fn run_entry(kind: char, key: &str, run: &str) -> Entry {
        Entry {
            run: run.into(),
            ..entry(kind, key)
        }
    }

    #[test]
    fn callers_of_a_key_told_two_answers_or_one_of_no_run_are_counted() {
        let entries = [
            run_entry('E', "a", "1.0"),
            run_entry('E', "a", "2.0"),
            run_entry('D', "a", "1.0"),
            run_entry('D', "a", "2.0"),
            run_entry('E', "b", "1.1"),
            run_entry('D', "b", "9.9"),
            run_entry('E', "c", "1.2"),
            run_entry('D', "c", "1.2"),
            run_entry('D', "c", "1.2"),
        ];
        let tally = Tally::count(&entries, []);
        assert_eq!(tally.differing, 2);
        assert_eq!(tally.lost, 0);
    }

    #[test]
    fn an_effect_after_done_is_a_repeat_after_completion_and_one_before_is_in_flight() {
        let entries = [
            entry('E', "a"),
            entry('E', "a"),
            entry('D', "a"),
            entry('E', "a"),
            entry('E', "b"),
            entry('D', "b"),
        ];
        let tally = Tally::count(&entries, []);
        assert_eq!(tally.keys, 2);
        assert_eq!(tally.effects, 4);
        assert_eq!(tally.after_done, 1);
        assert_eq!(tally.in_flight, 1);
        assert_eq!(tally.lost, 0);
    }

    #[test]
    fn a_repeat_is_explained_only_by_a_fault_between_the_two_effects() {
        let at = |kind, key: &str, micros, run: &str| Entry {
            micros,
            ..run_entry(kind, key, run)
        };
        let entries = [
            at('E', "a", 10, "1.0"),
            at('E', "a", 30, "2.0"),
            at('D', "a", 31, "2.0"),
            at('E', "b", 40, "1.1"),
            at('E', "b", 90, "2.1"),
            at('D', "b", 91, "2.1"),
            at('E', "a", 95, "2.2"),
        ];
        let mut tally = Tally::count(&entries, []);
        // A fault hit process 1 at 20: it explains a's repeat, not b's.
        tally.explain(&entries, |first, repeat| {
            first.run.starts_with("1.") && first.micros <= 20 && 20 <= repeat.micros
        });
        assert_eq!(tally.unexplained, 1);
        assert_eq!(
            tally.after_done, 1,
            "a's effect after its completion is counted there"
        );
    }

    #[test]
    fn a_key_done_without_an_effect_or_never_done_is_lost() {
        let entries = [entry('D', "skipped"), entry('E', "unfinished")];
        let tally = Tally::count(&entries, ["never-seen"]);
        assert_eq!(tally.lost, 3);
        assert_eq!(tally.keys, 3);
        assert!(!tally.violations().is_empty());
    }
}
