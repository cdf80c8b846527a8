//! `--chart FILE`: an SVG of ns per operation by number of timers, one panel per workload
//! (1–6 and the idle poll), one line per peer, both axes logarithmic. Drawn with plotters'
//! SVG backend (no font files: text is laid out by plotters' built-in estimate).
//!
//! The points come from the run itself, or with `--chart-from FILE` from the `--markdown`
//! output of an earlier run (the tables of PERFORMANCE.md), so a published chart can be
//! redrawn from the published tables without measuring again.

use plotters::prelude::*;

/// One peer's line: its name and (timers, ns per op) points.
type Line = (String, Vec<(usize, f64)>);

/// Median ns per operation, by workload, then peer, then size.
#[derive(Debug, Default)]
pub struct Points {
    /// (workload label, its lines), in the order first seen.
    workloads: Vec<(String, Vec<Line>)>,
}

impl Points {
    pub fn add(&mut self, workload: &str, peer: &str, timers: usize, ns: f64) {
        if !ns.is_finite() || ns <= 0.0 {
            return; // a log axis has no place for it
        }
        let w = match self.workloads.iter().position(|(w, _)| w == workload) {
            Some(i) => i,
            None => {
                self.workloads.push((workload.to_string(), Vec::new()));
                self.workloads.len() - 1
            }
        };
        let peers = &mut self.workloads[w].1;
        let p = match peers.iter().position(|(p, _)| p == peer) {
            Some(i) => i,
            None => {
                peers.push((peer.to_string(), Vec::new()));
                peers.len() - 1
            }
        };
        peers[p].1.push((timers, ns));
    }

    pub fn is_empty(&self) -> bool {
        self.workloads.is_empty()
    }

    /// Reads the tables of a `--markdown` run: a line naming the size (`n = 1000 timers, …` as
    /// printed, or `**1 000 timers**` as in PERFORMANCE.md) before each table whose first
    /// column is `workload`. Other tables (scheduler, memory) are skipped. A cell's figure is
    /// its first number (`~` estimates and `≈` clock-bound figures included: the chart does
    /// not mark them). A heading (`#`) ends a size's scope: a `workload` table under a later
    /// heading with no size line of its own (a before/after comparison, say) is not a run's
    /// table and is skipped.
    pub fn from_markdown(text: &str) -> Result<Points, String> {
        let mut points = Points::default();
        let mut size: Option<usize> = None;
        let mut header: Option<Vec<String>> = None;
        for line in text.lines() {
            let line = line.trim();
            if !line.starts_with('|') {
                header = None;
                if line.starts_with('#') {
                    size = None;
                }
                if let Some(n) = size_in(line) {
                    size = Some(n);
                }
                continue;
            }
            let cells: Vec<String> = line
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect();
            match &header {
                None => header = Some(cells),
                Some(names) if names[0] == "workload" => {
                    if cells[0].starts_with("---") {
                        continue;
                    }
                    let Some(n) = size else { continue };
                    for (name, cell) in names.iter().zip(&cells).skip(1) {
                        let figure = cell.trim_start_matches(['~', '≈']);
                        let figure = figure.split_whitespace().next().unwrap_or("");
                        if let Ok(ns) = figure.parse::<f64>() {
                            points.add(&cells[0], name, n, ns);
                        }
                    }
                }
                Some(_) => {}
            }
        }
        if points.is_empty() {
            return Err("no `| workload | …` table after a size line".to_string());
        }
        Ok(points)
    }

