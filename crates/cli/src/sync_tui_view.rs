//! Drawing the interactive `accord sync`: one row per path with its
//! direction (`A ----> B`, `A <---- B`, `A <-?-> B` for a conflict,
//! `A ..... B` for a path left alone), what it does (deletions marked), a
//! status line, the help line, and a diff over the list when asked.

use crate::sync_tui::App;
use accord_engine::sync_plan;
use accord_engine::{ConflictReason, SyncItem};
use accord_model::{Entry, Kind};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

pub(crate) const HELP: &str = "? keys  up/down move  > A wins  < B wins  f flip  \
s skip  r revert  d diff  m merge  g go (propagate)  q quit";

/// Every key of the list, shown by '?'.
pub(crate) const KEYS: &[(&str, &str)] = &[
    (
        "up/down, j/k",
        "move; PgUp/PgDn, Home/End: by a page, to an end",
    ),
    ("> or a", "A's version wins (A ----> B)"),
    ("< or b", "B's version wins (A <---- B)"),
    ("f or space", "flip the direction"),
    ("s or /", "skip: leave the path alone this run"),
    ("r", "revert to what reconciliation planned"),
    ("d", "both versions, and the diff of two files"),
    (
        "m",
        "merge a conflict with --merge's program (m again: drop it)",
    ),
    ("g", "go: carry out the plan"),
    ("q or Esc", "quit: change nothing"),
    ("?", "these keys"),
    ("", ""),
    ("*", "a choice made here"),
    ("^", "decided with a directory above"),
    (
        "Enter or o",
        "open a folded directory into rows of its entries (again: fold it)",
    ),
    (
        "N inside",
        "a new or deleted directory's entries, carried with it",
    ),
];

/// Rows the list shows: every path with something to decide (agreements
/// only update the archives; what moves with a renamed directory is
/// decided with it).
pub(crate) fn is_shown(item: &SyncItem) -> bool {
    !matches!(
        item.action,
        sync_plan::Action::Agree | sync_plan::Action::MovedWith { .. }
    )
}

/// The direction of an item between the two roots' letters.
pub(crate) fn arrow(action: sync_plan::Action) -> &'static str {
    match sync_plan::winner(action) {
        Some(sync_plan::Side::A) => "A ----> B",
        Some(sync_plan::Side::B) => "A <---- B",
        None => match action {
            sync_plan::Action::Conflict(_) => "A <-?-> B",
            sync_plan::Action::Agree => "A ===== B",
            _ => "A ..... B",
        },
    }
}

fn kind_word(entry: &Entry) -> &'static str {
    match entry.kind {
        Kind::File => "file",
        Kind::Dir => "dir",
        Kind::Symlink => "link",
        Kind::Fifo => "fifo",
        Kind::Socket => "socket",
        Kind::CharDev | Kind::BlockDev => "device",
    }
}

fn side_letter(side: sync_plan::Side) -> &'static str {
    match side {
        sync_plan::Side::A => "A",
        sync_plan::Side::B => "B",
    }
}

fn reason_words(reason: ConflictReason) -> String {
    match reason {
        ConflictReason::BothChanged => "conflict: changed on both".into(),
        ConflictReason::DeletedAndChanged { deleted_on } => {
            format!("conflict: deleted on {}", side_letter(deleted_on))
        }
        ConflictReason::BothChangedProps => "conflict: props on both".into(),
        ConflictReason::ChangedBeneathRemovedDirectory { removed_on } => {
            format!("conflict: dir removed on {}", side_letter(removed_on))
        }
    }
}

