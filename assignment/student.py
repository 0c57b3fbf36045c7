"""The student's own part of the report (submission/student.md): its template, made from what verify found, and
its sections as the PDF typesets them and the rubric reads them. A section is answered when it says something
beyond the template's <placeholders> and comments."""
import re

MODEL, CODE, CORRECTNESS, THROUGHPUT, ENVIRONMENT = ("Model and paper", "Where the code came from", "Correctness",
                                                     "Throughput", "Environment")
PLACEHOLDER = re.compile(r"<[^<>\n]*>")
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def difference_heading(pair):
    """The subheading under Correctness that explains one pair verify found different: "reference vs tf-async"."""
    return f"{pair['a']} vs {pair['b']}"


def template(model, differing):
    """The file's text for `model`, a subheading under Correctness for each pair of `differing` (verify's pairs)."""
    explained = "".join(f"\n### {difference_heading(pair)}\n<Why {pair['b']} differs from {pair['a']} "
                        f"({pair['verdict']}).>\n" for pair in differing)
    return f"""# {model}: my part of the report

<!-- make submission typesets this file into submission/report.pdf, beside the sections it generates.
     Replace each <placeholder>; a section left as the template has it is listed as missing on page 1. -->

## {MODEL}
<The model and the paper it comes from: authors, title, venue or arXiv id, year.>

## {CODE}
<The repository and file you took the model's code from (URL, commit), and what you changed to port it.>

## {CORRECTNESS}
<What verify compared and why the synchronous runs match the reference; below, why each difference happens.>
{explained}
## {THROUGHPUT}
<Why the architectures rank as they do in the bench: what each sends per step, and what limits it here.>

## {ENVIRONMENT}
<Anything about the machines the recorded environment leaves out (the manifest records each host's).>
"""


def sections(text):
    """{heading: its text} of every "## " and "### " heading, comments removed, in order."""
    found, heading = {}, None
    for line in COMMENT.sub("", text).splitlines():
        match = re.match(r"(#{2,3}) +(.*\S)", line)
        if match:
            heading = match[2]
            found[heading] = ""
        elif heading is not None:
            found[heading] += line + "\n"
    return found


def answered(text):
    """Whether a section's text says anything once the template's placeholders are gone."""
    return bool(PLACEHOLDER.sub("", text or "").strip())


def blocks_of(text, make):
    """The file as the report's blocks (reporting.blocks, passed as `make`): headings, paragraphs and lists; the
    text is shown as written, markup and all, never read as Typst."""
    parts, paragraph, items = [], [], []

    def flush():
        if paragraph:
            parts.append(make.paragraph(" ".join(paragraph)))
        if items:
            parts.append(make.bullets(items[:]))
        paragraph.clear()
        items.clear()
    for line in COMMENT.sub("", text).splitlines():
        stripped = line.strip()
        heading = re.match(r"#{1,6} +(.*\S)", stripped)
        if heading or not stripped:
            flush()
            if heading and not stripped.startswith("# "):  # the file's own title: the section is titled already
                parts.append(make.subheading(heading[1]))
        elif re.match(r"[-*] +", stripped):
            if paragraph:
                flush()
            items.append(stripped[2:].strip())
        elif items:
            items[-1] += " " + stripped
        else:
            paragraph.append(stripped)
    flush()
    return parts
