"""A page's Markdown as one standalone HTML file, its PNG figures embedded."""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;
margin:2em auto;padding:0 1em;line-height:1.45;color:#1b1b1b}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0 1em}
th,td{border:1px solid #ccc;padding:.2em .5em}th{background:#f3f3f3}
tr:nth-child(even) td{background:#fafafa}
pre{background:#f6f8fa;padding:.7em;overflow-x:auto;font-size:.85em}
code{font-size:.9em}img{max-width:100%}
blockquote{border-left:4px solid #d9822b;margin:0;padding:.2em 1em;background:#fff7ef}
h1{border-bottom:2px solid #333}h2{border-bottom:1px solid #ccc;margin-top:2em}
"""


def markdown_to_html(md_text: str, base: str | Path, title: str, embed: bool = True) -> str:
    """A standalone HTML page; PNGs are embedded so that the file travels alone."""
    import markdown

    body = markdown.markdown(
        md_text, extensions=["tables", "fenced_code", "toc", "sane_lists"], output_format="html"
    )
    if embed:
        base = Path(base)

        def inline(m: re.Match) -> str:
            src = html.unescape(m.group(1))
            p = base / src
            if p.suffix != ".png" or not p.is_file():
                return m.group(0)
            data = base64.b64encode(p.read_bytes()).decode()
            return f'src="data:image/png;base64,{data}"'

        body = re.sub(r'src="([^"]+)"', inline, body)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"{body}\n</body>\n</html>\n"
    )
