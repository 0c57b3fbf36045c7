"""The sections a submission's report starts with: what the assignment asks that is missing (page 1), then the
student's own section (assignment/student.py)."""
from assignment import rubric, student
from reporting import blocks


def checklist_section(results_dir, student_text, model=None):
    items = rubric.check(results_dir, student_text)
    missing = [item for item in items if not item.met]
    return blocks.section(
        f"{model}: before handing in" if model else "Before handing in",
        blocks.missing("Missing: " + "; ".join(f"{item.name} ({item.found})" for item in missing)) if missing
        else blocks.paragraph("Every item the assignment asks for is here."),
        blocks.table(["the assignment asks", "", "found"], [[item.name, "yes" if item.met else "MISSING", item.found]
                                                             for item in items],
                     "The assignment's items, checked from the results and the student's section (make grade "
                     "checks the same)."))


def student_section(text, path):
    parts = student.blocks_of(text, blocks)
    said = student.sections(text)
    return blocks.section("In the student's words", *(
        parts if any(student.answered(body) for body in said.values())
        else [blocks.missing(f"{path} is as the template left it: the student's account is missing")]))
