//! The interactive `accord sync A B C …` (a terminal, no `--batch`): after
//! reconciliation and before any change, the set's plan is shown with a
//! column per root, and a person chooses which root's version wins a
//! conflict (or any path), skips paths, looks at every version, then
//! confirms or quits. The plan is edited through
//! `accord_engine::set_plan::SetPlanEdit` (a root's version chosen is
//! carried out as `--force` is at that path; a skipped path is left alone);
//! this module reads keys, `sync_tui_set_view.rs` draws.
//!
//! The terminal, the panes over the list, the scrolling and the exit
//! status are the run of two roots' (`sync_tui.rs`); the keys mean what
//! they mean there, and a root's version is chosen with its letter, typed
//! as a capital (lower-case letters are the list's own keys).

use crate::sync_tui::Folds;
use crate::sync_tui::{finish_with, is_interrupt, on_pane_key, Asked, Outcome, Screen};
use crate::sync_tui_diff::{describe, file_diff, host_path, DiffView};
use crate::sync_tui_set_view::{draw, is_shown, letter, KEYS};
use accord_engine::set_plan::{
    Outcome as Planned, SetChoice, SetEditRefused, SetItem, SetPlanEdit,
};
use accord_engine::{Receive, SetMergeNow};
use accord_model::{Kind, RelPath};
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Mutex;

/// The interactive mode of one run of a set.
pub(crate) struct SetInteractive {
    asked: Asked,
    /// Each root as written, with its local directory (None: a remote
    /// root, whose files a diff cannot open).
    roots: Vec<(String, Option<PathBuf>)>,
    outcome: Mutex<Outcome>,
}

impl SetInteractive {
    /// The interactive mode, when the run is one (as for two roots).
    pub(crate) fn for_run(asked: Asked, roots: &[PathBuf], remote: &[bool]) -> Option<Self> {
        if !crate::sync_tui::asks(asked) {
            return None;
        }
        let roots = roots
            .iter()
            .zip(remote)
            .map(|(root, &far)| (root.display().to_string(), (!far).then(|| root.clone())))
            .collect();
        Some(SetInteractive {
            asked,
            roots,
            outcome: Mutex::new(Outcome::NotAsked),
        })
    }

    /// The engine's `edit_plan` hook: `order` gives each replica of the
    /// plan (by set index) its place among the roots as written; `merger`
    /// runs the merge program on a conflict now (`m`).
    pub(crate) fn edit(
        &self,
        edit: &mut SetPlanEdit<'_>,
        order: &[usize],
        merger: &dyn SetMergeNow,
    ) {
        // --auto: the conflicts only, the rest carried out as planned.
        let only = self.asked.auto.then(|| {
            edit.items()
                .iter()
                .filter(|item| matches!(item.outcome, Planned::Conflict { .. }))
                .map(|item| item.path.clone())
                .collect::<BTreeSet<RelPath>>()
        });
        let shown = match &only {
            Some(conflicts) => !conflicts.is_empty(),
            None => edit.items().iter().any(|item| is_shown(edit, item)),
        };
        if !shown {
            return;
        }
        let mut app = SetApp::new(edit, order, &self.roots, only);
        app.merging = self.asked.merge.then_some(merger);
        let outcome = match ask(&mut app) {
            Ok(outcome) => outcome,
            Err(e) => {
                // The plan is left as reconciled: conflicts are left, as in
                // batch mode.
                eprintln!("accord sync: cannot use the terminal ({e}); running as --batch");
                Outcome::NotAsked
            }
        };
        if let Outcome::Quit { .. } = outcome {
            app.edit.leave_all_alone();
        }
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = outcome;
    }

    /// The exit status, given the run's own (as for two roots).
    pub(crate) fn finish(&self, code: i32) -> i32 {
        finish_with(
            *self.outcome.lock().unwrap_or_else(|e| e.into_inner()),
            code,
        )
    }
}

