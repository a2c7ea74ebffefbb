//! The interactive `accord sync` (a terminal, no `--batch`): after
//! reconciliation and before any change, the plan is shown as a list of
//! paths with direction arrows, and a person resolves conflicts, turns
//! propagations around, skips paths, looks at diffs, then confirms or
//! quits. The plan itself is edited through `accord_engine::PlanEdit`,
//! which keeps it one that reconciliation could make (a directory's
//! subtree follows it); this module only draws and reads keys.
//!
//! Keys are plain letters and arrows (no mouse, nothing a terminal over
//! ssh might not pass), listed on the help line.

use crate::exit;
use crate::sync_tui_diff::DiffView;
use crate::sync_tui_view::{draw, is_shown};
use accord_engine::sync_plan;
use accord_engine::{MergeNow, PlanEdit};
use accord_model::RelPath;
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How the person left the plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Not asked: nothing to show, or no terminal to show it on.
    #[default]
    NotAsked,
    /// Confirmed; `skipped` paths are left for another run.
    Confirmed { skipped: usize },
    /// Quit: nothing was changed; `pending` changes were not made.
    Quit { pending: usize },
}

/// What the command line asked of the interactive mode.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked {
    /// Ask nothing (`--batch`, `--watch`, `--json`).
    pub batch: bool,
    /// `--auto`: show only the conflicts, none: show nothing.
    pub auto: bool,
    /// `--merge CMD` was given ('m' has a program to run).
    pub merge: bool,
}

/// The interactive mode of one run.
pub(crate) struct Interactive {
    asked: Asked,
    /// Each root's local directory (None: a remote root, whose files the
    /// diff cannot open; it shows what the plan knows of them).
    roots: [Option<PathBuf>; 2],
    outcome: Mutex<Outcome>,
    /// What the merge program made of the conflicts given to it with 'm'
    /// (the size of its result, or why it failed); the engine writes the
    /// results of those still conflicts once the plan is confirmed.
    merges: Mutex<Merges>,
}

/// The outcome of 'm' by path: the merge's size, or why there is none.
pub(crate) type Merges = BTreeMap<RelPath, Result<u64, String>>;

impl Interactive {
    /// The interactive mode, when the run is one: not `--batch` or
    /// `--json`, and a person at a terminal on both stdin and stdout.
    pub(crate) fn for_run(asked: Asked, [a, b]: [&Path; 2], remote: [bool; 2]) -> Option<Self> {
        if !asks(asked) {
            return None;
        }
        let local = |root: &Path, is_remote: bool| (!is_remote).then(|| root.to_path_buf());
        Some(Interactive {
            asked,
            roots: [local(a, remote[0]), local(b, remote[1])],
            outcome: Mutex::new(Outcome::NotAsked),
            merges: Mutex::new(Merges::new()),
        })
    }

    /// The engine's `merge_chosen` hook: did 'm' merge `path`?
    pub(crate) fn merge_chosen(&self, path: &RelPath) -> bool {
        let merges = self.merges.lock().unwrap_or_else(|e| e.into_inner());
        matches!(merges.get(path), Some(Ok(_)))
    }

    /// The engine's `edit_plan_merging` hook.
    pub(crate) fn edit(&self, edit: &mut PlanEdit, merger: &dyn MergeNow) {
        // --auto: the conflicts only, the rest carried out as planned.
        let only = self.asked.auto.then(|| {
            edit.items()
                .iter()
                .filter(|item| matches!(item.action, sync_plan::Action::Conflict(_)))
                .map(|item| item.path.clone())
                .collect::<BTreeSet<RelPath>>()
        });
        let shown = match &only {
            Some(conflicts) => !conflicts.is_empty(),
            None => edit.items().iter().any(is_shown),
        };
        if !shown {
            return;
        }
        let mut merges = self.merges.lock().unwrap_or_else(|e| e.into_inner());
        let mut app = App::new(edit, merger, &mut merges, only, self.asked.merge);
        let outcome = match ask(&mut app, &self.roots) {
            Ok(outcome) => outcome,
            Err(e) => {
                // The plan is left as reconciled: conflicts are skipped, as
                // in batch mode.
                eprintln!("accord sync: cannot use the terminal ({e}); running as --batch");
                Outcome::NotAsked
            }
        };
        if let Outcome::Quit { .. } = outcome {
            edit.leave_all_alone();
            merges.clear();
        }
        *self.outcome.lock().unwrap_or_else(|e| e.into_inner()) = outcome;
    }

