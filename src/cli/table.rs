//! Plain-text tables: each column as wide as its widest cell (the header's
//! included), two spaces apart, the last one unpadded; so columns line up
//! whatever the cells hold (cell ids of any length).

/// A table: a header and rows of as many cells.
pub(crate) struct Table {
    header: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

const GAP: &str = "  ";

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|h| h.to_string()).collect(), right: vec![false; header.len()], rows: vec![] }
    }

    /// Align column `i` to the right (numbers, sizes).
    pub fn right(mut self, i: usize) -> Table {
        self.right[i] = true;
        self
    }

    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len(), "a row of as many cells as the header");
        self.rows.push(cells);
    }

    /// The header's line, then one line per row.
    pub fn lines(&self) -> Vec<String> {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let last = cells.len().saturating_sub(1);
            let mut out = String::new();
            for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
                if i > 0 {
                    out.push_str(GAP);
                }
                let pad = w.saturating_sub(c.chars().count());
                if self.right[i] {
                    out.extend(std::iter::repeat_n(' ', pad));
                    out.push_str(c);
                } else {
                    out.push_str(c);
                    if i < last {
                        out.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            out
        };
        std::iter::once(line(&self.header)).chain(self.rows.iter().map(|r| line(r))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut t = Table::new(&["cell", "n", "state"]).right(1);
        t.row(vec!["a-very-long-cell-id_with-many-axes".into(), "7".into(), "to run".into()]);
        t.row(vec!["b".into(), "12".into(), "done".into()]);
        let lines = t.lines();
        assert_eq!(
            lines,
            [
                "cell                                 n  state",
                "a-very-long-cell-id_with-many-axes   7  to run",
                "b                                   12  done",
            ]
        );
    }
}
