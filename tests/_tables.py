"""Reading back the plain HTML tables the pages draw (`mmcore.jobs.htmltable.table_html`)."""
import base64
import re
from html.parser import HTMLParser


class _TableReader(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tables, self.row, self.column, self.in_style = [], None, None, False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.row = {}
        elif tag in ("td", "th"):
            self.column = attrs.get("data-column")
            self.row[self.column] = ""
            self.header = tag == "th"
        elif tag == "img" and self.column and attrs.get("src", "").startswith("data:image/svg+xml;base64,"):
            svg = base64.b64decode(attrs["src"].split(",", 1)[1]).decode()
            self.feed_svg(svg)
        elif tag == "polyline" and self.column:
            self.row[self.column] = [tuple(map(float, p.split(","))) for p in attrs["points"].split()]
        elif tag == "circle" and self.column:
            self.row[self.column] = [(float(attrs["cx"]), float(attrs["cy"]))]
        elif tag in ("style", "title"):
            self.in_style = True

    def feed_svg(self, svg):
        points = re.search(r'points="([^"]+)"', svg)
        if points:
            self.row[self.column] = [tuple(map(float, p.split(","))) for p in points.group(1).split()]
        else:
            circle = re.search(r'cx="([^"]+)" cy="([^"]+)"', svg)
            self.row[self.column] = [(float(circle.group(1)), float(circle.group(2)))]

    def handle_endtag(self, tag):
        if tag in ("style", "title"):
            self.in_style = False
        elif tag in ("td", "th"):
            self.column = None
        elif tag == "tr" and self.row is not None:
            self.tables[-1].append((self.header, self.row))
            self.row = None

    def handle_data(self, data):
        if self.column and not self.in_style and isinstance(self.row.get(self.column), str):
            self.row[self.column] += data


def html_tables(*bodies):
    """Every table in HTML strings: a list of {"headers": {column: text}, "rows": [{column: text}]};
    a sparkline (an SVG image) reads as its list of (x, y) points. A table of rows only (a block of
    `htmltable.table_parts`) continues the table before it."""
    out = []
    for body in bodies:
        reader = _TableReader()
        reader.feed(body)
        for table in reader.tables:
            headers = next((row for header, row in table if header), None)
            rows = [row for header, row in table if not header]
            if headers is None and out:
                out[-1]["rows"].extend(rows)
            else:
                out.append({"headers": headers or {}, "rows": rows})
    return out


def page_tables(at):
    """The HTML tables of an AppTest page, in page order."""
    return html_tables(*[h.proto.body for h in at.get("html")])

