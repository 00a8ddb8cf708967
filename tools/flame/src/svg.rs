//! The SVG in one pass. inferno writes the document around the frames (its
//! header, styles, title, subtitle and interactive script: search, zoom,
//! tooltips, from its [`Options`]) and picks the palette colour of every
//! frame name ([`PaletteMap`]); the frame boxes themselves are written here,
//! once, from our layout, at the coordinates and in the markup inferno's
//! own drawing gives them (a test checks the bytes against inferno's).
//!
//! Why not inferno's `from_lines` for the boxes: its tooltips say `N
//! samples`, and its colour is one per frame name. A box here shows its
//! time and the split by kind, and takes the colour of the kind of time
//! beneath it, which differs between boxes of the same name.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Write;

use anyhow::{bail, Result};
use inferno::flamegraph::color::{Color, PaletteMap};
use inferno::flamegraph::{self, Direction, Options};

use wallclock_stream::fasthash::FastHash;
use crate::layout::FrameBox;

/// inferno's constants (private there): pad left and right, frame gap,
/// initial width of a fluid image, colours of `-` and `--` frames.
const XPAD: usize = 10;
const FRAMEPAD: usize = 1;
const DEFAULT_IMAGE_WIDTH: usize = 1200;
const DGREY: Color = Color { r: 200, g: 200, b: 200 };
const VDGREY: Color = Color { r: 160, g: 160, b: 160 };

/// Where inferno puts things, from its options.
pub struct Geometry {
    image_width: f64,
    imageheight: usize,
    ypad1: usize,
    ypad2: usize,
    frame_height: usize,
    inverted: bool,
    /// Width in characters of one percent of the image.
    chars_per_pct: f64,
    widthpertime_pct: f64,
}

impl Geometry {
    pub fn new(o: &Options<'_>, depthmax: usize, total: u64) -> Geometry {
        let sub = if o.subtitle.is_some() { o.font_size * 2 } else { 0 };
        let inverted = o.direction == Direction::Inverted;
        let (ypad1, ypad2) = if inverted {
            (o.font_size * 4 + sub + 4, o.font_size + 10)
        } else {
            (o.font_size * 3 + sub, o.font_size * 2 + 10)
        };
        let image_width = o.image_width.unwrap_or(DEFAULT_IMAGE_WIDTH) as f64;
        Geometry {
            image_width,
            imageheight: (depthmax + 1) * o.frame_height + ypad1 + ypad2,
            ypad1,
            ypad2,
            frame_height: o.frame_height,
            inverted,
            chars_per_pct: 100.0 * o.font_size as f64 * o.font_width / image_width,
            widthpertime_pct: 100.0 / total as f64,
        }
    }

    fn y(&self, depth: usize) -> (usize, usize) {
        let fh = self.frame_height;
        if self.inverted {
            (self.ypad1 + depth * fh, self.ypad1 + (depth + 1) * fh - FRAMEPAD)
        } else {
            let base = self.imageheight - self.ypad2;
            (base - (depth + 1) * fh + FRAMEPAD, base - depth * fh)
        }
    }
}

/// Everything inferno writes before the frames of a graph `depthmax`
/// frames deep: it draws a chain that deep (a few hundred bytes), and its
/// document is kept up to its frames container.
pub fn prelude(o: &mut Options<'_>, depthmax: usize) -> Result<Vec<u8>> {
    let mut chain = "x;".repeat(depthmax.max(1));
    chain.replace_range(chain.len() - 1.., " 1");
    let mut svg = Vec::with_capacity(64 << 10);
    flamegraph::from_lines(o, std::iter::once(chain.as_str()), &mut svg)?;
    let Some(cut) = svg.windows(16).position(|w| w == b"<svg id=\"frames\"") else {
        bail!("internal: no frames container in inferno's SVG");
    };
    svg.truncate(cut);
    Ok(svg)
}

