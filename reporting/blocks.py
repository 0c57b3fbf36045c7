"""The pieces a section is made of, as plain data for the Typst template (reporting/report.typ), and the one
way every kind of number is written, so that the text, the tables and the tests agree."""


def paragraph(text, lead=""):
    """`lead`, if given, is set in bold before the text."""
    return {"kind": "paragraph", "lead": lead, "text": text}


def subheading(text):
    return {"kind": "subheading", "text": text}


def bullets(items):
    return {"kind": "bullets", "items": list(items)}


def table(header, rows, caption):
    rows = [[str(cell) for cell in row] for row in rows]
    # Columns of numbers are right-aligned (digits under digits), columns of words left-aligned.
    align = ["right" if column and all(cell[:1].isdigit() or cell == "-" for cell in column) else "left"
             for column in zip(*rows)] if rows else ["left"] * len(header)
    return {"kind": "table", "header": header, "rows": rows, "align": align, "caption": caption}


def figure(path, caption):
    return {"kind": "figure", "path": path, "caption": caption}


def missing(text):
    """A result that was not measured, named as such (drawn as a box: it must not read as a finding)."""
    return {"kind": "missing", "text": text}


def section(title, *blocks):
    return {"title": title, "blocks": [b for b in blocks if b is not None]}


def rate(words_per_sec):
    return f"{words_per_sec:,.0f}"


def interval(low, high):
    return f"{rate(low)}–{rate(high)}"


def loss(value):
    return f"{value:.4f}"


def small(value):
    """A difference or a tolerance: three significant digits, 0 written as 0."""
    return "0" if value == 0 else f"{value:.3g}"


def seconds(value):
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"


def ratio(value):
    return f"{value:.2f}x"


def byte_count(n):
    return f"{n / 1e6:.3g} MB" if n >= 1e5 else f"{n / 1e3:.3g} kB"