/// What the list shows and where the person is in it.
pub(crate) struct SetApp<'e, 'p> {
    pub(crate) edit: &'e mut SetPlanEdit<'p>,
    /// By set index: the root's place as written (its column).
    pub(crate) place_of: Vec<usize>,
    /// Each root as written, and its local directory.
    pub(crate) roots: &'e [(String, Option<PathBuf>)],
    /// Indices into the plan's items of the rows shown.
    pub(crate) rows: Vec<usize>,
    pub(crate) selected: usize,
    /// The first row drawn (kept so the selection stays on screen).
    pub(crate) top: usize,
    /// A line for the person: why a key did nothing, ...
    pub(crate) message: String,
    /// A pane over the list: every version of a path, or the keys.
    pub(crate) pane: Option<DiffView>,
    /// `--auto`: the only paths listed (the conflicts as reconciled).
    only: Option<BTreeSet<RelPath>>,
    /// Runs the merge program on a conflict (`m`), with `--merge`.
    merging: Option<&'e dyn SetMergeNow>,
    /// What `m` made of each conflict given to it.
    pub(crate) merges: BTreeMap<RelPath, Result<u64, String>>,
    /// Directories whose rows hold their entries.
    pub(crate) folds: Folds,
}

impl<'e, 'p> SetApp<'e, 'p> {
    fn new(
        edit: &'e mut SetPlanEdit<'p>,
        order: &[usize],
        roots: &'e [(String, Option<PathBuf>)],
        only: Option<BTreeSet<RelPath>>,
    ) -> Self {
        let mut app = SetApp {
            edit,
            place_of: order.to_vec(),
            roots,
            rows: Vec::new(),
            selected: 0,
            top: 0,
            message: String::new(),
            pane: None,
            only,
            merging: None,
            merges: BTreeMap::new(),
            folds: Folds::default(),
        };
        app.refresh(None);
        app
    }

    /// The set index of the root written at `place`.
    fn index_at(&self, place: usize) -> Option<usize> {
        self.place_of.iter().position(|&p| p == place)
    }

    fn selected_path(&self) -> Option<RelPath> {
        let index = *self.rows.get(self.selected)?;
        Some(self.edit.items()[index].path.clone())
    }

    /// The rows again after an edit, the selection kept on its path (or on
    /// the next one, should it have gone).
    fn refresh(&mut self, keep: Option<&RelPath>) {
        let edit = &*self.edit;
        let listed = |item: &SetItem| match &self.only {
            Some(only) => only.contains(&item.path),
            None => is_shown(edit, item),
        };
        let rows = self.folds.rows(
            edit.items(),
            listed,
            |item| folds(edit, item),
            |item, top| goes_with(edit, item, top),
        );
        if let Some(path) = keep {
            self.selected = rows
                .iter()
                .position(|&i| edit.items()[i].path >= *path)
                .unwrap_or(rows.len());
        }
        self.rows = rows;
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
    }

    fn step(&mut self, by: isize) {
        let last = self.rows.len().saturating_sub(1) as isize;
        self.selected = (self.selected as isize + by).clamp(0, last) as usize;
    }

