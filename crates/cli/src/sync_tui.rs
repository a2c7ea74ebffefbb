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
use accord_engine::{PlanEdit, SyncAction, SyncSide};
use accord_model::RelPath;
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// How the person left the plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Outcome {
    /// Not asked: nothing to show, or no terminal to show it on.
    #[default]
    NotAsked,
    /// Confirmed; `skipped` paths are left for another run.
    Confirmed { skipped: usize },
    /// Quit: nothing was changed; `pending` changes were not made.
    Quit { pending: usize },
}

/// The interactive mode of one run.
pub(crate) struct Interactive {
    /// Each root's local directory (None: a remote root, whose files the
    /// diff cannot open; it shows what the plan knows of them).
    roots: [Option<PathBuf>; 2],
    outcome: Mutex<Outcome>,
    /// A merge program was given (`--merge`): 'm' marks conflicts for it.
    can_merge: bool,
    /// The conflicts marked with 'm' (the engine merges those still
    /// conflicts once the plan is confirmed).
    merges: Mutex<BTreeSet<RelPath>>,
}

impl Interactive {
    /// The interactive mode, when the run is one: not `--batch` or
    /// `--json`, and a person at a terminal on both stdin and stdout.
    pub(crate) fn for_run(
        batch: bool,
        json: bool,
        a: &Path,
        b: &Path,
        remote: [bool; 2],
    ) -> Option<Self> {
        let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        if batch || json || !terminal {
            return None;
        }
        let local = |root: &Path, is_remote: bool| (!is_remote).then(|| root.to_path_buf());
        Some(Interactive {
            roots: [local(a, remote[0]), local(b, remote[1])],
            outcome: Mutex::new(Outcome::NotAsked),
            can_merge: false,
            merges: Mutex::new(BTreeSet::new()),
        })
    }

    /// `--merge` was given: the key 'm' marks conflicts for the program.
    pub(crate) fn with_merge(self, can_merge: bool) -> Self {
        Interactive { can_merge, ..self }
    }

    /// The engine's `merge_chosen` hook: was `path` marked with 'm'?
    pub(crate) fn merge_chosen(&self, path: &RelPath) -> bool {
        let merges = self.merges.lock().unwrap_or_else(|e| e.into_inner());
        merges.contains(path)
    }