    /// The exit status, given the run's own: paths a person skipped, or a
    /// run quit with changes pending, are not "all agreed" (status 1, as
    /// for conflicts left).
    pub(crate) fn finish(&self, code: i32) -> i32 {
        finish_with(
            *self.outcome.lock().unwrap_or_else(|e| e.into_inner()),
            code,
        )
    }
}

/// Is the run interactive: not `--batch` (nor what implies it), and a
/// person at a terminal on both stdin and stdout?
pub(crate) fn asks(asked: Asked) -> bool {
    let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    !asked.batch && terminal
}

/// The exit status, given the run's own and how the person left the plan:
/// paths a person skipped, or a run quit with changes pending, are not
/// "all agreed" (status 1, as for conflicts left).
pub(crate) fn finish_with(outcome: Outcome, code: i32) -> i32 {
    let left = match outcome {
        Outcome::NotAsked => return code,
        Outcome::Confirmed { skipped } => {
            if skipped > 0 {
                eprintln!("accord sync: {skipped} path(s) skipped; left for another run");
            }
            skipped
        }
        Outcome::Quit { pending } => {
            eprintln!("accord sync: quit; nothing was changed");
            pending
        }
    };
    if code == exit::OK && left > 0 {
        exit::CONFLICTS
    } else {
        code
    }
}

/// The terminal in raw mode on the alternate screen, given back as it was
/// when dropped (also on an early return or an error).
pub(crate) struct Screen {
    pub(crate) terminal: ratatui::DefaultTerminal,
}

