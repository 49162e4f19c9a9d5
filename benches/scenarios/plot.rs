//! Records the sink took per 200 ms window over time, one panel per strategy, with the
//! even share of the record rate that fits drawn across and an outage shaded: the shape
//! of the load each strategy puts on the sink, in records whatever unit the sink limits.

use std::path::Path;

use plotters::prelude::*;

use sluice::sim_sink::ledger::WINDOW;

use crate::report::records_target;
use crate::scenario::Run;

const PANEL_HEIGHT: u32 = 150;

pub fn windows_svg(runs: &[Run], title: &str, path: &Path) {
    let seconds = runs
        .iter()
        .map(|r| r.sink.windows.len() as f64 * WINDOW.as_secs_f64())
        .fold(1.0, f64::max);
    let peak = runs
        .iter()
        .flat_map(|r| r.sink.windows.iter().map(|w| w.accepted))
        .max()
        .unwrap_or(1) as f64;
    let height = 40 + PANEL_HEIGHT * runs.len() as u32;
    let root = SVGBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let root = root
        .titled(title, ("sans-serif", 18))
        .expect("a title fits");
    let panels = root.split_evenly((runs.len(), 1));
    for (run, panel) in runs.iter().zip(panels.iter()) {
        let mut chart = ChartBuilder::on(panel)
            .caption(run.strategy.label(), ("sans-serif", 13))
            .margin(6)
            .x_label_area_size(22)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..seconds, 0.0..peak * 1.05)
            .unwrap();
        chart
            .configure_mesh()
            .x_desc("s")
            .y_desc("records / 200 ms")
            .label_style(("sans-serif", 10))
            .light_line_style(WHITE)
            .draw()
            .unwrap();
        if let Some(outage) = run.outage {
            let down = [
                (outage.start.as_secs_f64(), 0.0),
                (outage.end.as_secs_f64(), peak * 1.05),
            ];
            chart
                .draw_series([Rectangle::new(down, BLACK.mix(0.08).filled())])
                .unwrap();
        }
        let even = records_target(run);
        chart
            .draw_series(LineSeries::new(
                [(0.0, even), (seconds, even)],
                RED.mix(0.6),
            ))
            .unwrap();
        let points = run
            .sink
            .windows
            .iter()
            .enumerate()
            .map(|(i, w)| (i as f64 * WINDOW.as_secs_f64(), w.accepted as f64));
        chart
            .draw_series(LineSeries::new(points, BLUE.stroke_width(1)))
            .unwrap();
    }
    root.present().expect("the plot is written");
}
