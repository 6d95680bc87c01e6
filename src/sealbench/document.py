"""A small neutral document model, printed as GitHub-flavoured Markdown and as one HTML file.

A report is built once as :class:`Section` blocks and printed twice, so report.md and
report.html cannot drift apart: they carry the same facts by construction.

The HTML is self-contained: inline CSS, the viewer's system fonts, no script but the table
sorter (allowed by its hash), figures as
``data:`` images, and a Content-Security-Policy that forbids every other load, so opening it
never touches the network even if a value printed in it were hostile. Every value is
escaped for its target (HTML entities; Markdown backslashes and code spans).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .safe_text import inert

__all__ = [
    "Block",
    "Bullets",
    "Fields",
    "Figure",
    "Para",
    "Section",
    "Span",
    "Table",
    "render_html",
    "render_markdown",
    "spans",
]

Tone = Literal["plain", "lead", "alert", "warn", "note"]


@dataclass(frozen=True)
class Span:
    """A run of inline text.

    ``code`` prints it verbatim (values taken from a run are printed this way); ``href``
    makes it a relative link; ``mark`` is a CSS class for HTML only (an outcome colour).
    """

    text: str
    code: bool = False
    href: str | None = None
    strong: bool = False
    mark: str | None = None


def spans(*parts: str | Span) -> tuple[Span, ...]:
    """Inline content from plain strings and spans."""
    return tuple(p if isinstance(p, Span) else Span(p) for p in parts)


@dataclass(frozen=True)
class Para:
    """A paragraph. ``alert`` and ``warn`` paragraphs are banners, headed by a bold ``label``."""

    parts: tuple[Span, ...]
    tone: Tone = "plain"
    label: str | None = None


@dataclass(frozen=True)
class Fields:
    """A titled list of ``name: value`` facts; ``wide`` spans the whole page width in HTML."""

    title: str
    rows: tuple[tuple[str, tuple[Span, ...]], ...]
    wide: bool = False


@dataclass(frozen=True)
class Table:
    """A table with a header row; each cell is inline content. A ``sortable`` table sorts by
    a click on a column's header in HTML, and filters by its ``outcome`` column (the page's
    one script, allowed by its hash in the Content-Security-Policy)."""

    header: tuple[str, ...]
    rows: Sequence[tuple[tuple[Span, ...], ...]]
    """Read once per rendering: rows made as they are read (the report's task table) are never all held."""
    sortable: bool = False


@dataclass(frozen=True)
class Bullets:
    """A bulleted list."""

    items: tuple[tuple[Span, ...], ...]


@dataclass(frozen=True)
class Figure:
    """A figure: a file beside report.md, an inline ``data:`` image in report.html."""

    name: str
    alt: str
    caption: str


Block = Para | Fields | Table | Bullets | Figure


@dataclass(frozen=True)
class Section:
    """A titled part of a document; an empty title continues the part above without a heading."""

    title: str
    blocks: tuple[Block, ...] = ()


# --------------------------------------------------------------------------- markdown

# Underscores only matter at word edges (GFM ignores intraword ones): keep "task_pass" readable.
_MD_SPECIAL = re.compile(r"[\\`*\[\]<>#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def _md_text(text: str) -> str:
    return _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), inert(text).replace("\n", " "))


def _md_code(text: str) -> str:
    text = inert(text).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _md_inline(parts: Sequence[Span], in_table: bool = False) -> str:
    out = []
    for s in parts:
        text = _md_code(s.text) if s.code else _md_text(s.text)
        if s.strong:
            text = f"**{text}**"
        if s.href is not None:
            text = f"[{text}]({s.href})"
        out.append(text)
    joined = "".join(out)
    # GFM splits table cells on every unescaped pipe, inside code spans too.
    return joined.replace("|", "\\|") if in_table else joined


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Sequence[Span]]]) -> Iterator[str]:
    yield "| " + " | ".join(_md_text(h) for h in header) + " |"
    yield "|" + "---|" * len(header)
    for row in rows:
        yield "| " + " | ".join(_md_inline(cell, in_table=True) for cell in row) + " |"