/// What an item does, in a few words.
pub(crate) fn what(item: &SyncItem) -> String {
    match item.action {
        sync_plan::Action::Copy { from, to } => {
            let source = item.entry(from).map_or("entry", kind_word);
            match item.entry(to) {
                None => format!("new {source}"),
                Some(old) if old.kind == item.entry(from).map_or(old.kind, |e| e.kind) => {
                    format!("changed {source}")
                }
                Some(old) => format!("{source} replaces {}", kind_word(old)),
            }
        }
        sync_plan::Action::Delete { on } => format!("DELETE on {}", side_letter(on)),
        sync_plan::Action::CopyProps { .. } => "permissions".into(),
        sync_plan::Action::CopyContentsAndPropsBack { .. } => "contents, perms back".into(),
        sync_plan::Action::Conflict(reason) => reason_words(reason),
        sync_plan::Action::Agree => "agreed".into(),
        sync_plan::Action::Nothing => "skipped".into(),
        sync_plan::Action::Rename { on } => format!("RENAME on {}", side_letter(on)),
        sync_plan::Action::MovedWith { on } => format!("moved on {}", side_letter(on)),
        sync_plan::Action::KeepBoth { winner } => {
            format!("KEEP BOTH ({} kept aside)", side_letter(winner.other()))
        }
    }
}

/// The item's path; a rename's as `old -> new`.
fn path_text(item: &SyncItem) -> String {
    match &item.moved {
        Some(moved) if matches!(item.action, sync_plan::Action::Rename { .. }) => {
            format!("{} -> {}", moved.from.display(), item.path.display())
        }
        _ => item.path.display(),
    }
}

/// `*` a choice made here, `^` decided with a directory above.
fn mark(app: &App, item: &SyncItem) -> char {
    if app.edit.choice(&item.path).is_some() {
        '*'
    } else if app.edit.follows(&item.path).is_some() {
        '^'
    } else {
        ' '
    }
}

/// What the row of `item` says it does: a conflict the program merged
/// ('m') takes its result on both sides; one it failed on stays.
fn row_what(app: &App, item: &SyncItem) -> (&'static str, String) {
    match app.merge_of(item) {
        Some(Ok(size)) => (
            "A <-M-> B",
            format!("MERGED ({})", crate::summary::bytes(*size)),
        ),
        Some(Err(_)) => (arrow(item.action), "conflict: MERGE FAILED".into()),
        None => match app.folded_under(item) {
            0 => (arrow(item.action), what(item)),
            n => (arrow(item.action), format!("{}, {n} inside", what(item))),
        },
    }
}

/// Does `item` carry its whole subtree with one action (a new directory
/// copied, a directory deleted)? Its entries below with the same action
/// are folded into its row.
pub(crate) fn folds(item: &SyncItem) -> bool {
    let is_dir = |side| item.entry(side).is_some_and(|e| e.kind == Kind::Dir);
    match item.action {
        sync_plan::Action::Copy { from, to } => is_dir(from) && item.entry(to).is_none(),
        sync_plan::Action::Delete { on } => is_dir(on),
        _ => false,
    }
}

/// `text` cut to `width` characters in the middle, keeping its start and
/// its last component (the file's name) where they fit.
pub(crate) fn fit_middle(text: &str, width: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= width {
        return text.to_string();
    }
    if width < 2 {
        return "…".chars().take(width).collect();
    }
    let name_len = chars.len() - chars.iter().rposition(|&c| c == '/').unwrap_or(0);
    // The name with its slash, and at least a few characters of the start.
    let end = if name_len + 4 <= width {
        name_len
    } else {
        (width - 1) / 2
    };
    let start = width - 1 - end;
    let head: String = chars[..start].iter().collect();
    let tail: String = chars[chars.len() - end..].iter().collect();
    format!("{head}…{tail}")
}

/// The status line for the selected item: a failed merge says why.
fn status_of(app: &App, item: &SyncItem) -> String {
    match app.merge_of(item) {
        Some(Err(why)) => format!("{}: {why}", item.path.display()),
        _ => format!("{}: {}", item.path.display(), row_what(app, item).1),
    }
}

/// A row in `width` characters: a long path is cut in the middle.
fn row_text(app: &App, item: &SyncItem, cursor: &str, width: usize) -> String {
    let (arrow, what) = row_what(app, item);
    let head = format!("{cursor}{} {arrow}  {what:<26} ", mark(app, item));
    let room = width.saturating_sub(head.chars().count()).max(12);
    format!("{head}{}", fit_middle(&path_text(item), room))
}

