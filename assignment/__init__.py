"""The assignment this toolkit serves (../shared/seeds/004): its rubric, the student's own section, a submission's
manifest, make submission and make grade (docs/submission.md)."""
