"""Reporting: terminal tables, Markdown, HTML and plots. Reports compute nothing that is not in
the run (or profile) file they are given."""