fn row_style(item: &SyncItem) -> Style {
    match item.action {
        sync_plan::Action::Conflict(_) => Style::new().add_modifier(Modifier::BOLD),
        sync_plan::Action::Delete { .. } => Style::new().add_modifier(Modifier::UNDERLINED),
        sync_plan::Action::Nothing => Style::new().add_modifier(Modifier::DIM),
        _ => Style::new(),
    }
}

fn summary(app: &App) -> String {
    let items = app.edit.items();
    let count =
        |wanted: fn(&sync_plan::Action) -> bool| items.iter().filter(|i| wanted(&i.action)).count();
    let conflicts = count(|a| matches!(a, sync_plan::Action::Conflict(_)));
    let merges = items
        .iter()
        .filter(|item| matches!(app.merge_of(item), Some(Ok(_))))
        .count();
    let skipped = count(|a| *a == sync_plan::Action::Nothing);
    let changes = count(|a| {
        !matches!(
            a,
            sync_plan::Action::Agree
                | sync_plan::Action::MovedWith { .. }
                | sync_plan::Action::Conflict(_)
                | sync_plan::Action::Nothing
        )
    });
    let conflicts = conflicts - merges;
    format!(
        "accord sync: {changes} change(s), {merges} merged, {conflicts} conflict(s), \
         {skipped} skipped; nothing is changed before g"
    )
}

pub(crate) fn draw(frame: &mut Frame, app: &mut App) {
    let [head, list, status, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(summary(app)), head);
    draw_list(frame, app, list);
    let selected = app.rows.get(app.selected).map(|&i| &app.edit.items()[i]);
    let status_line = match selected {
        _ if !app.message.is_empty() => app.message.clone(),
        Some(item) => status_of(app, item),
        None => String::new(),
    };
    frame.render_widget(Paragraph::new(status_line), status);
    frame.render_widget(help_bar(HELP), help);
    if let Some(diff) = app.diff.as_mut() {
        diff.draw(frame, list);
    }
}

/// The help line at the foot of the screen.
pub(crate) fn help_bar(text: &str) -> Paragraph<'_> {
    Paragraph::new(text).style(Style::new().add_modifier(Modifier::REVERSED))
}

/// The first row to draw so that the selected one is on screen, moving
/// the view as little as it can from `top`.
pub(crate) fn keep_in_view(selected: usize, top: usize, height: usize) -> usize {
    if selected < top {
        selected
    } else if height > 0 && selected >= top + height {
        selected + 1 - height
    } else {
        top
    }
}

fn draw_list(frame: &mut Frame, app: &mut App, area: Rect) {
    let height = area.height as usize;
    app.top = keep_in_view(app.selected, app.top, height);
    let items = app.edit.items();
    let lines: Vec<Line> = app
        .rows
        .iter()
        .enumerate()
        .skip(app.top)
        .take(height)
        .map(|(row, &index)| {
            let item = &items[index];
            let cursor = if row == app.selected { ">" } else { " " };
            let mut style = row_style(item);
            if row == app.selected {
                style = style.add_modifier(Modifier::REVERSED);
            }
            Line::styled(row_text(app, item, cursor, area.width as usize), style)
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}

/// A bordered pane over `area` for the diff.
pub(crate) fn pane(frame: &mut Frame, area: Rect, title: String) -> Rect {
    let block = Block::new().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    frame.render_widget(Clear, area);
    frame.render_widget(block, area);
    inner
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_paths_are_cut_in_the_middle_keeping_the_name() {
        let path = "projects/2026/reports/quarterly/final/summary-of-everything.txt";
        let cut = fit_middle(path, 40);
        assert_eq!(cut.chars().count(), 40, "{cut}");
        assert!(cut.starts_with("projects/"), "{cut}");
        assert!(cut.ends_with("/summary-of-everything.txt"), "{cut}");
        assert!(cut.contains('…'), "{cut}");
        assert_eq!(fit_middle("short/name", 40), "short/name");
        // A name longer than the room: both of its ends.
        let cut = fit_middle("dir/a-very-long-file-name-indeed.txt", 12);
        assert_eq!(cut.chars().count(), 12, "{cut}");
        assert!(cut.ends_with(".txt"), "{cut}");
    }
}
