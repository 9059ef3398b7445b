"""``report.html``: the report's Markdown as one self-contained page.

:func:`render_html` turns the text of ``report.md`` into HTML (python's ``mistune``), so the
page tells the same story with the same numbers; every image the Markdown links to (relative to
the run folder) is embedded as a ``data:`` URI, styles are inline and a few lines of inline script
make the tables sortable (click a header), so the file opens anywhere, offline, with no other
file beside it. It is laid out for a phone (tables scroll sideways in their own box, figures fit
the width) and for print (no shadows, figures kept whole). The stand-in banner (the report's
opening quote) is drawn as a banner.
"""

from __future__ import annotations

import base64
import html as _html
import logging
import mimetypes
import re
from pathlib import Path

import mistune

__all__ = ["render_html"]

log = logging.getLogger(__name__)

_STYLE = """
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1b1f24;
       margin: 0 auto; padding: 1rem; max-width: 72rem; background: #fff; }
h1 { font-size: 1.5rem; margin: .5rem 0 1rem; }
h2 { font-size: 1.2rem; margin: 1.8rem 0 .6rem; border-bottom: 1px solid #d0d7de; padding-bottom: .2rem; }
code { font: .9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #f3f4f6;
       padding: .05em .3em; border-radius: 3px; overflow-wrap: anywhere; }
blockquote { margin: 1rem 0; padding: .6rem .9rem; border-left: 4px solid #d0d7de; color: #444; }
blockquote.banner { border: 1px solid #d4a72c; border-left-width: 6px; background: #fff8c5; color: #3b2e00; }
.table { overflow-x: auto; margin: .6rem 0 1rem; -webkit-overflow-scrolling: touch; }
table { border-collapse: collapse; font-size: .9rem; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: .25rem .5rem; white-space: nowrap; }
th { background: #f6f8fa; text-align: left; }
th.sortable { cursor: pointer; user-select: none; }
th.sortable::after { content: " \\2195"; color: #8c959f; font-size: .8em; }
th[aria-sort="ascending"]::after { content: " \\2191"; color: #1b1f24; }
th[aria-sort="descending"]::after { content: " \\2193"; color: #1b1f24; }
td[style*="right"] { text-align: right; }
img { max-width: 100%; height: auto; display: block; margin: .5rem 0 1.2rem; }
.missing { color: #cf222e; font-style: italic; }
hr { border: 0; border-top: 1px solid #d0d7de; margin: 2rem 0 .8rem; }
@media (max-width: 40rem) { body { font-size: 15px; padding: .6rem; } h1 { font-size: 1.25rem; } }
@media print {
  body { max-width: none; padding: 0; font-size: 11pt; }
  .table { overflow: visible; }
  th.sortable::after { content: ""; }
  img, table, blockquote { break-inside: avoid; }
  h2 { break-after: avoid; }
}
"""

# Click a header to sort its table by that column (numbers as numbers, "n/a" last); again to reverse.
_SCRIPT = """
(function () {
  function key(cell) {
    var t = cell.textContent.trim();
    var n = parseFloat(t.replace(/,/g, ""));
    return (t === "" || t === "n/a") ? null : (isNaN(n) || !/^[-+]?[\\d,.]+( ?%|x)?$/.test(t) ? t.toLowerCase() : n);
  }
  function sort(table, col, th) {
    var body = table.tBodies[0];
    var dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      if (x === null) { return y === null ? 0 : 1; }
      if (y === null) { return -1; }
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return x < y ? -dir : (x > y ? dir : 0);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
  }
  document.querySelectorAll("table").forEach(function (table) {
    if (!table.tHead || !table.tBodies.length || table.tBodies[0].rows.length < 2) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.classList.add("sortable");
      th.tabIndex = 0;
      th.addEventListener("click", function () { sort(table, col, th); });
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") { sort(table, col, th); } });
    });
  });
})();
"""

_IMG = re.compile(r'<img src="([^"]*)" alt="([^"]*)"\s*/?>')


def _data_uri(path: Path) -> str:
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _embed_images(body: str, base: Path) -> str:
    root = base.resolve()

    def embed(match: re.Match) -> str:
        src, alt = _html.unescape(match.group(1)), match.group(2)
        if src.startswith("data:"):
            return match.group(0)
        path = (root / src).resolve()
        if root not in path.parents or not path.is_file():
            log.warning("report.html: figure %s is not in the run folder", src)
            return f'<p class="missing">Figure not available: {alt or _html.escape(src)}</p>'
        return f'<img src="{_data_uri(path)}" alt="{alt}">'

    return _IMG.sub(embed, body)


def render_html(markdown_text: str, run_dir: str | Path, *, title: str | None = None) -> str:
    """The self-contained HTML page of ``markdown_text`` (``report.md``'s text) of ``run_dir``.

    Images linked relative to ``run_dir`` are embedded; one that is not there (or lies outside
    the run folder) becomes a line saying so, never a broken image or an outside request.
    """
    body = mistune.create_markdown(escape=True, plugins=["table"])(markdown_text)
    body = _embed_images(body, Path(run_dir))
    body = re.sub(r"<table>(.*?)</table>", r'<div class="table"><table>\1</table></div>', body, flags=re.S)
    body = re.sub(r"<blockquote>(\s*<p><strong>These measurements come from glm5lib's stand-in)",
                  r'<blockquote class="banner" role="note">\1', body, count=1)
    if title is None:
        heading = re.search(r"<h1>(.*?)</h1>", body, flags=re.S)
        title = re.sub(r"<[^>]+>", "", heading.group(1)) if heading else "glm5lib report"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        "<link rel=\"icon\" href=\"data:,\">\n"
        f"<title>{_html.escape(_html.unescape(title))}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        f"<main>\n{body}</main>\n<script>{_SCRIPT}</script>\n</body>\n</html>\n"
    )