    /// The engine's `edit_plan` hook.
    pub(crate) fn edit(&self, edit: &mut PlanEdit) {
        if !edit.items().iter().any(is_shown) {
            return;
        }
        let mut merges = self.merges.lock().unwrap_or_else(|e| e.into_inner());
        let merging = self.can_merge.then_some(&mut *merges);
        let outcome = match ask(edit, &self.roots, merging) {
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
        let outcome = *self.outcome.lock().unwrap_or_else(|e| e.into_inner());
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
}

/// The terminal in raw mode on the alternate screen, given back as it was
/// when dropped (also on an early return or an error).
struct Screen {
    terminal: ratatui::DefaultTerminal,
}

impl Screen {
    fn open() -> std::io::Result<Screen> {
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
    /// The conflicts marked for the merge program (None: no `--merge`).
    pub(crate) merges: Option<&'e mut BTreeSet<RelPath>>,
}

impl App<'_, '_> {
    /// Is `item` a conflict marked for the merge program?
    pub(crate) fn merging(&self, item: &accord_engine::SyncItem) -> bool {
        matches!(item.action, SyncAction::Conflict(_))
            && self
                .merges
                .as_ref()
                .is_some_and(|merges| merges.contains(&item.path))
    }

    /// The key 'm': mark the selected conflict for the merge program, or
    /// take the mark back.
    fn toggle_merge(&mut self) {
        let Some(&index) = self.rows.get(self.selected) else {
            return;
        };
        let item = &self.edit.items()[index];
        let path = item.path.clone();
        let mergeable = is_mergeable(item);
        let Some(merges) = self.merges.as_mut() else {
            self.message = "no merge program: run with --merge CMD".into();
            return;
        };
        self.message = if !mergeable {
            format!(
                "{}: only a conflict between two regular files can be merged",
                path.display()
            )
        } else if merges.remove(&path) {
            format!("{}: not merged", path.display())
        } else {
            merges.insert(path.clone());
            format!("{}: merged by the program on g", path.display())
        };
    }

    fn selected_path(&self) -> Option<RelPath> {
        let index = *self.rows.get(self.selected)?;
        Some(self.edit.items()[index].path.clone())
    }

    /// The rows again after an edit, the selection kept on its path (or on
    /// the next one, should it have gone).
    fn refresh(&mut self, keep: Option<&RelPath>) {
        let items = self.edit.items();
        self.rows = (0..items.len()).filter(|&i| is_shown(&items[i])).collect();
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

/// Show the plan until the person confirms or quits.
fn ask(
    edit: &mut PlanEdit,
    roots: &[Option<PathBuf>; 2],
    merges: Option<&mut BTreeSet<RelPath>>,
) -> std::io::Result<Outcome> {
    let mut screen = Screen::open()?;
    let mut app = App {
        edit,
        rows: Vec::new(),
        selected: 0,
        top: 0,
        message: String::new(),
        diff: None,
        merges,
    };
    app.refresh(None);
    loop {
        screen.terminal.draw(|frame| draw(frame, &mut app))?;
        let Event::Key(key) = event::read()? else {
            continue; // a resize: drawn again
        };
        if key.kind != KeyEventKind::Press {
            continue;
        }
        if app.diff.is_some() {
            on_diff_key(&mut app, key);
            continue;
        }
        if let Some(outcome) = on_list_key(&mut app, key, roots) {
            return Ok(outcome);
        }
    }
}

fn is_interrupt(key: KeyEvent) -> bool {
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
        KeyCode::Char('>') | KeyCode::Char('a') => app.change(|e, p| e.take(p, SyncSide::A)),
        KeyCode::Char('<') | KeyCode::Char('b') => app.change(|e, p| e.take(p, SyncSide::B)),
        KeyCode::Char('f') | KeyCode::Char(' ') => app.change(|e, p| e.flip(p)),
        KeyCode::Char('s') | KeyCode::Char('/') => app.change(|e, p| e.toggle_skip(p)),
        KeyCode::Char('r') => app.change(|e, p| e.choose(p, None)),
        KeyCode::Char('d') => {
            if let Some(&index) = app.rows.get(app.selected) {
                app.diff = Some(DiffView::of(&app.edit.items()[index], roots));
            }
        }
        KeyCode::Char('m') => app.toggle_merge(),
        KeyCode::Char('g') => return Some(confirm(app)),
        KeyCode::Char('q') | KeyCode::Esc => return Some(quit(app)),
        _ => {}
    }
    None
}

/// A conflict the merge program may be given: two regular files (whether
/// their properties agree the engine checks, and says).
fn is_mergeable(item: &accord_engine::SyncItem) -> bool {
    let file = |side| {
        item.entry(side)
            .is_some_and(|e| e.kind == accord_model::Kind::File)
    };
    matches!(item.action, SyncAction::Conflict(_)) && file(SyncSide::A) && file(SyncSide::B)
}

fn on_diff_key(app: &mut App, key: KeyEvent) {
    let Some(diff) = app.diff.as_mut() else {
        return;
    };
    match key.code {
        KeyCode::Up | KeyCode::Char('k') => diff.scroll(-1),
        KeyCode::Down | KeyCode::Char('j') | KeyCode::Enter => diff.scroll(1),
        KeyCode::PageUp | KeyCode::Char('b') => diff.scroll(-20),
        KeyCode::PageDown | KeyCode::Char(' ') => diff.scroll(20),
        KeyCode::Char('q') | KeyCode::Esc | KeyCode::Char('d') => app.diff = None,
        _ if is_interrupt(key) => app.diff = None,
        _ => {}
    }
}

fn confirm(app: &App) -> Outcome {
    let skipped = app
        .edit
        .items()
        .iter()
        .filter(|item| item.action == SyncAction::Nothing)
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
                SyncAction::Nothing | SyncAction::Agree | SyncAction::Conflict(_)
            )
        })
        .count();
    Outcome::Quit { pending }
}