/// inferno's palette colour of each name (its `--colors`, deterministic):
/// inferno draws each name once (as `p;NAME;-`, so that no name reads as a
/// value or a comment) and fills the map.
pub fn palette<'a>(o: &Options<'_>, names: impl Iterator<Item = &'a str>) -> Result<PaletteMap> {
    let mut seen: HashSet<&str, FastHash> = HashSet::default();
    let mut lines = String::new();
    for n in names.filter(|n| seen.insert(n)) {
        let _ = writeln!(lines, "p;{n};- 1");
    }
    let mut map = PaletteMap::default();
    if lines.is_empty() {
        return Ok(map);
    }
    let mut po = Options::default();
    po.colors = o.colors;
    po.hash = o.hash;
    po.deterministic = o.deterministic;
    po.min_width = 0.0;
    po.no_javascript = true;
    po.palette_map = Some(&mut map);
    flamegraph::from_lines(&mut po, lines.lines(), std::io::sink())?;
    map.insert("-", DGREY);
    map.insert("--", VDGREY);
    Ok(map)
}

/// Writes frame boxes, reusing one buffer.
pub struct FrameWriter {
    g: Geometry,
    buf: String,
}

impl FrameWriter {
    pub fn new(g: Geometry) -> FrameWriter {
        FrameWriter { g, buf: String::with_capacity(512) }
    }

