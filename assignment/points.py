"""Points: the rubric the TA edits (assignment/points.ini: each section's items and their points) applied to a
graded submission. An item the grade decides earns its points when met; an item marked `ta` that is there
waits for the TA's reading; one that is missing earns nothing."""
import configparser
import dataclasses
import os
import typing

from harness import REPO, UsageError

DEFAULT = os.path.join(REPO, "assignment", "points.ini")
REPRODUCED = "reproduced"  # the grade's own item: the rerun agrees with the submission


@dataclasses.dataclass
class Scored:
    section: str
    item: str
    points: float
    earned: typing.Optional[float]  # None: for the TA to decide


def read(path, items):
    """[(section, [(item, points, ta)])] from the file `path`, checked against the rubric's `items`."""
    parser = configparser.ConfigParser(delimiters=("=",), comment_prefixes=("#",))
    parser.optionxform = str  # items as the rubric spells them
    try:
        if not parser.read(path):
            raise OSError("no such file")
        table = [(name, [(item, float(value.split()[0]), value.split()[1:] == ["ta"])
                         for item, value in parser[name].items()]) for name in parser.sections()]
    except (OSError, configparser.Error, ValueError, IndexError) as error:
        raise UsageError(f"--points={path}: cannot be read as points ({' '.join(str(error).split())})") from None
    known = set(items) | {REPRODUCED}
    unknown = [(name, item) for name, scored in table for item, _, _ in scored if item not in known]
    if unknown or not table:
        raise UsageError(f"--points={path}: " + (f"{unknown[0][0]}: no rubric item {unknown[0][1]!r} (the items: "
                                                 f"{', '.join(sorted(known))})" if unknown else "no section"))
    return table


def score(table, met, reproduced):
    """[Scored] of every item of `table` (read's), given {rubric item: met} and whether the grade reproduced it."""
    met = {**met, REPRODUCED: reproduced}
    return [Scored(section, item, points, None if ta and met[item] else points if met[item] else 0.0)
            for section, scored in table for item, points, ta in scored]


def totals(scored):
    """(earned, for the TA, of): the points the grade decided were earned, those left to the TA, the total."""
    return (sum(s.earned for s in scored if s.earned is not None), sum(s.points for s in scored if s.earned is None),
            sum(s.points for s in scored))


def line(scored):
    """The points of a graded submission in a few words: "6.5 of 10, 2.5 more for the TA to decide"."""
    earned, pending, total = totals(scored)
    return f"{earned:g} of {total:g}" + (f", {pending:g} more for the TA to decide" if pending else "")
