//! Drawing the interactive `accord sync A B C …`: a row per path with a
//! column per root, in the order written, saying what that root holds or
//! receives (`changed`, `new`, `deleted`, `props` for a change of its own;
//! `<-` receives the version, `<-props` its properties, `<-delete` deletes;
//! `conflict` holds one of a conflict's latest versions without a change
//! of its own this run; `away` could not be reached; blank: it agrees),
//! then what the path does, a status line and the help line.

use crate::sync_tui_set::SetApp;
use crate::sync_tui_view::{fit_middle, help_bar, keep_in_view};
use accord_engine::set_plan::{Offer, Outcome, SetItem, SetPlanEdit, SetPolicy, Settled, Update};
use accord_engine::{Receive, SetConflict};
use accord_model::{Entry, Kind};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::Paragraph;
use ratatui::Frame;

pub(crate) const HELP: &str = "? keys  up/down move  A B C… that root wins  s skip  \
r revert  d versions  m merge  Enter open  g go (propagate)  q quit";

/// Every key of the list, shown by '?'.
pub(crate) const KEYS: &[(&str, &str)] = &[
    (
        "up/down, j/k",
        "move; PgUp/PgDn, Home/End: by a page, to an end",
    ),
    (
        "A, B, C …",
        "that root's version wins (capitals; as --force for this path)",
    ),
    ("s or /", "skip: leave the path alone this run"),
    ("r", "revert to what reconciliation planned"),
    ("d", "every root's version, and the diff of two files"),
    (
        "m",
        "merge a conflict with --merge's program now (m again: drop it)",
    ),
    (
        "Enter or o",
        "open a folded directory into rows of its entries (again: fold it)",
    ),
    ("g", "go: carry out the plan"),
    ("q or Esc", "quit: change nothing"),
    ("?", "these keys"),
    ("", ""),
    ("*", "a choice made here"),
    ("^", "decided with a directory above"),
    (
        "changed new",
        "a change of that root's own (deleted, props)",
    ),
    ("<-", "receives the version (<-props: properties, <-delete)"),
    ("conflict", "holds a latest version, unchanged this run"),
    ("away", "could not be reached; catches up at its next run"),
    (
        "N inside",
        "a new or deleted directory's entries, carried with it",
    ),
];

/// Columns' width: the longest word a cell holds, and a space.
const CELL: usize = 9;

/// The letter of the root written at `place`: A, B, C …
pub(crate) fn letter(place: usize) -> String {
    char::from(b'A' + place as u8).to_string()
}

/// Rows the list shows: every path with something to decide (agreements
/// only update the records).
pub(crate) fn is_shown(edit: &SetPlanEdit<'_>, item: &SetItem) -> bool {
    match &item.outcome {
        Outcome::Conflict { .. } => true,
        Outcome::Settled(settled) => {
            !settled.receivers.is_empty()
                || !settled.kept.is_empty()
                || edit.choice(&item.path).is_some()
        }
    }
}

/// A change of a replica's own, in a word (none: no change).
fn change_word(update: &Update) -> &'static str {
    match update {
        Update::Unchanged | Update::Touched => "",
        Update::Created => "new",
        Update::Deleted { .. } => "deleted",
        Update::Changed(changes) if changes.contents || changes.kind => "changed",
        Update::Changed(_) => "props",
    }
}

fn receive_word(receive: Receive) -> &'static str {
    match receive {
        Receive::Whole => "<-",
        Receive::Props => "<-props",
        Receive::Delete => "<-delete",
    }
}

