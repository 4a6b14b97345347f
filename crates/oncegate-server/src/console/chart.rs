//! Decisions over time: counts per action and time bucket, and their stacked-bar chart as
//! hand-written SVG (a few rectangles need no charting library, and no script runs).
//!
//! The counts come from the store's report, read once per bucket edge: the report counts the
//! deliveries received at or after a time, so the deliveries of one bucket are the report at
//! its start minus the report at its end. An action is fixed when a delivery is decided, so
//! the difference is exact, and no delivery list is ever read whole.

use maud::{html, Markup};
use oncegate::store::ReportCounts;
use time::OffsetDateTime;

use super::layout;

/// The actions charted, in stacking order, with their colours.
pub(crate) const ACTIONS: [(&str, &str); 5] = [
    ("process", "#2e8b57"),
    ("ignore", "#8a96a3"),
    ("quarantine", "#c0392b"),
    ("reconcile", "#d69e2e"),
    ("reject", "#7b4fb3"),
];

/// One bucket's decisions, in the order of [`ACTIONS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub start: OffsetDateTime,
    pub counts: [u64; 5],
}

impl Bucket {
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
}

fn per_action(c: &ReportCounts) -> [u64; 5] {
    [
        c.processed,
        c.ignored_transport + c.ignored_effect,
        c.quarantined,
        c.reconcile,
        c.rejected,
    ]
}

/// The decisions per bucket: `edges` ascending (the last one is the end of the last bucket)
/// and `within[i]` the totals of the deliveries received from `edges[i]` to `edges[i + 1]`.
pub(crate) fn buckets(edges: &[OffsetDateTime], within: &[ReportCounts]) -> Vec<Bucket> {
    assert_eq!(edges.len(), within.len() + 1, "one report per bucket");
    edges
        .iter()
        .zip(within)
        .map(|(start, c)| Bucket {
            start: *start,
            counts: per_action(c),
        })
        .collect()
}

const W: u32 = 960;
const H: u32 = 260;
const LEFT: u32 = 48;
const BOTTOM: u32 = 36;
const TOP: u32 = 16;

/// The stacked bars, one per bucket, with the largest total on the axis and a legend.
pub(crate) fn svg(buckets: &[Bucket], label: impl Fn(OffsetDateTime) -> String) -> Markup {
    let max = buckets.iter().map(Bucket::total).max().unwrap_or(0).max(1);
    let plot_h = (H - BOTTOM - TOP) as f64;
    let n = buckets.len().max(1) as u32;
    let slot = (W - LEFT - 8) / n;
    let bar = (slot * 3 / 4).max(1);
    let every = (buckets.len() / 8).max(1);
    html! {
        svg.chart #decisions-chart width=(W) height=(H + 24)
            viewBox={ "0 0 " (W) " " (H + 24) } role="img" aria-label="Decisions per action over time" {
            line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(H - BOTTOM) stroke="#b9c1ca" {}
            line x1=(LEFT) y1=(H - BOTTOM) x2=(W - 8) y2=(H - BOTTOM) stroke="#b9c1ca" {}
            text x=(LEFT - 6) y=(TOP + 4) text-anchor="end" font-size="11" fill="#5b6673" { (max) }
            text x=(LEFT - 6) y=(H - BOTTOM) text-anchor="end" font-size="11" fill="#5b6673" { "0" }
            @for (i, b) in buckets.iter().enumerate() {
                @let x = LEFT + 4 + i as u32 * slot;
                @let mut y = (H - BOTTOM) as f64;
                @for (k, (action, colour)) in ACTIONS.iter().enumerate() {
                    @let h = b.counts[k] as f64 / max as f64 * plot_h;
                    @if b.counts[k] > 0 {
                        @let top = { y -= h; y };
                        rect x=(x) y=(format!("{top:.1}")) width=(bar) height=(format!("{h:.1}")) fill=(colour) {
                            title { (action) ": " (b.counts[k]) " from " (layout::when(b.start)) }
                        }
                    }
                }
                @if i % every == 0 {
                    text x=(x) y=(H - BOTTOM + 14) font-size="11" fill="#5b6673" { (label(b.start)) }
                }
            }
            @for (k, (action, colour)) in ACTIONS.iter().enumerate() {
                rect x=(LEFT + k as u32 * 120) y=(H) width="10" height="10" fill=(colour) {}
                text x=(LEFT + 14 + k as u32 * 120) y=(H + 9) font-size="12" fill="#1d232b" { (action) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(h: i64) -> OffsetDateTime {
        OffsetDateTime::UNIX_EPOCH + time::Duration::hours(h)
    }

    fn within(processed: u64, ignored: u64, quarantined: u64, rejected: u64) -> ReportCounts {
        ReportCounts {
            processed,
            ignored_transport: ignored / 2,
            ignored_effect: ignored - ignored / 2,
            quarantined,
            rejected,
            ..ReportCounts::default()
        }
    }

    #[test]
    fn each_bucket_holds_its_own_report_per_action() {
        // Hour 0: 3 processed, 1 quarantined, 2 rejected; hour 1: 2 processed, 3 ignored.
        let edges = [at(0), at(1), at(2)];
        let b = buckets(&edges, &[within(3, 0, 1, 2), within(2, 3, 0, 0)]);
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].start, b[1].start), (at(0), at(1)));
        assert_eq!(b[0].counts, [3, 0, 1, 0, 2]);
        assert_eq!(b[1].counts, [2, 3, 0, 0, 0]);
        assert_eq!(b[0].total() + b[1].total(), 11);
    }

    #[test]
    fn the_chart_draws_one_bar_segment_per_nonzero_count() {
        let b = vec![
            Bucket {
                start: at(0),
                counts: [2, 1, 0, 0, 0],
            },
            Bucket {
                start: at(1),
                counts: [0, 0, 0, 0, 0],
            },
        ];
        let svg = svg(&b, |t| t.hour().to_string()).into_string();
        assert_eq!(svg.matches("<rect").count(), 2 + ACTIONS.len());
        assert!(svg.contains("process: 2"));
    }
}