def _md_block(blk: Block, figure_files: Mapping[str, str]) -> Iterable[str]:
    if isinstance(blk, Para):
        text = _md_inline(blk.parts)
        if blk.label:
            text = f"**{_md_text(blk.label)}**: {text}"
        return [f"> {text}" if blk.tone in ("alert", "warn") else text]
    if isinstance(blk, Fields):
        return [f"**{_md_text(blk.title)}**", "",
                *_md_table(("field", "value"), ((spans(name), value) for name, value in blk.rows))]
    if isinstance(blk, Table):
        return _md_table(blk.header, blk.rows)
    if isinstance(blk, Bullets):
        return [f"- {_md_inline(item)}" for item in blk.items]
    return [f"![{_md_text(blk.alt)}]({figure_files[blk.name]})", "", f"*{_md_text(blk.caption)}*"]


def render_markdown(title: str, sections: Sequence[Section], figure_files: Mapping[str, str],
                    footer: str = "") -> str:
    """The document as Markdown; figures link to ``figure_files[name]`` (relative paths).

    Raises:
        KeyError: a figure has no entry in ``figure_files``.
    """
    return "".join(markdown_pieces(title, sections, figure_files, footer))


def markdown_pieces(title: str, sections: Sequence[Section], figure_files: Mapping[str, str],
                    footer: str = "") -> Iterator[str]:
    """:func:`render_markdown`'s text in pieces, each table row made as it is written: a
    document of 100,000 rows is never held whole.

    Raises:
        KeyError: a figure has no entry in ``figure_files``.
    """
    def lines() -> Iterator[str]:
        yield from (f"# {_md_text(title)}", "")
        for sec in sections:
            if sec.title:
                yield from (f"## {_md_text(sec.title)}", "")
            for blk in sec.blocks:
                yield from _md_block(blk, figure_files)
                yield ""
        if footer:
            yield from ("---", "", _md_text(footer), "")

    return _ending_in_one_newline(_joined(lines(), "\n"))


def _joined(items: Iterable[str], sep: str) -> Iterator[str]:
    """``sep.join(items)`` in pieces."""
    for i, item in enumerate(items):
        yield sep + item if i else item


def _ending_in_one_newline(pieces: Iterable[str]) -> Iterator[str]:
    """``"".join(pieces).rstrip("\n") + "\n"`` in pieces: trailing newlines are held back until
    more text follows them."""
    held = ""
    for piece in pieces:
        text = piece.rstrip("\n")
        if text:
            yield held + text
            held = piece[len(text):]
        else:
            held += piece
    yield "\n"


# --------------------------------------------------------------------------- html

# The page may load nothing but its own inline styles and data: images, whoever opens it.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

SORT_SCRIPT = (
    'document.querySelectorAll("table.sortable").forEach(function(t){'
    'var body=t.tBodies[0],heads=t.tHead.rows[0].cells,each=Array.prototype.forEach;'
    'each.call(heads,function(th,i){th.style.cursor="pointer";th.title="sort by this column";'
    'th.addEventListener("click",function(){var asc=th.getAttribute("data-dir")!=="asc";'
    'each.call(heads,function(h){h.removeAttribute("data-dir");});th.setAttribute("data-dir",asc?"asc":"desc");'
    'var rows=Array.prototype.slice.call(body.rows);rows.sort(function(a,b){'
    'var x=a.cells[i].textContent.trim(),y=b.cells[i].textContent.trim(),nx=parseFloat(x),ny=parseFloat(y);'
    'var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});'
    'rows.forEach(function(r){body.appendChild(r);});});});'
    'var col=-1;each.call(heads,function(h,i){if(h.textContent==="outcome")col=i;});if(col<0)return;'
    'var seen={};each.call(body.rows,function(r){seen[r.cells[col].textContent.trim()]=1;});'
    'var sel=document.createElement("select");["all"].concat(Object.keys(seen).sort()).forEach(function(o){'
    'var e=document.createElement("option");e.textContent=o;sel.appendChild(e);});'
    'sel.addEventListener("change",function(){each.call(body.rows,function(r){'
    'r.hidden=sel.value!=="all"&&r.cells[col].textContent.trim()!==sel.value;});});'
    'var label=document.createElement("label");label.textContent="show outcome: ";label.appendChild(sel);'
    't.parentNode.insertBefore(label,t);});'
)
"""The one script a page may hold: sorts a sortable table by the clicked column, and filters it
by outcome. It reads only the table's own text and loads nothing."""
SORT_SCRIPT_SOURCE = "'sha256-" + base64.b64encode(hashlib.sha256(SORT_SCRIPT.encode()).digest()).decode() + "'"
"""The script's hash as a CSP source: the page's policy allows this script and no other."""

CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa;
  --alert: #b42318; --alert-bg: #fef3f2; --warn: #7d5300; --warn-bg: #fff8c5; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1060px; padding: 28px 24px 48px; color: var(--fg); background: #fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", "Liberation Sans", "DejaVu Sans", sans-serif; }
h1 { font-size: 24px; margin: 0 0 14px; }
h2 { font-size: 18px; margin: 30px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 12px; margin: 0 0 6px; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); }
code { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace;
  background: var(--soft); padding: 1px 4px; border-radius: 4px; overflow-wrap: anywhere; }
p { margin: 8px 0; }
.banner { border-left: 6px solid; border-radius: 6px; padding: 8px 14px; margin: 8px 0; }
.banner.alert { border-color: var(--alert); background: var(--alert-bg); font-size: 16px; }
.banner.alert strong { color: var(--alert); text-transform: uppercase; letter-spacing: .03em; }
.banner.warn { border-color: var(--warn); background: var(--warn-bg); }
.banner.warn strong { color: var(--warn); }
.lead { font-size: 17px; }
.lead strong { font-size: 21px; }
.note { color: var(--muted); font-size: 14px; }
.facts { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1.35fr) minmax(0, 1.15fr); gap: 12px; margin-top: 14px; }
@media (max-width: 760px) { .facts { grid-template-columns: minmax(0, 1fr); } }
.facts section { border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
.facts section.wide { grid-column: 1 / -1; }
.facts td { border: 0; padding: 2px 10px 2px 0; }
.facts td:first-child { color: var(--muted); white-space: nowrap; width: 1%; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--soft); font-weight: 600; }
figure { margin: 12px 0; }
figure img { display: block; width: 100%; max-width: 780px; height: auto; }
figcaption { color: var(--muted); font-size: 13px; }
.m-alert { color: var(--alert); font-weight: 700; }
.m-pass { color: #00734f; font-weight: 600; } .m-fail { color: #b34700; font-weight: 600; }
.m-abstain { color: #555; font-weight: 600; } .m-timeout { color: #8a5a00; font-weight: 600; }
.m-harness_error { color: #a3447f; font-weight: 600; } .m-unfinished { color: #1f6f9f; font-weight: 600; }
.m-infra_error { color: #005a8c; font-weight: 600; }
footer { margin-top: 32px; padding-top: 8px; border-top: 1px solid var(--line); color: var(--muted); font-size: 13px; }
"""


def _h(text: str) -> str:
    """HTML text, escaped, with every control character written inert (a report shows a
    bundle author's contract and an agent's output)."""
    return html.escape(inert(text))


def _html_inline(parts: Sequence[Span]) -> str:
    out = []
    for s in parts:
        text = _h(s.text)
        if s.code:
            text = f"<code>{text}</code>"
        if s.strong:
            text = f"<strong>{text}</strong>"
        if s.mark is not None:
            text = f'<span class="m-{_h(s.mark)}">{text}</span>'
        if s.href is not None:
            text = f'<a href="{_h(s.href)}">{text}</a>'
        out.append(text)
    return "".join(out)


def _html_table(header: Sequence[str], rows: Iterable[Sequence[Sequence[Span]]], head: bool = True,
                sortable: bool = False) -> Iterator[str]:
    yield '<table class="sortable">' if sortable else "<table>"
    if head:
        yield "<thead><tr>" + "".join(f"<th>{_h(h)}</th>" for h in header) + "</tr></thead>"
    yield "<tbody>"
    for row in rows:
        yield "<tr>" + "".join(f"<td>{_html_inline(cell)}</td>" for cell in row) + "</tr>"
    yield "</tbody></table>"


def _html_block(blk: Block, images: Mapping[str, tuple[str, bytes]]) -> Iterable[str]:
    if isinstance(blk, Para):
        label = f"<strong>{_h(blk.label)}</strong>: " if blk.label else ""
        cls = f"banner {blk.tone}" if blk.tone in ("alert", "warn") else blk.tone
        return (f'<p class="{cls}">{label}{_html_inline(blk.parts)}</p>',)
    if isinstance(blk, Fields):
        table = "".join(_html_table(("field", "value"), ((spans(n), v) for n, v in blk.rows), head=False))
        cls = ' class="wide"' if blk.wide else ""
        return (f"<section{cls}><h3>{_h(blk.title)}</h3>{table}</section>",)
    if isinstance(blk, Table):
        return _html_table(blk.header, blk.rows, sortable=blk.sortable)
    if isinstance(blk, Bullets):
        return ("<ul>" + "".join(f"<li>{_html_inline(i)}</li>" for i in blk.items) + "</ul>",)
    mime, data = images[blk.name]
    b64 = base64.b64encode(data).decode("ascii")
    return (f'<figure><img src="data:{mime};base64,{b64}" alt="{_h(blk.alt)}" '
            f'data-figure="{_h(blk.name)}"><figcaption>{_h(blk.caption)}</figcaption></figure>',)


def render_html(title: str, sections: Sequence[Section], images: Mapping[str, tuple[str, bytes]],
                footer: str = "") -> str:
    """The document as one self-contained HTML page; ``images[name]`` is ``(mime type, bytes)``.

    A section made only of :class:`Fields` is laid out as a grid of cards.

    Raises:
        KeyError: a figure has no entry in ``images``.
    """
    return "".join(html_pieces(title, sections, images, footer))


def html_pieces(title: str, sections: Sequence[Section], images: Mapping[str, tuple[str, bytes]],
                footer: str = "") -> Iterator[str]:
    """:func:`render_html`'s page in pieces, each table row made as it is written: a page of
    100,000 rows is never held whole.

    Raises:
        KeyError: a figure has no entry in ``images``.
    """
    csp = CSP
    sortable = any(isinstance(b, Table) and b.sortable for sec in sections for b in sec.blocks)
    if sortable:
        csp += f"; script-src {SORT_SCRIPT_SOURCE}"

    def body() -> Iterator[Iterable[str]]:
        yield (f"<h1>{_h(title)}</h1>",)
        for sec in sections:
            if sec.title:
                yield (f"<h2>{_h(sec.title)}</h2>",)
            if sec.blocks and all(isinstance(b, Fields) for b in sec.blocks):
                yield ('<div class="facts">' + "".join(p for b in sec.blocks for p in _html_block(b, images)) + "</div>",)
            else:
                yield from (_html_block(b, images) for b in sec.blocks)
        if footer:
            yield (f"<footer>{_h(footer)}</footer>",)
        if sortable:
            yield (f"<script>{SORT_SCRIPT}</script>",)

    yield ('<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
           f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
           '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
           f"<title>{_h(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n")
    for i, element in enumerate(body()):
        if i:
            yield "\n"
        yield from element
    yield "\n</body>\n</html>\n"
