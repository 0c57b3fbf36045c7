"""Typeset the report with Typst (the `typst` wheel): layout report.typ and content data.json, kept beside the PDF."""
import json
import os
import shutil

import typst

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "report.typ")


def typeset(document, out_dir):
    """Write out_dir/report.typ, data.json and report.pdf (compiled under another name and renamed: whole or absent)."""
    for section in document["sections"]:
        for part in section["blocks"]:
            if part["kind"] == "figure":  # Typst reads images relative to the source's directory
                part["path"] = os.path.relpath(part["path"], out_dir)
    with open(os.path.join(out_dir, "data.json"), "w") as f:
        json.dump(document, f, indent=1, ensure_ascii=False)
    source = os.path.join(out_dir, "report.typ")
    shutil.copyfile(TEMPLATE, source)
    pdf = os.path.join(out_dir, "report.pdf")
    partial = pdf + ".partial"
    # Only the fonts inside the compiler: the same PDF on every machine, and no search of the system.
    typst.compile(source, output=partial, format="pdf", root=out_dir, ignore_system_fonts=True)
    os.replace(partial, pdf)
    return pdf
