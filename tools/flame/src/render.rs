//! What each frame box says and its colour: tooltips show time and the
//! split by kind, colours follow the kind of time. The boxes come from
//! [`crate::layout`] and are drawn by [`crate::svg`].
//!
//! Colours (documented in `flame --help` and tested):
//! a box is coloured by the kind with the most time beneath it (ties: on,
//! off, GPU, other). Shades vary with a hash of the name, within:
//!
//! | kind | user frames | kernel frames (`_[k]`) |
//! | --- | --- | --- |
//! | on-CPU  | red-yellow `rgb(205-255, 0-230, 0-55)` | orange `rgb(190-255, 90-155, 0)` |
//! | off-CPU | blue `rgb(80-140, 80-140, 190-245)` | aqua `rgb(50-110, 165-220, 165-220)` |
//! | GPU     | green `rgb(40-90, 175-255, 40-90)` | yellow-green `rgb(140-190, 200-255, 40-70)` |
//! | other (folded without markers) | inferno's `--colors` palette | |
//! | waker (`_[w]`, stackmerge --wakers) | purple `rgb(140-190, 70-120, 190-245)` | pink `rgb(200-250, 110-160, 180-230)` |
//!
//! The `--` between a block and its waker is grey; a graph with wakers says
//! so in its subtitle (the legend).

use std::io::{self, Write};

use anyhow::Result;
use inferno::flamegraph::{self, color::Color, color::Palette, Direction};
use wallclock_stream::units::human_ns;

use crate::kinds::{Mix, GPU, OFF, ON, OTHER};
use crate::layout::{self, Entry, FrameBox};
use crate::frame_name::{deannotate, is_waker_frame, shown};
use crate::svg;

/// How values are shown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueUnit {
    /// Values are durations, this many ns each.
    Time(u64),
    /// Values are counts (samples).
    Samples,
    /// Values are thousandths of samples (fractional counts in the input).
    SampleMillis,
    /// Values are counts of this event (`oncputime -e`).
    Events(&'static str),
}

impl ValueUnit {
    pub fn text(self, v: u64) -> String {
        match self {
            ValueUnit::Time(ns) => human_ns(v.saturating_mul(ns)),
            ValueUnit::Samples if v == 1 => "1 sample".to_string(),
            ValueUnit::Samples => format!("{} samples", thousands(v)),
            ValueUnit::Events(e) => format!("{} {e}", thousands(v)),
            ValueUnit::SampleMillis => {
                let frac = format!("{:03}", v % 1000);
                let frac = frac.trim_end_matches('0');
                let dot = if frac.is_empty() { "" } else { "." };
                format!("{}{dot}{frac} samples", thousands(v / 1000))
            }
        }
    }
}

fn thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[derive(Debug, Clone)]
pub struct RenderOptions {
    pub title: String,
    /// Label of the root box instead of inferno's `all`.
    pub root: Option<String>,
    pub subtitle: Option<String>,
    pub width: Option<usize>,
    /// Percent of the total below which boxes are not drawn.
    pub min_width: f64,
    pub inverted: bool,
    /// Palette of frames without a kind.
    pub colors: Palette,
    pub unit: ValueUnit,
    /// Differential mode: colour by AFTER - BEFORE.
    pub diff: bool,
}

/// Draw `entries` (any order) as an SVG into `out`, in one pass over the
/// frame boxes (see [`crate::svg`]).
pub fn render<W: Write>(entries: Vec<Entry<'_>>, opts: &RenderOptions, out: W) -> Result<()> {
    let mut entries = entries;
    entries.retain(|e| e.total() > 0 || (opts.diff && e.before > 0));
    layout::sort_entries(&mut entries);
    // Stacks only in BEFORE (diff) add to their parents' before-time but are not drawn.
    let (boxes, total) = layout::boxes(&entries, opts.min_width);
    drop(entries);
    render_boxes(boxes, total, opts, out)
}

/// [`render`] of the stacks of a stream given as names ([`crate::seqs`]):
/// the same boxes, laid out by [`crate::layout_ids`].
pub fn render_ids<W: Write>(seqs: &crate::seqs::Seqs, mut entries: Vec<crate::layout_ids::IdEntry>, opts: &RenderOptions, out: W) -> Result<()> {
    entries.retain(|e| e.mix.iter().sum::<u64>() > 0);
    crate::layout_ids::sort(seqs, &mut entries);
    let (boxes, total) = crate::layout_ids::boxes(seqs, &entries, opts.min_width);
    drop(entries);
    render_boxes(boxes, total, opts, out)
}

