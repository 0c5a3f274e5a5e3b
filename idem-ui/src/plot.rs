//! Bar plots of counts per minute, drawn on the server as SVG: the page needs no script.
//! (A plotting crate would bring a drawing backend for what is one rectangle per minute.)

use std::time::{Duration, SystemTime};

use crate::format;

/// Plot width and height, in SVG units.
const WIDTH: u32 = 540;
const HEIGHT: u32 = 90;

/// One minute's bar.
pub(crate) struct Bar {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
    /// Its tooltip: the minute and the count.
    pub title: String,
}

/// Counts per minute over a window, as bars.
pub(crate) struct Plot {
    pub title: &'static str,
    pub width: u32,
    pub height: u32,
    pub bars: Vec<Bar>,
    /// The largest minute's count (the plot's scale).
    pub max: u64,
    /// The window's total.
    pub total: u64,
    pub from: String,
    pub to: String,
}

impl Plot {
    /// `counts` (the start of a minute, its count) from `since` over `minutes` minutes.
    pub fn per_minute(
        title: &'static str,
        since: SystemTime,
        minutes: u32,
        counts: impl IntoIterator<Item = (SystemTime, u64)>,
    ) -> Plot {
        let mut per = vec![0u64; minutes as usize];
        for (at, n) in counts {
            if let Ok(offset) = at.duration_since(since) {
                if let Some(slot) = per.get_mut((offset.as_secs() / 60) as usize) {
                    *slot += n;
                }
            }
        }
        let max = per.iter().copied().max().unwrap_or(0);
        let width = (WIDTH / minutes.max(1)).max(1);
        let bars = per
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, &n)| {
                // At least one unit high, so a minute with one event shows.
                let height = ((n as f64 / max as f64) * f64::from(HEIGHT)).ceil() as u32;
                let height = height.clamp(1, HEIGHT);
                let minute = since + Duration::from_secs(60 * i as u64);
                Bar {
                    x: i as u32 * width,
                    y: HEIGHT - height,
                    width,
                    height,
                    title: format!("{}: {n}", format::time(minute)),
                }
            })
            .collect();
        Plot {
            title,
            width: width * minutes,
            height: HEIGHT,
            bars,
            max,
            total: per.iter().sum(),
            from: format::time(since),
            to: format::time(since + Duration::from_secs(60 * u64::from(minutes))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_minute_is_a_bar_scaled_to_the_busiest() {
        let since = SystemTime::UNIX_EPOCH + Duration::from_secs(600);
        let minute = |i: u64| since + Duration::from_secs(60 * i);
        let plot = Plot::per_minute(
            "calls",
            since,
            3,
            [(minute(0), 2), (minute(2), 4), (minute(7), 9)],
        );
        assert_eq!(plot.max, 4);
        assert_eq!(plot.total, 6, "a count outside the window is left out");
        assert_eq!(plot.bars.len(), 2);
        assert_eq!((plot.bars[0].x, plot.bars[0].height), (0, HEIGHT / 2));
        assert_eq!((plot.bars[1].x, plot.bars[1].height), (2 * 180, HEIGHT));
        assert_eq!(plot.bars[1].y, 0);
    }
}
