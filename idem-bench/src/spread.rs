//! The median and range of repeated measurements: what the programs that run a measurement in
//! rounds report, since one run on a shared machine says little.

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
        let median = if values.len() % 2 == 0 {
            (values[mid - 1] + values[mid]) / 2.0
        } else {
            values[mid]
        };
        Some(Spread { median, low, high })
    }
}

#[cfg(test)]
mod tests {
    use super::Spread;

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
}