/// Draws the laid-out boxes.
fn render_boxes<W: Write>(boxes: Vec<FrameBox<'_>>, total: u64, opts: &RenderOptions, mut out: W) -> Result<()> {
    if total == 0 {
        write_empty(&mut out, opts)?;
        return Ok(out.flush()?);
    }
    let mut iopt = flamegraph::Options::default();
    iopt.title = svg::xml_text(&opts.title);
    iopt.subtitle = opts.subtitle.as_deref().map(svg::xml_text);
    if !opts.diff && boxes.iter().any(|b| is_waker_frame(b.name) && dominant(&b.mix) == OFF) {
        // The legend of a graph with wakers.
        let legend = "off-CPU blue, on-CPU red; above --, who woke the block: purple (kernel pink), leaf to root";
        iopt.subtitle = Some(match &iopt.subtitle {
            Some(s) => format!("{s} | {legend}"),
            None => legend.to_string(),
        });
    }
    iopt.image_width = opts.width;
    iopt.colors = opts.colors;
    iopt.deterministic = true;
    // Labels keep their start when cut, in the browser too (the script
    // re-fits them on load and zoom), as flamegraph.pl and our static
    // text cut them: `py::handle_request:/srv/a..`, not `../srv/app.py`.
    iopt.text_truncate_direction = flamegraph::TextTruncateDirection::Right;
    if opts.inverted {
        iopt.direction = Direction::Inverted;
    }
    // Each box's fill: ours for a kind or a diff, else inferno's palette.
    let max_delta = boxes.iter().map(|b| b.mix.iter().sum::<u64>().abs_diff(b.before)).max().unwrap_or(0);
    let fills: Vec<Option<Color>> = boxes
        .iter()
        .map(|b| if opts.diff { Some(diff_color(b, max_delta)) } else { kind_color(b) })
        .map(|c| c.map(|(r, g, b)| Color { r, g, b }))
        .collect();
    let inferno_named = boxes.iter().zip(&fills).filter(|(_, f)| f.is_none()).map(|(b, _)| b.name);
    let palette = svg::palette(&iopt, inferno_named)?;
    let depthmax = boxes.iter().map(|b| b.depth).max().unwrap_or(0);
    out.write_all(&svg::prelude(&mut iopt, depthmax)?)?;
    let mut fw = svg::FrameWriter::new(svg::Geometry::new(&iopt, depthmax, total));
    fw.open(&mut out, total)?;
    let mut title = String::new();
    for (b, fill) in boxes.iter().zip(fills) {
        title.clear();
        box_title(&mut title, b, total, opts);
        let fill = fill.or_else(|| palette.get(b.name)).unwrap_or_default();
        // inferno leaves the root's text empty: it shows the root's label.
        let label = if b.depth == 0 { Some(opts.root.as_deref().unwrap_or("")) } else { None };
        fw.frame(&mut out, b, &title, fill, label)?;
    }
    fw.close(&mut out)?;
    Ok(out.flush()?)
}

/// `name (12.3 ms, 4.56%; on-CPU 10.0 ms, off-CPU 2.30 ms)`. No `(` after
/// the name: inferno's JS takes the label as the text before the last `(`.
fn box_title(t: &mut String, b: &FrameBox<'_>, total: u64, opts: &RenderOptions) {
    use std::fmt::Write;
    let v: u64 = b.mix.iter().sum();
    let name = if b.depth == 0 && b.name.is_empty() { std::borrow::Cow::Borrowed(opts.root.as_deref().unwrap_or("all")) } else { shown(b.name) };
    // Percent with 2 decimals, rounded in integers (float formatting was a
    // fifth of the run time on graphs with many boxes).
    let bp = (v as u128 * 10_000 + total as u128 / 2) / total as u128;
    let _ = write!(t, "{name} ({}, {}.{:02}%", opts.unit.text(v), bp / 100, bp % 100);
    if opts.diff {
        let sign = if v >= b.before { "+" } else { "-" };
        let _ = write!(t, "; before {}, {sign}{}", opts.unit.text(b.before), opts.unit.text(v.abs_diff(b.before)));
    } else if b.mix.iter().filter(|&&m| m > 0).count() > 1 {
        let names = ["on-CPU", "off-CPU", "GPU", "other"];
        let parts: Vec<String> = (0..4)
            .filter(|&k| b.mix[k] > 0)
            .map(|k| format!("{} {}", names[k], opts.unit.text(b.mix[k])))
            .collect();
        let _ = write!(t, "; {}", parts.join(", "));
    }
    t.push(')');
}

