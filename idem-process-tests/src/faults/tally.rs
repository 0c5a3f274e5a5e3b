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
    /// Effects begun after the key's caller had been told the work was done. Must be 0.
    pub after_done: u64,
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
    /// How many in-flight repeats the faults that hit could cause: the work in flight in the
    /// processes each fault reached.
    pub bound: u64,
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

    /// What breaks the promise, if anything: repeats after completion, lost keys, held keys, or
    /// more in-flight repeats than the faults could cause.
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

    fn run(kind: char, key: &str, run: &str) -> Entry {
        Entry {
            run: run.into(),
            ..entry(kind, key)
        }
    }

    #[test]
    fn callers_of_a_key_told_two_answers_or_one_of_no_run_are_counted() {
        let entries = [
            run('E', "a", "1.0"),
            run('E', "a", "2.0"),
            run('D', "a", "1.0"),
            run('D', "a", "2.0"),
            run('E', "b", "1.1"),
            run('D', "b", "9.9"),
            run('E', "c", "1.2"),
            run('D', "c", "1.2"),
            run('D', "c", "1.2"),
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
    fn a_key_done_without_an_effect_or_never_done_is_lost() {
        let entries = [entry('D', "skipped"), entry('E', "unfinished")];
        let tally = Tally::count(&entries, ["never-seen"]);
        assert_eq!(tally.lost, 3);
        assert_eq!(tally.keys, 3);
        assert!(!tally.violations().is_empty());
    }
}