    /// Writes the chart to `path` (SVG).
    pub fn write_svg(&self, path: &str) -> Result<(), String> {
        let err = |e: &dyn std::fmt::Display| format!("chart {path}: {e}");
        let panels = self.workloads.len();
        let cols = 2;
        let rows = panels.div_ceil(cols);
        let root = SVGBackend::new(path, (1100, 330 * rows as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        for (area, (workload, peers)) in root.split_evenly((rows, cols)).iter().zip(&self.workloads)
        {
            let all = peers.iter().flat_map(|(_, pts)| pts.iter());
            let (mut x0, mut x1, mut y0, mut y1) = (usize::MAX, 0, f64::MAX, 0.0f64);
            for &(n, ns) in all {
                (x0, x1, y0, y1) = (x0.min(n), x1.max(n), y0.min(ns), y1.max(ns));
            }
            if x0 == x1 {
                (x0, x1) = (x0 / 2, x1 * 2); // one size: still a visible range
            }
            let mut chart = ChartBuilder::on(area)
                .caption(format!("{workload} (ns per op)"), ("sans-serif", 18))
                .margin(10)
                .x_label_area_size(30)
                .y_label_area_size(50)
                .build_cartesian_2d(
                    (x0 as f64..x1 as f64).log_scale(),
                    (y0 / 1.3..y1 * 1.3).log_scale(),
                )
                .map_err(|e| err(&e))?;
            chart
                .configure_mesh()
                .max_light_lines(0) // keeps the file small: the major lines are enough
                .x_labels(4)
                .y_labels(6)
                .x_desc("timers")
                .x_label_formatter(&|x| format!("{x:.0e}"))
                .y_label_formatter(&|&y| {
                    if y >= 10.0 {
                        format!("{y:.0}")
                    } else {
                        format!("{y:.1}")
                    }
                })
                .draw()
                .map_err(|e| err(&e))?;
            for (i, (peer, pts)) in peers.iter().enumerate() {
                let color = COLORS[i % COLORS.len()].to_rgba();
                let width = if i == 0 { 3 } else { 1 }; // tickwheel, the reference, stands out
                let mut pts = pts.clone();
                pts.sort_by_key(|&(n, _)| n);
                chart
                    .draw_series(LineSeries::new(
                        pts.iter().map(|&(n, ns)| (n as f64, ns)),
                        color.stroke_width(width),
                    ))
                    .map_err(|e| err(&e))?
                    .label(peer.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 14, y)], color.stroke_width(width))
                    });
                // A dot per measured size: sizes are few, and lines cross.
                chart
                    .draw_series(
                        pts.iter()
                            .map(|&(n, ns)| Circle::new((n as f64, ns), 2 + width, color.filled())),
                    )
                    .map_err(|e| err(&e))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .label_font(("sans-serif", 11))
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }
        root.present().map_err(|e| err(&e))
    }
}

/// Ten colours told apart at a glance (matplotlib's "tab10"), the reference's red first.
const COLORS: [RGBColor; 10] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The number of timers a size line names: `n = 1000 timers…` or `**1 000 000 timers**`.
fn size_in(line: &str) -> Option<usize> {
    let line = line.trim_start_matches("**").trim_start_matches("n = ");
    let end = line.find(" timers")?;
    let digits: String = line[..end].chars().filter(|c| !c.is_whitespace()).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_become_points() {
        let text = "\
**1 000 timers** (ns per operation)

| workload | tickwheel | DelayQueue |
|---|---:|---:|
| 1 insert | 7.01 | 32.2 (4.5×) |
| idle poll | 1.53 | ~59.7 (40.3×) |

n = 100000 timers, 3 repetitions
| workload | tickwheel | DelayQueue |
|---|---:|---:|
| 1 insert | 5.74 | 16.7 (2.8×) |

| scheduler | tickwheel |
|---|---:|
| 7 scheduler, n=100000 | 125 [120–139] |
";
        let points = Points::from_markdown(text).unwrap();
        let insert = &points.workloads[0];
        assert_eq!(insert.0, "1 insert");
        assert_eq!(
            insert.1[1],
            (
                "DelayQueue".to_string(),
                vec![(1000, 32.2), (100_000, 16.7)]
            )
        );
        assert_eq!(points.workloads[1].1[1].1, vec![(1000, 59.7)]);
        assert_eq!(
            points.workloads.len(),
            2,
            "the scheduler table is not a workload table"
        );
    }

    #[test]
    fn a_table_under_a_later_heading_without_a_size_is_skipped() {
        let text = "\
**1 000 timers** (ns per operation)

| workload | tickwheel |
|---|---|
| 1 insert | 7.5 |

## What something costs

| workload | peer | before | after |
|---|---|---|---|
| insert | tickwheel | 21.9 | 21.9 |
";
        let points = Points::from_markdown(text).expect("the run's table");
        assert_eq!(points.workloads.len(), 1, "{:?}", points.workloads);
        assert_eq!(points.workloads[0].0, "1 insert");
    }

    #[test]
    fn text_without_tables_is_an_error() {
        assert!(Points::from_markdown("no tables here").is_err());
    }
}