/// The kind whose time dominates a box (ties: on, off, GPU, other).
pub fn dominant(mix: &Mix) -> usize {
    let mut best = ON;
    for k in [OFF, GPU, OTHER] {
        if mix[k] > mix[best] {
            best = k;
        }
    }
    best
}

/// Exact colour of a box of kind on/off/GPU; `None` keeps inferno's palette.
fn kind_color(b: &FrameBox<'_>) -> Option<(u8, u8, u8)> {
    let kernel = b.name.ends_with("_[k]");
    let v = name_hash(deannotate(b.name));
    let t = |base: f32, span: f32| (base + span * v) as u8;
    // Wakers come after a block (off-CPU time); a `_[w]` frame of plain
    // folded input keeps inferno's palette, as inferno draws it.
    let off = dominant(&b.mix) == OFF;
    if off && b.name == "--" {
        return Some((160, 160, 160));
    }
    if off && b.name.ends_with("_[w]") {
        // Wakers: purple, their kernel frames pink.
        return Some(if b.name.ends_with("_[k]_[w]") {
            (t(200.0, 50.0), t(110.0, 50.0), t(180.0, 50.0))
        } else {
            (t(140.0, 50.0), t(70.0, 50.0), t(190.0, 55.0))
        });
    }
    Some(match (dominant(&b.mix), kernel) {
        (ON, false) => (t(205.0, 50.0), (230.0 * name_hash2(deannotate(b.name))) as u8, t(0.0, 55.0)),
        (ON, true) => (t(190.0, 65.0), t(90.0, 65.0), 0),
        (OFF, false) => (t(80.0, 60.0), t(80.0, 60.0), t(190.0, 55.0)),
        (OFF, true) => (t(50.0, 60.0), t(165.0, 55.0), t(165.0, 55.0)),
        (GPU, false) => (t(40.0, 50.0), t(175.0, 80.0), t(40.0, 50.0)),
        (GPU, true) => (t(140.0, 50.0), t(200.0, 55.0), t(40.0, 30.0)),
        _ => return None,
    })
}

/// Differential: red grew, blue shrank, white unchanged; saturation by
/// the change relative to the largest change of any box.
fn diff_color(b: &FrameBox<'_>, max_delta: u64) -> (u8, u8, u8) {
    let after: u64 = b.mix.iter().sum();
    let d = after.abs_diff(b.before);
    let pale = 255 - (200 * d).checked_div(max_delta).unwrap_or(0) as u8;
    if after >= b.before {
        (255, pale, pale)
    } else {
        (pale, pale, 255)
    }
}

/// FNV-1a of the name, in [0, 1).
fn name_hash(name: &str) -> f32 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    (h >> 40) as f32 / (1u64 << 24) as f32
}

fn name_hash2(name: &str) -> f32 {
    let mut h: u64 = 0x84222325cbf29ce4;
    for b in name.bytes().rev() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    (h >> 40) as f32 / (1u64 << 24) as f32
}

/// A valid SVG that says there was nothing to draw.
fn write_empty<W: Write>(out: &mut W, opts: &RenderOptions) -> io::Result<()> {
    let w = opts.width.unwrap_or(1200);
    let h = 60;
    writeln!(out, r#"<?xml version="1.0" standalone="no"?>"#)?;
    writeln!(
        out,
        r#"<svg version="1.1" width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">"#
    )?;
    write!(out, r#"<text x="50%" y="24" text-anchor="middle" font-family="monospace" font-size="17">"#)?;
    let mut title = String::new();
    svg::escape_into(&mut title, &opts.title);
    out.write_all(title.as_bytes())?;
    writeln!(out, "</text>")?;
    writeln!(out, r#"<text x="50%" y="48" text-anchor="middle" font-family="monospace" font-size="12">no stacks</text>"#)?;
    writeln!(out, "</svg>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units_and_escape() {
        assert_eq!(ValueUnit::Time(1_000).text(12_300), "12.3 ms");
        assert_eq!(ValueUnit::Samples.text(1_234_567), "1,234,567 samples");
        assert_eq!(ValueUnit::SampleMillis.text(2_567), "2.567 samples");
        assert_eq!(ValueUnit::SampleMillis.text(31_000), "31 samples");
        let mut v = String::new();
        svg::escape_into(&mut v, "a<b>&\"c'");
        assert_eq!(v, "a&lt;b&gt;&amp;&quot;c&apos;");
    }

    #[test]
    fn dominant_kind() {
        assert_eq!(dominant(&[5, 7, 0, 0]), OFF);
        assert_eq!(dominant(&[5, 5, 0, 0]), ON);
        assert_eq!(dominant(&[0, 0, 0, 3]), OTHER);
    }
}