/// The cell of replica `index` (by set index) at `item`.
fn cell(edit: &SetPlanEdit<'_>, item: &SetItem, index: usize) -> &'static str {
    let offer = edit
        .offers(&item.path)
        .and_then(|at| at.offers.iter().find(|offer| offer.replica == index));
    let Some(offer) = offer else {
        return "away";
    };
    let own = change_word(&offer.update);
    match &item.outcome {
        _ if edit.is_skipped(&item.path) => own,
        Outcome::Settled(settled) => settled
            .receivers
            .iter()
            .find(|&&(r, _)| r == index)
            .map_or(own, |&(_, receive)| receive_word(receive)),
        Outcome::Conflict { versions, .. } => {
            let latest = versions
                .iter()
                .any(|v| v.latest && v.holders.contains(&index));
            match own {
                "" if latest => "conflict",
                own => own,
            }
        }
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

/// The replica whose version a policy or a person made win.
fn winner_of(item: &SetItem, settled: &Settled) -> Option<usize> {
    match item.decided_by? {
        SetPolicy::Chosen(replica) | SetPolicy::Force(replica) => Some(replica),
        SetPolicy::Prefer(_) | SetPolicy::KeepBoth => settled.holders.first().copied(),
    }
}

/// What an item does, in a few words (`place_of`: by set index, the
/// root's place as written).
pub(crate) fn what(edit: &SetPlanEdit<'_>, item: &SetItem, place_of: &[usize]) -> String {
    let name = |index: usize| letter(place_of[index]);
    let settled = match &item.outcome {
        _ if edit.is_skipped(&item.path) => return "skipped".into(),
        Outcome::Conflict { reason, .. } => {
            return match reason {
                SetConflict::ChangedApart => "conflict: changed apart".into(),
                SetConflict::ChangedBeneathRemovedDirectory => "conflict: dir removed".into(),
            }
        }
        Outcome::Settled(settled) => settled,
    };
    let mut words = match (&settled.entry, winner_of(item, settled)) {
        (_, Some(winner)) => format!("{}'s version wins", name(winner)),
        _ if settled.receivers.is_empty() => "agreed".into(),
        (None, None) => {
            let on: Vec<String> = settled.receivers.iter().map(|&(r, _)| name(r)).collect();
            format!("DELETE on {}", on.join(", "))
        }
        (Some(entry), None) => {
            let offers = edit.offers(&item.path);
            let source = settled.holders.iter().copied().find(|&h| {
                offers.is_some_and(|at| at.offers.iter().any(|o| o.replica == h && changed(o)))
            });
            let made = source.map_or("", |s| own_change(edit, item, s));
            let from = source.or(settled.holders.first().copied());
            let kind = kind_word(entry);
            let what = match made {
                "new" => format!("new {kind}"),
                "props" => "permissions".to_string(),
                _ => format!("changed {kind}"),
            };
            match from {
                Some(from) => format!("{what} from {}", name(from)),
                None => what,
            }
        }
    };
    if !settled.kept.is_empty() {
        words.push_str(&format!(", KEEP BOTH ({} kept)", settled.kept.len()));
    }
    words
}

fn changed(offer: &Offer) -> bool {
    !change_word(&offer.update).is_empty()
}

fn own_change(edit: &SetPlanEdit<'_>, item: &SetItem, index: usize) -> &'static str {
    edit.offers(&item.path)
        .and_then(|at| at.offers.iter().find(|o| o.replica == index))
        .map_or("", |offer| change_word(&offer.update))
}

/// `*` a choice made here, `^` decided with a directory above.
fn mark(edit: &SetPlanEdit<'_>, item: &SetItem) -> char {
    if edit.choice(&item.path).is_some() {
        '*'
    } else if edit.follows(&item.path).is_some() {
        '^'
    } else {
        ' '
    }
}

/// The cells of `item` in the roots' order as written.
fn cells(app: &SetApp, item: &SetItem) -> String {
    (0..app.roots.len())
        .map(|place| {
            let word = app
                .place_of
                .iter()
                .position(|&p| p == place)
                .map_or("away", |index| cell(app.edit, item, index));
            format!("{word:<CELL$}")
        })
        .collect()
}

/// What the row of `item` says it does: a conflict the program merged
/// (`m`) takes its result everywhere; one it failed on stays; a folded
/// directory counts what is carried with it.
fn row_what(app: &SetApp, item: &SetItem, index: usize) -> String {
    match app.merge_of(item) {
        Some(Ok(size)) => format!("MERGED ({})", crate::summary::bytes(*size)),
        Some(Err(_)) => "conflict: MERGE FAILED".into(),
        None => match app.folds.folded.get(&index) {
            Some(n) => format!("{}, {n} inside", what(app.edit, item, &app.place_of)),
            None => what(app.edit, item, &app.place_of),
        },
    }
}

/// A row in `width` characters: a long path is cut in the middle.
fn row_text(app: &SetApp, index: usize, cursor: &str, width: usize) -> String {
    let item = &app.edit.items()[index];
    let what = row_what(app, item, index);
    let head = format!(
        "{cursor}{} {}{what:<24} ",
        mark(app.edit, item),
        cells(app, item)
    );
    let room = width.saturating_sub(head.chars().count()).max(12);
    format!("{head}{}", fit_middle(&item.path.display(), room))
}

/// The line over the list: each root's letter over its column.
fn header(app: &SetApp) -> String {
    let letters: String = (0..app.roots.len())
        .map(|place| format!("{:<CELL$}", letter(place)))
        .collect();
    format!("   {letters}{:<24} path", "action")
}

fn row_style(edit: &SetPlanEdit<'_>, item: &SetItem) -> Style {
    match &item.outcome {
        _ if edit.is_skipped(&item.path) => Style::new().add_modifier(Modifier::DIM),
        Outcome::Conflict { .. } => Style::new().add_modifier(Modifier::BOLD),
        Outcome::Settled(settled) if settled.entry.is_none() => {
            Style::new().add_modifier(Modifier::UNDERLINED)
        }
        Outcome::Settled(_) => Style::new(),
    }
}

fn summary(edit: &SetPlanEdit<'_>) -> String {
    let (mut changes, mut conflicts, mut skipped) = (0, 0, 0);
    for item in edit.items() {
        match &item.outcome {
            _ if edit.is_skipped(&item.path) => skipped += 1,
            Outcome::Conflict { .. } => conflicts += 1,
            Outcome::Settled(settled) if !settled.receivers.is_empty() => changes += 1,
            Outcome::Settled(_) => {}
        }
    }
    format!(
        "accord sync: {changes} change(s), {conflicts} conflict(s), {skipped} skipped; \
         nothing is changed before g"
    )
}

pub(crate) fn draw(frame: &mut Frame, app: &mut SetApp) {
    let [head, columns, list, status, help] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(summary(app.edit)), head);
    frame.render_widget(
        Paragraph::new(header(app)).style(Style::new().add_modifier(Modifier::BOLD)),
        columns,
    );
    draw_list(frame, app, list);
    let selected = app.rows.get(app.selected).map(|&i| &app.edit.items()[i]);
    let status_line = match selected {
        _ if !app.message.is_empty() => app.message.clone(),
        Some(item) => format!(
            "{}: {}",
            item.path.display(),
            what(app.edit, item, &app.place_of)
        ),
        None => String::new(),
    };
    frame.render_widget(Paragraph::new(status_line), status);
    frame.render_widget(help_bar(HELP), help);
    if let Some(pane) = app.pane.as_mut() {
        pane.draw(frame, list);
    }
}

fn draw_list(frame: &mut Frame, app: &mut SetApp, area: Rect) {
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
            let mut style = row_style(app.edit, item);
            if row == app.selected {
                style = style.add_modifier(Modifier::REVERSED);
            }
            Line::styled(row_text(app, index, cursor, area.width as usize), style)
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), area);
}
