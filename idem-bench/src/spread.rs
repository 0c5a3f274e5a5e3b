//! The median and range of repeated measurements, and the median run itself: what the programs
//! that run a measurement in rounds report, since one run on a shared machine says little.

/// The median of some measurements, and their lowest and highest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The middle value (the mean of the two middle ones, for an even count).
    pub median: f64,
    /// The lowest.
    pub low: f64,
    /// The highest.
    pub high: f64,
}

impl Spread {
    /// The spread of `values`; `None` when there are none.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut values: Vec<f64> = values.into_iter().collect();
        values.sort_by(f64::total_cmp);
        let (low, high) = (*values.first()?, *values.last()?);
        let mid = values.len() / 2;
        let median = if values.len().is_multiple_of(2) {
            (values[mid - 1] + values[mid]) / 2.0
        } else {
            values[mid]
        };
        Some(Spread { median, low, high })
    }
}

/// The middle item of `items` by `key` (the lower of the middle two, for an even count): the
/// median run itself, so that a row's figures all come from one run. `None` when there are none.
pub fn median_by<T>(mut items: Vec<T>, key: impl Fn(&T) -> f64) -> Option<T> {
    items.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let middle = items.len().checked_sub(1)? / 2;
    Some(items.swap_remove(middle))
}

#[cfg(test)]
mod tests {
    use super::{median_by, Spread};

    #[test]
    fn the_median_of_an_odd_count_is_the_middle_value() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!(
            s,
            Spread {
                median: 2.0,
                low: 1.0,
                high: 3.0
            }
        );
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        let s = Spread::of([4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(
            s,
            Spread {
                median: 2.5,
                low: 1.0,
                high: 4.0
            }
        );
    }

    #[test]
    fn nothing_has_no_spread() {
        assert_eq!(Spread::of([]), None);
    }

    #[test]
    fn the_median_item_is_the_lower_middle_one_by_its_key() {
        let runs = vec![("c", 3.0), ("a", 1.0), ("d", 4.0), ("b", 2.0)];
        assert_eq!(median_by(runs, |r| r.1), Some(("b", 2.0)));
        assert_eq!(median_by(vec![("a", 1.0)], |r| r.1), Some(("a", 1.0)));
        assert_eq!(median_by(Vec::<(&str, f64)>::new(), |r| r.1), None);
    }
}