    /// Apply an edit to the selected path.
    fn change(
        &mut self,
        what: impl FnOnce(&mut SetPlanEdit<'p>, &RelPath) -> Result<(), SetEditRefused>,
    ) {
        let Some(path) = self.selected_path() else {
            return;
        };
        match what(self.edit, &path) {
            Ok(()) => self.message.clear(),
            Err(refused) => self.message = format!("{}: {refused}", path.display()),
        }
        self.refresh(Some(&path));
    }

    /// The root typed as `typed` wins at the selected path.
    fn take(&mut self, typed: char) {
        let place = usize::from(typed as u8 - b'A');
        match self.index_at(place) {
            Some(index) => {
                self.change(|edit, path| edit.choose(path, Some(SetChoice::Take(index))))
            }
            None => {
                self.message = format!(
                    "no root {typed}: the roots are A to {}",
                    letter(self.roots.len() - 1)
                )
            }
        }
    }

    /// 'd': every root's entry at the selected path, and the diff of two
    /// different files among them (on local roots).
    fn show_versions(&mut self) {
        let Some(path) = self.selected_path() else {
            return;
        };
        let Some(at) = self.edit.offers(&path) else {
            return;
        };
        let mut held = Vec::new();
        let mut lines = Vec::new();
        for place in 0..self.roots.len() {
            let name = letter(place);
            let offer = self
                .index_at(place)
                .and_then(|i| at.offers.iter().find(|o| o.replica == i));
            match offer {
                Some(offer) => {
                    lines.push(describe(&name, offer.now.as_deref()));
                    held.push((place, offer.now.clone()));
                }
                None => lines.push(format!("{name}: not reached this run")),
            }
        }
        lines.push(String::new());
        // The versions that matter first: a conflict's latest, the
        // version settled on.
        let item = self.edit.items().iter().find(|item| item.path == path);
        let first = |index: usize| match item.map(|item| &item.outcome) {
            Some(Planned::Conflict { versions, .. }) => versions
                .iter()
                .any(|v| v.latest && v.holders.contains(&index)),
            Some(Planned::Settled(settled)) => settled.holders.contains(&index),
            None => false,
        };
        held.sort_by_key(|&(place, _)| !self.index_at(place).is_some_and(first));
        lines.extend(self.two_files_diff(&path, &held));
        let title = format!(" {} (q: back, up/down/space: scroll) ", path.display());
        self.pane = Some(DiffView::of_lines(title, lines));
    }

    /// `diff -u` of the first two different files held (by place).
    fn two_files_diff(
        &self,
        path: &RelPath,
        held: &[(usize, Option<std::sync::Arc<accord_model::Entry>>)],
    ) -> Vec<String> {
        let files: Vec<&(usize, Option<_>)> = held
            .iter()
            .filter(|(_, e)| e.as_ref().is_some_and(|e| e.kind == Kind::File))
            .collect();
        let first = files.first();
        let other = first.and_then(|(_, x)| {
            files
                .iter()
                .find(|(_, y)| y.as_ref().map(|y| y.hash) != x.as_ref().map(|x| x.hash))
        });
        let (Some((x, _)), Some((y, _))) = (first, other) else {
            return vec!["(no two different files to compare)".into()];
        };
        let (Some(root_x), Some(root_y)) = (&self.roots[*x].1, &self.roots[*y].1) else {
            return vec!["(a remote root's contents are not fetched for a diff)".into()];
        };
        let mut lines = vec![format!("diff {} {}:", letter(*x), letter(*y))];
        lines.extend(file_diff(
            &host_path(root_x, path),
            &host_path(root_y, path),
        ));
        lines
    }

    /// `m`: run the merge program on the selected conflict now (nothing is
    /// written before g), or drop the merge it made.
    fn toggle_merge(&mut self) {
        let Some(&index) = self.rows.get(self.selected) else {
            return;
        };
        let item = &self.edit.items()[index];
        let path = item.path.clone();
        if !matches!(item.outcome, Planned::Conflict { .. }) || self.edit.is_skipped(&path) {
            self.message = format!("{}: not a conflict; nothing to merge", path.display());
            return;
        }
        let Some(merger) = self.merging else {
            self.message = "no merge program: start with --merge CMD".into();
            return;
        };
        if let Some(Ok(_)) = self.merges.remove(&path) {
            merger.forget(&path);
            self.message = format!("{}: merge dropped; still a conflict", path.display());
            return;
        }
        let outcome = merger.merge_now(item);
        self.message = match &outcome {
            Ok(size) => format!(
                "{}: merged ({size} bytes); written to every root on g",
                path.display()
            ),
            Err(why) => format!("{}: {why}", path.display()),
        };
        self.merges.insert(path, outcome);
    }

    /// What `m` made of `item`, while it is still a conflict.
    pub(crate) fn merge_of(&self, item: &SetItem) -> Option<&Result<u64, String>> {
        let conflict = matches!(item.outcome, Planned::Conflict { .. });
        let left = conflict && !self.edit.is_skipped(&item.path);
        left.then(|| self.merges.get(&item.path)).flatten()
    }

    /// Enter: open a folded directory's row into rows of its entries, or
    /// fold it again.
    fn toggle_open(&mut self) {
        let Some(path) = self.selected_path() else {
            return;
        };
        let index = self.rows[self.selected];
        if let Err(why) = self.folds.toggle(&path, index) {
            self.message = why;
            return;
        }
        self.message.clear();
        self.refresh(Some(&path));
    }

    /// '?': the keys, and which root each letter names.
    fn show_keys(&mut self) {
        let mut more = vec![String::new()];
        for (place, (name, _)) in self.roots.iter().enumerate() {
            more.push(format!("{:<16} {name}", letter(place)));
        }
        self.pane = Some(DiffView::keys_of(KEYS, more));
    }
}

/// Show the plan until the person confirms or quits.
fn ask(app: &mut SetApp) -> std::io::Result<Outcome> {
    let mut screen = Screen::open()?;
    loop {
        screen.terminal.draw(|frame| draw(frame, app))?;
        let Event::Key(key) = event::read()? else {
            continue; // a resize: drawn again
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if app.pane.is_some() {
            on_pane_key(&mut app.pane, key);
            continue;
        }
        if let Some(outcome) = on_list_key(app, key) {
            return Ok(outcome);
        }
    }
}

/// A key on the list; the outcome once the person is done.
fn on_list_key(app: &mut SetApp, key: KeyEvent) -> Option<Outcome> {
    if is_interrupt(key) {
        return Some(quit(app));
    }
    match key.code {
        KeyCode::Up | KeyCode::Char('k') => app.step(-1),
        KeyCode::Down | KeyCode::Char('j') => app.step(1),
        KeyCode::PageUp => app.step(-10),
        KeyCode::PageDown => app.step(10),
        KeyCode::Home => app.selected = 0,
        KeyCode::End => app.step(isize::MAX / 2),
        KeyCode::Char(typed) if typed.is_ascii_uppercase() => app.take(typed),
        KeyCode::Char('s') | KeyCode::Char('/') => app.change(|e, p| e.toggle_skip(p)),
        KeyCode::Char('r') => app.change(|e, p| e.choose(p, None)),
        KeyCode::Char('d') => app.show_versions(),
        KeyCode::Char('m') => app.toggle_merge(),
        KeyCode::Enter | KeyCode::Char('o') => app.toggle_open(),
        KeyCode::Char('?') | KeyCode::F(1) => app.show_keys(),
        KeyCode::Char('g') => return Some(confirm(app)),
        KeyCode::Char('q') | KeyCode::Esc => return Some(quit(app)),
        KeyCode::Char(typed) if typed.is_ascii_lowercase() || matches!(typed, '<' | '>') => {
            app.message = format!(
                "choose a root's version with its letter in capitals: A to {}",
                letter(app.roots.len() - 1)
            );
        }
        _ => {}
    }
    None
}

/// Does `item` carry its subtree with it: a directory new to every root
/// that receives it, or deleted from every root that receives the
/// deletion (and not skipped, chosen or decided above)?
fn folds(edit: &SetPlanEdit<'_>, item: &SetItem) -> bool {
    let Planned::Settled(settled) = &item.outcome else {
        return false;
    };
    if settled.receivers.is_empty() || edit.is_skipped(&item.path) {
        return false;
    }
    let Some(at) = edit.offers(&item.path) else {
        return false;
    };
    let holds_dir = |index: usize| {
        let offer = at.offers.iter().find(|o| o.replica == index);
        offer.and_then(|o| o.now.as_ref()).map(|e| e.kind)
    };
    let is_dir = settled.entry.as_ref().is_some_and(|e| e.kind == Kind::Dir);
    settled.receivers.iter().all(|&(r, receive)| match receive {
        Receive::Whole => is_dir && holds_dir(r).is_none(),
        Receive::Delete => settled.entry.is_none() && holds_dir(r) == Some(Kind::Dir),
        Receive::Props => false,
    })
}

/// Is `item` (below `top`) carried as `top` is, with nothing of its own?
fn goes_with(edit: &SetPlanEdit<'_>, item: &SetItem, top: &SetItem) -> bool {
    let (Planned::Settled(this), Planned::Settled(dir)) = (&item.outcome, &top.outcome) else {
        return false;
    };
    edit.choice(&item.path).is_none()
        && !edit.is_skipped(&item.path)
        && this.receivers == dir.receivers
        && this.holders == dir.holders
}

fn confirm(app: &SetApp) -> Outcome {
    let edit = &*app.edit;
    let skipped = edit
        .items()
        .iter()
        .filter(|item| edit.is_skipped(&item.path))
        .count();
    Outcome::Confirmed { skipped }
}

fn quit(app: &SetApp) -> Outcome {
    let edit = &*app.edit;
    let pending = edit
        .items()
        .iter()
        .filter(|item| match &item.outcome {
            Planned::Settled(settled) => {
                !settled.receivers.is_empty() && !edit.is_skipped(&item.path)
            }
            Planned::Conflict { .. } => false,
        })
        .count();
    Outcome::Quit { pending }
}