    /// The frames container (inferno's), for `total`.
    pub fn open(&self, out: &mut dyn Write, total: u64) -> std::io::Result<()> {
        let w = self.g.image_width as usize - 2 * XPAD;
        write!(out, r#"<svg id="frames" x="{XPAD}" width="{w}" total_samples="{total}">"#)
    }

    pub fn close(&self, out: &mut dyn Write) -> std::io::Result<()> {
        out.write_all(b"</svg></svg>")
    }

    /// One box: `title` and `label` unescaped; `label` None: the name,
    /// truncated to the box as inferno truncates it.
    pub fn frame(
        &mut self,
        out: &mut dyn Write,
        b: &FrameBox<'_>,
        title: &str,
        fill: Color,
        label: Option<&str>,
    ) -> std::io::Result<()> {
        let g = &self.g;
        let x1 = b.start as f64 * g.widthpertime_pct;
        let x2 = b.end as f64 * g.widthpertime_pct;
        let (y1, y2) = g.y(b.depth);
        let s = &mut self.buf;
        s.clear();
        s.push_str("<g><title>");
        escape_into(s, title);
        let _ = write!(
            s,
            r#"</title><rect x="{x1:.4}%" y="{y1}" width="{:.4}%" height="{}" fill="rgb({},{},{})" fg:x="{}" fg:w="{}"/><text x="{:.4}%" y="{:.2}">"#,
            x2 - x1,
            y2 - y1,
            fill.r,
            fill.g,
            fill.b,
            b.start,
            b.end - b.start,
            x1 + 100.0 * 3.0 / g.image_width,
            3.0 + (y1 + y2) as f64 / 2.0,
        );
        match label {
            Some(l) => escape_into(s, l),
            None => {
                let fit = ((x2 - x1) / g.chars_per_pct).trunc() as usize;
                let name = crate::frame_name::shown(b.name);
                let name = name.as_ref();
                if fit < 3 {
                } else if name.len() < fit {
                    escape_into(s, name);
                } else {
                    let cut = name.char_indices().nth(fit - 2).map_or(name.len(), |(i, _)| i);
                    escape_into(s, &name[..cut]);
                    s.push_str("..");
                }
            }
        }
        s.push_str("</text></g>");
        out.write_all(s.as_bytes())
    }
}

/// XML-escape text, as inferno (quick-xml) escapes it; and, unlike it,
/// never write a character XML 1.0 forbids (even as a reference: C0
/// controls but tab, newline and return; U+FFFE, U+FFFF): those are
/// written as `\xHH` / `\u{HHHH}` text. Names reach here already checked
/// ([`wallclock_stream::names`]); this keeps every other text (a title
/// from a header, a label) from making a document that is not XML.
pub fn escape_into(out: &mut String, s: &str) {
    let mut last = 0;
    for (i, c) in s.bytes().enumerate() {
        let rep = match c {
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'&' => "&amp;",
            b'"' => "&quot;",
            b'\'' => "&apos;",
            b'\t' | b'\n' | b'\r' => continue,
            0..0x20 => {
                out.push_str(&s[last..i]);
                let _ = write!(out, "\\x{c:02x}");
                last = i + 1;
                continue;
            }
            // U+FFFE and U+FFFF: EF BF BE, EF BF BF.
            0xEF if matches!(s.as_bytes().get(i + 1..i + 3), Some([0xBF, 0xBE | 0xBF])) => {
                out.push_str(&s[last..i]);
                let _ = write!(out, "\\u{{{:04x}}}", s[i..].chars().next().map_or(0, |c| c as u32));
                last = i + 3;
                continue;
            }
            _ => continue,
        };
        out.push_str(&s[last..i]);
        out.push_str(rep);
        last = i + 1;
    }
    out.push_str(&s[last..]);
}

/// Text for inferno's own writer (the title and subtitle): the characters
/// XML forbids replaced as in [`escape_into`], the rest left for it to escape.
pub fn xml_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s);
    // Undo the entity escapes: inferno escapes them again.
    out.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use inferno::flamegraph::color::Palette;

    use crate::kinds::OTHER;
    use crate::layout::Entry;
    use crate::render::{render, RenderOptions, ValueUnit};

    const LINES: &str = "\
main;a;b 3
main;c 5
main;c;d<e>&'\" 7
main;a;a_function_name_long_enough_to_be_cut_where_inferno_cuts_it 1500
main;k_[k] 11
main;k_[k];ü_ünïcödé_näme_cut_at_a_char_boundary_or_it_panics 400
main;- 90
main;--;x 60
main;tiny 1
x;y 2
";

    fn ours(opts: &RenderOptions) -> String {
        let entries: Vec<Entry<'_>> = LINES
            .lines()
            .map(|l| l.rsplit_once(' ').unwrap())
            .map(|(stack, v)| {
                let mut mix = [0; 4];
                mix[OTHER] = v.parse().unwrap();
                Entry { stack, mix, before: 0 }
            })
            .collect();
        let mut out = Vec::new();
        render(entries, opts, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn inferno(opts: &RenderOptions) -> String {
        let mut o = inferno::flamegraph::Options::default();
        o.title = opts.title.clone();
        o.subtitle = opts.subtitle.clone();
        o.image_width = opts.width;
        o.min_width = opts.min_width;
        o.colors = opts.colors;
        o.deterministic = true;
        o.text_truncate_direction = inferno::flamegraph::TextTruncateDirection::Right;
        if opts.inverted {
            o.direction = inferno::flamegraph::Direction::Inverted;
        }
        let mut out = Vec::new();
        inferno::flamegraph::from_lines(&mut o, LINES.lines(), &mut out).unwrap();
        // The differences: our root title gives its percent as every box
        // does, and one sample is singular.
        String::from_utf8(out)
            .unwrap()
            .replace(" samples, 100%)</title>", " samples, 100.00%)</title>")
            .replace("<title>tiny (1 samples,", "<title>tiny (1 sample,")
    }

    /// Plain folded samples, where our tooltips say what inferno's say:
    /// the whole document is inferno's, byte for byte (frame geometry,
    /// palette colours, label truncation, escaping, script and header).
    #[test]
    fn frames_drawn_as_inferno_draws_them() {
        let base = RenderOptions {
            title: "T <1>".into(),
            root: None,
            subtitle: None,
            width: None,
            min_width: 0.1,
            inverted: false,
            colors: Palette::default(),
            unit: ValueUnit::Samples,
            diff: false,
        };
        let variants = [
            base.clone(),
            RenderOptions { inverted: true, subtitle: Some("sub".into()), ..base.clone() },
            RenderOptions { width: Some(700), min_width: 0.0, colors: "java".parse().unwrap(), ..base.clone() },
        ];
        for opts in variants {
            let (a, b) = (ours(&opts), inferno(&opts));
            assert!(a.contains("ü_ünïcödé_näme_cut_at_a_c") && a.contains("..</text>"), "{a}");
            if a != b {
                let i = a.bytes().zip(b.bytes()).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
                panic!("{opts:?}: differs from inferno at byte {i}:\n ours: {}\n inferno: {}", &a[i.saturating_sub(200)..(i + 200).min(a.len())], &b[i.saturating_sub(200)..(i + 200).min(b.len())]);
            }
        }
    }
}
