"""The leaderboard as one self-contained HTML page (inline CSS, JS and images; no network).

Each group's table has three bodies: the ranked runs, the privileged ones (marked †), and the
unverified ones (listed apart when any run on the board is verified; each row's "verified"
cell links to its verification report). Runs the board could not read are listed under
"Rejected runs" with the reason.
Clicking a column header sorts both bodies by that column, ascending first, then toggling;
cells carry their raw number in ``data-value`` so sorting is numeric where it should be.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from html import escape
from urllib.parse import quote

from orchenv.eval.rows import VERIFIED_RULE, Group, Rejected, Row, cell, columns

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem; color: #1b1f24; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
p.rule { max-width: 60rem; color: #444; font-size: 0.9rem; }
table.board { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0 1rem; }
div.scroll { overflow-x: auto; }
table.board th, table.board td { border: 1px solid #d0d7de; padding: 0.3rem 0.5rem; white-space: nowrap; }
table.board th { background: #f6f8fa; cursor: pointer; user-select: none; white-space: nowrap; }
table.board th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: 0.7em; }
table.board th[aria-sort="descending"]::after { content: " \\25BC"; font-size: 0.7em; }
table.board td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.board tbody.privileged tr { background: #fff4f2; color: #6e3b33; }
table.board tbody.privileged tr:first-child td { border-top: 3px double #c9a39d; }
table.board tbody.unverified tr { background: #f4f4f4; color: #57606a; }
table.board tbody.unverified tr:first-child td { border-top: 3px double #afb8c1; }
table.board td[data-col="verification"].verified { color: #1a7f37; font-weight: 600; }
figure { display: inline-block; margin: 0 1rem 1rem 0; }
figure img { max-width: 42rem; border: 1px solid #d0d7de; }
.note { font-size: 0.8rem; color: #666; }
"""

# Sorts every <tbody> of the clicked table on its own (privileged runs stay in their section).
JS = """
(function () {
  function key(row, col) {
    var cell = row.cells[col];
    if (!cell) return "";
    var v = cell.getAttribute("data-value");
    if (v !== null && v !== "" && !isNaN(parseFloat(v))) return parseFloat(v);
    return cell.textContent.trim();
  }
  function compare(a, b) {
    var na = typeof a === "number", nb = typeof b === "number";
    if (na && nb) return a - b;
    if (na) return -1;
    if (nb) return 1;
    return String(a).localeCompare(String(b), undefined, {numeric: true, sensitivity: "base"});
  }
  document.querySelectorAll("table.board").forEach(function (table) {
    var headers = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(headers, function (th, col) {
      th.addEventListener("click", function () {
        var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
        Array.prototype.forEach.call(headers, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir);
        var sign = dir === "ascending" ? 1 : -1;
        Array.prototype.forEach.call(table.tBodies, function (body) {
          var rows = Array.prototype.slice.call(body.rows).map(function (r, i) {
            return {row: r, k: key(r, col), i: i};
          });
          rows.sort(function (x, y) { return sign * compare(x.k, y.k) || x.i - y.i; });
          rows.forEach(function (x) { body.appendChild(x.row); });
        });
      });
    });
  });
})();
"""


def _row_html(group: Group, row: Row) -> str:
    cells = []
    for key, _ in columns(group):
        text, value = cell(row, key)
        cls = ' class="num"' if value is not None else ""
        data = f' data-value="{value!r}"' if value is not None else ""
        title = ""
        if key == "controller" and row.privileged:
            title = ' title="privileged: reads ground truth"'
        body = escape(text)
        if key == "verification":
            cls = ' class="verified"' if row.verified else ""
            title = f' title="{escape(row.verification_reason)}"' if row.verification_reason else ""
            if row.report:
                body = f'<a href="{escape(quote(row.report))}">{body}</a>'
        if key == "run" and row.view:
            body = f'<a href="{escape(quote(row.view))}">{body}</a>'
        cells.append(f'<td data-col="{escape(key)}"{cls}{data}{title}>{body}</td>')
    cls = ' class="privileged"' if row.privileged else ""
    return f'<tr{cls} data-run="{escape(row.run)}">' + "".join(cells) + "</tr>"


def _img(path_name: str, data: bytes, alt: str) -> str:
    encoded = base64.b64encode(data).decode("ascii")
    return (
        f'<figure><img alt="{escape(alt)}" src="data:image/png;base64,{encoded}">'
        f'<figcaption class="note">{escape(alt)} ({escape(path_name)})</figcaption></figure>'
    )


def render_html(
    groups: Sequence[Group],
    title: str,
    rule: str,
    rejected: Sequence[Rejected] = (),
    notes: Sequence[str] = (),
) -> str:
    """The self-contained board page; ``notes`` are plain-text paragraphs under the title
    (escaped: never markup)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        *(f'<p class="board-note">{escape(note)}</p>' for note in notes),
        f'<p class="rule">{escape(rule)}</p>',
        '<p class="note">Click a column header to sort (again to reverse). '
        "Privileged runs (†) stay in their own section below the ranked runs; unverified "
        "runs below them.</p>",
    ]
    if VERIFIED_RULE not in rule:
        parts.append(f'<p class="rule">{escape(VERIFIED_RULE)}</p>')
    if groups and not groups[0].verified_board:
        parts.append(
            '<p class="rule"><strong>No run on this board is verified</strong>: its '
            "ranks are of unverified runs.</p>"
        )
    for n, group in enumerate(groups):
        head = "".join(
            f'<th data-col="{escape(key)}" scope="col">{escape(label)}</th>'
            for key, label in columns(group)
        )
        ranked = "".join(_row_html(group, r) for r in group.rows_in("ranked"))
        privileged = "".join(_row_html(group, r) for r in group.rows_in("privileged"))
        unverified = "".join(_row_html(group, r) for r in group.rows_in("unverified"))
        parts += [
            f'<section id="group-{n}"><h2>{escape(group.title)}</h2>',
            f'<p class="note">{escape(group.header.replace("`", ""))}.</p>',
            (
                f'<p class="note">Env gameability gap (orchenv audit): {escape(group.audit_gap)}</p>'
                if group.audit_gap
                else ""
            ),
            f'<div class="scroll"><table class="board" id="board-{n}">',
            f"<thead><tr>{head}</tr></thead>",
            f'<tbody class="ranked">{ranked}</tbody>',
            f'<tbody class="privileged">{privileged}</tbody>',
            f'<tbody class="unverified">{unverified}</tbody></table></div>',
        ]
        for kind, path in group.plots.items():
            parts.append(_img(path.name, path.read_bytes(), kind.replace("_", " ")))
        parts.append("</section>")
    if rejected:
        items = "".join(
            f"<li><code>{escape(r.dir)}</code>: {escape(r.reason)}</li>" for r in rejected
        )
        parts.append(
            f'<section id="rejected"><h2>Rejected runs (not on the board)</h2><ul>{items}</ul></section>'
        )
    parts += [f"<script>{JS}</script>", "</body></html>"]
    return "\n".join(parts) + "\n"
