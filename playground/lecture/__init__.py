"""The whole lecture on one page: run every section's scenarios, put the lecture's figures beside them.

lecture.yaml (the sections, their scenarios, the lecture's figures) -> plan.py; runner.py runs the
scenarios one at a time through the real CLI; readers/ (a module per section) finds each figure's
values in the results and figures.py compares them; page.py writes index.html and summary.md;
command.py ties it together.
"""
