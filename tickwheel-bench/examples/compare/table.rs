//! The tables: rows collected, then rendered as plain text (columns as wide as their widest
//! cell) or as Markdown.

/// A table: a header, rows of cells, printed once complete.
#[derive(Debug)]
pub struct Table {
    markdown: bool,
    /// The header of the first column (the row labels).
    first: String,
    /// The headers of the other columns.
    names: Vec<String>,
    rows: Vec<(String, Vec<String>)>,
}

impl Table {
    pub fn new(markdown: bool, first: &str, names: &[&str]) -> Table {
        Table {
            markdown,
            first: first.to_string(),
            names: names.iter().map(|n| n.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row: its label, then one cell per column.
    pub fn row(&mut self, label: &str, cells: Vec<String>) {
        self.rows.push((label.to_string(), cells));
    }

    pub fn print(&self) {
        print!("{}", self.render());
    }

    /// The table's text, one line per row after the header, each ending in a newline.
    pub fn render(&self) -> String {
        if self.markdown {
            self.markdown()
        } else {
            self.plain()
        }
    }

    /// Plain text: the first column left-aligned, the others right-aligned, each as wide as
    /// its widest text (header or cell, in characters), two spaces apart.
    fn plain(&self) -> String {
        let header = std::iter::once((&self.first, &self.names));
        let lines: Vec<(&String, &Vec<String>)> = header
            .chain(self.rows.iter().map(|(label, cells)| (label, cells)))
            .collect();
        let width = |text: &String| text.chars().count();
        let first = lines
            .iter()
            .map(|(label, _)| width(label))
            .max()
            .unwrap_or(0);
        let columns = lines
            .iter()
            .map(|(_, cells)| cells.len())
            .max()
            .unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|j| {
                let cells = lines.iter().filter_map(|(_, cells)| cells.get(j));
                cells.map(width).max().unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for (label, cells) in lines {
            out.push_str(&format!("{label:<first$}"));
            for (cell, w) in cells.iter().zip(&widths) {
                out.push_str(&format!("  {cell:>w$}"));
            }
            out.push('\n');
        }
        out
    }

    fn markdown(&self) -> String {
        // `Mutex<DelayQueue>` would read as an HTML tag in Markdown: code spans for names
        // with generics.
        let names: Vec<String> = self
            .names
            .iter()
            .map(|n| {
                if n.contains('<') {
                    format!("`{n}`")
                } else {
                    n.clone()
                }
            })
            .collect();
        let mut out = format!("| {} | {} |\n", self.first, names.join(" | "));
        out.push_str(&format!("|---|{}\n", "---:|".repeat(self.names.len())));
        for (label, cells) in &self.rows {
            out.push_str(&format!("| {label} | {} |\n", cells.join(" | ")));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduler table at 1 M timers: cells longer than their headers.
    fn scheduler(markdown: bool) -> Table {
        let mut t = Table::new(
            markdown,
            "scheduler",
            &["tickwheel", "Mutex<DelayQueue>", "Mutex<BTreeMap>"],
        );
        let cells = [
            "244 [219–253]",
            "1271 [1203–1302] (5.2×)",
            "~12345 [9876–23456] (50.6×)",
        ];
        t.row("7 scheduler, n=1000000", cells.map(String::from).to_vec());
        t.row(
            "7 scheduler, n=1000",
            ["1.25", "2.50 (2.0×)", "3.75 (3.0×)"]
                .map(String::from)
                .to_vec(),
        );
        t
    }

    /// The character columns at which each column of `line` ends: the last character of
    /// every run of non-spaces that is followed by at least two spaces or the line's end.
    fn column_ends(line: &str) -> Vec<usize> {
        let chars: Vec<char> = line.chars().collect();
        (0..chars.len())
            .filter(|&i| {
                chars[i] != ' ' && (i + 1 == chars.len() || chars[i + 1..].starts_with(&[' ', ' ']))
            })
            .collect()
    }

    #[test]
    fn plain_columns_align_whatever_the_cell_widths() {
        let text = scheduler(false).render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // Right-aligned columns: every line ends each of the three columns at the same
        // character; the first column is left-aligned, so every line starts its second
        // column's text after the same padding of the first.
        let ends: Vec<Vec<usize>> = lines.iter().map(|l| column_ends(l)[1..].to_vec()).collect();
        assert!(
            ends.iter().all(|e| e.len() == 3 && *e == ends[0]),
            "{text}\n{ends:?}"
        );
        let widths: Vec<usize> = lines.iter().map(|l| l.chars().count()).collect();
        assert!(widths.iter().all(|&w| w == widths[0]), "{text}");
        for line in &lines {
            assert!(line.contains("  "), "columns are apart: {text}");
        }
    }

    #[test]
    fn plain_cells_are_never_cut() {
        let text = scheduler(false).render();
        for cell in [
            "~12345 [9876–23456] (50.6×)",
            "7 scheduler, n=1000000",
            "Mutex<DelayQueue>",
        ] {
            assert!(text.contains(cell), "{cell}: {text}");
        }
    }

    #[test]
    fn markdown_is_a_markdown_table() {
        let text = scheduler(true).render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "| scheduler | tickwheel | `Mutex<DelayQueue>` | `Mutex<BTreeMap>` |",
                "|---|---:|---:|---:|",
                "| 7 scheduler, n=1000000 | 244 [219–253] | 1271 [1203–1302] (5.2×) | ~12345 [9876–23456] (50.6×) |",
                "| 7 scheduler, n=1000 | 1.25 | 2.50 (2.0×) | 3.75 (3.0×) |",
            ]
        );
    }
}
