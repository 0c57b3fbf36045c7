"""`make report`: the PDF report, built from the files in results/ alone (`python -m reporting --results_dir=results
--out_dir=report`); docs/report.md describes its modules."""