impl Screen {
    pub(crate) fn open() -> std::io::Result<Screen> {
        match ratatui::try_init() {
            Ok(terminal) => Ok(Screen { terminal }),
            Err(e) => {
                let _ = ratatui::try_restore();
                Err(e)
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        let _ = ratatui::try_restore();
    }
}

/// What the list shows and where the person is in it.
pub(crate) struct App<'e, 'u> {
    pub(crate) edit: &'e mut PlanEdit<'u>,
    /// Indices into the plan's items of the rows shown (not agreements).
    pub(crate) rows: Vec<usize>,
    pub(crate) selected: usize,
    /// The first row drawn (kept so the selection stays on screen).
    pub(crate) top: usize,
    /// A line for the person: why a key did nothing, ...
    pub(crate) message: String,
    pub(crate) diff: Option<DiffView>,
    /// Runs the merge program on a conflict ('m').
    pub(crate) merger: &'e dyn MergeNow,
    /// What 'm' made of each conflict given to it.
    pub(crate) merges: &'e mut Merges,
    /// `--auto`: the only paths listed (the conflicts as reconciled).
    only: Option<BTreeSet<RelPath>>,
    /// A merge program was given (`--merge`).
    can_merge: bool,
    /// Directories whose rows hold their entries.
    folds: Folds,
}

impl<'e, 'u> App<'e, 'u> {
    fn new(
        edit: &'e mut PlanEdit<'u>,
        merger: &'e dyn MergeNow,
        merges: &'e mut Merges,
        only: Option<BTreeSet<RelPath>>,
        can_merge: bool,
    ) -> Self {
        let mut app = App {
            edit,
            rows: Vec::new(),
            selected: 0,
            top: 0,
            message: String::new(),
            diff: None,
            merger,
            merges,
            only,
            can_merge,
            folds: Folds::default(),
        };
        app.refresh(None);
        app
    }
}

impl App<'_, '_> {
    /// How many entries are folded into `item`'s row.
    pub(crate) fn folded_under(&self, item: &accord_engine::SyncItem) -> usize {
        let items = self.edit.items();
        self.rows
            .iter()
            .find(|&&i| items[i].path == item.path)
            .and_then(|i| self.folds.folded.get(i))
            .copied()
            .unwrap_or(0)
    }

    /// What 'm' made of `item`, while it is still a conflict.
    pub(crate) fn merge_of(&self, item: &accord_engine::SyncItem) -> Option<&Result<u64, String>> {
        if !matches!(item.action, sync_plan::Action::Conflict(_)) {
            return None;
        }
        self.merges.get(&item.path)
    }

    /// The key 'm': run the merge program on the selected conflict now
    /// (nothing is written before g), or drop the merge it made.
    fn toggle_merge(&mut self) {
        let Some(&index) = self.rows.get(self.selected) else {
            return;
        };
        let item = &self.edit.items()[index];
        let path = item.path.clone();
        if !matches!(item.action, sync_plan::Action::Conflict(_)) {
            self.message = format!("{}: not a conflict; nothing to merge", path.display());
            return;
        }
        if !self.can_merge {
            self.message = "no merge program: start with --merge CMD".into();
            return;
        }
        if let Some(Ok(_)) = self.merges.remove(&path) {
            self.merger.forget(&path);
            self.message = format!("{}: merge dropped; still a conflict", path.display());
            return;
        }
        let outcome = self.merger.merge_now(item);
        self.message = match &outcome {
            Ok(size) => format!(
                "{}: merged ({size} bytes); written to both sides on g",
                path.display()
            ),
            Err(why) => format!("{}: {why}", path.display()),
        };
        self.merges.insert(path, outcome);
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

    fn selected_path(&self) -> Option<RelPath> {
        let index = *self.rows.get(self.selected)?;
        Some(self.edit.items()[index].path.clone())
    }

    /// The rows again after an edit, the selection kept on its path (or on
    /// the next one, should it have gone).
    fn refresh(&mut self, keep: Option<&RelPath>) {
        let items = self.edit.items();
        let listed = |item: &accord_engine::SyncItem| match &self.only {
            Some(only) => only.contains(&item.path),
            None => is_shown(item),
        };
        let folds = crate::sync_tui_view::folds;
        let goes_with = |item: &accord_engine::SyncItem, top: &accord_engine::SyncItem| {
            item.action == top.action
        };
        self.rows = self.folds.rows(items, listed, folds, goes_with);
        if let Some(path) = keep {
            self.selected = self
                .rows
                .iter()
                .position(|&i| items[i].path >= *path)
                .unwrap_or(self.rows.len());
        }
        self.selected = self.selected.min(self.rows.len().saturating_sub(1));
    }

    fn step(&mut self, by: isize) {
        let last = self.rows.len().saturating_sub(1) as isize;
        self.selected = (self.selected as isize + by).clamp(0, last) as usize;
    }

    /// Apply an edit to the selected path.
    fn change(
        &mut self,
        what: impl FnOnce(&mut PlanEdit, &RelPath) -> Result<(), accord_engine::EditRefused>,
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
}

/// The directories whose rows hold their entries (a new or deleted
/// directory carries what is inside it), and those the person opened.
#[derive(Default)]
pub(crate) struct Folds {
    /// By the directory's item index: how many entries its row holds.
    pub(crate) folded: BTreeMap<usize, usize>,
    /// Directories opened with Enter: their entries have rows again.
    opened: BTreeSet<RelPath>,
}

/// An item of a list that folds: its path.
pub(crate) trait AtPath {
    fn at_path(&self) -> &RelPath;
}

impl AtPath for accord_engine::SyncItem {
    fn at_path(&self) -> &RelPath {
        &self.path
    }
}

impl AtPath for accord_engine::set_plan::SetItem {
    fn at_path(&self) -> &RelPath {
        &self.path
    }
}

impl Folds {
    /// The rows of the items `listed` (indices into `items`), a folding
    /// directory's entries that go with it folded into its row.
    /// `folds`: may an item's row hold its subtree; `goes_with`: is an
    /// entry below such a row carried with it.
    pub(crate) fn rows<T: AtPath>(
        &mut self,
        items: &[T],
        listed: impl Fn(&T) -> bool,
        folds: impl Fn(&T) -> bool,
        goes_with: impl Fn(&T, &T) -> bool,
    ) -> Vec<usize> {
        let mut rows = Vec::new();
        self.folded.clear();
        // The directory whose subtree is folded: its index.
        let mut open: Option<usize> = None;
        for (index, item) in items.iter().enumerate() {
            if !listed(item) {
                continue;
            }
            let at = item.at_path();
            let top = open.map(|top| &items[top]);
            match top.filter(|top| at != top.at_path() && at.starts_with(top.at_path())) {
                Some(top) if goes_with(item, top) => {
                    *self.folded.entry(open.expect("a top")).or_insert(0) += 1;
                    continue;
                }
                Some(_) => {}
                None => {
                    let folding = folds(item) && !self.opened.contains(at);
                    open = folding.then_some(index);
                }
            }
            rows.push(index);
        }
        rows
    }

    /// Enter on the row of `path` (item `index`): open it into rows of its
    /// entries, or fold it again; `Err`: nothing is folded there.
    pub(crate) fn toggle(&mut self, path: &RelPath, index: usize) -> Result<(), String> {
        if self.opened.remove(path) {
            return Ok(());
        }
        if !self.folded.contains_key(&index) {
            return Err(format!("{}: nothing folded here", path.display()));
        }
        self.opened.insert(path.clone());
        Ok(())
    }
}

/// Show the plan until the person confirms or quits.
fn ask(app: &mut App, roots: &[Option<PathBuf>; 2]) -> std::io::Result<Outcome> {
    let mut screen = Screen::open()?;
    loop {
        screen.terminal.draw(|frame| draw(frame, app))?;
        let Event::Key(key) = event::read()? else {
            continue; // a resize: drawn again
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if app.diff.is_some() {
            on_pane_key(&mut app.diff, key);
            continue;
        }
        if let Some(outcome) = on_list_key(app, key, roots) {
            return Ok(outcome);
        }
    }
}

pub(crate) fn is_interrupt(key: KeyEvent) -> bool {
    key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c')
}

/// A key on the list; the outcome once the person is done.
fn on_list_key(app: &mut App, key: KeyEvent, roots: &[Option<PathBuf>; 2]) -> Option<Outcome> {
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
        KeyCode::Char('>') | KeyCode::Char('a') => app.change(|e, p| e.take(p, sync_plan::Side::A)),
        KeyCode::Char('<') | KeyCode::Char('b') => app.change(|e, p| e.take(p, sync_plan::Side::B)),
        KeyCode::Char('f') | KeyCode::Char(' ') => app.change(|e, p| e.flip(p)),
        KeyCode::Char('s') | KeyCode::Char('/') => app.change(|e, p| e.toggle_skip(p)),
        KeyCode::Char('r') => app.change(|e, p| e.choose(p, None)),
        KeyCode::Char('d') => {
            if let Some(&index) = app.rows.get(app.selected) {
                app.diff = Some(DiffView::of(&app.edit.items()[index], roots));
            }
        }
        KeyCode::Char('m') => app.toggle_merge(),
        KeyCode::Enter | KeyCode::Char('o') => app.toggle_open(),
        KeyCode::Char('?') | KeyCode::F(1) => app.diff = Some(DiffView::keys()),
        KeyCode::Char('g') => return Some(confirm(app)),
        KeyCode::Char('q') | KeyCode::Esc => return Some(quit(app)),
        _ => {}
    }
    None
}

/// A key on the pane over the list (a diff, the keys): scroll, or close.
pub(crate) fn on_pane_key(pane: &mut Option<DiffView>, key: KeyEvent) {
    let Some(diff) = pane.as_mut() else {
        return;
    };
    match key.code {
        KeyCode::Up | KeyCode::Char('k') => diff.scroll(-1),
        KeyCode::Down | KeyCode::Char('j') | KeyCode::Enter => diff.scroll(1),
        KeyCode::PageUp | KeyCode::Char('b') => diff.scroll(-20),
        KeyCode::PageDown | KeyCode::Char(' ') => diff.scroll(20),
        KeyCode::Char('q') | KeyCode::Esc | KeyCode::Char('d') => *pane = None,
        _ if is_interrupt(key) => *pane = None,
        _ => {}
    }
}

fn confirm(app: &App) -> Outcome {
    let skipped = app
        .edit
        .items()
        .iter()
        .filter(|item| item.action == sync_plan::Action::Nothing)
        .count();
    Outcome::Confirmed { skipped }
}

fn quit(app: &App) -> Outcome {
    let pending = app
        .edit
        .items()
        .iter()
        .filter(|item| {
            !matches!(
                item.action,
                sync_plan::Action::Nothing
                    | sync_plan::Action::Agree
                    | sync_plan::Action::Conflict(_)
            )
        })
        .count();
    Outcome::Quit { pending }
}
