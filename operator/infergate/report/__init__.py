"""The parity report: one self-contained HTML page with inline SVG charts, for people.

page         render_report: the verdict, thresholds, metrics, plots and worst prompts
charts       the report's bar and step charts (inline SVG)
layer_chart  the per-layer error plot a failed check's localisation adds
templates    the Jinja2 environment; the markup lives in templates/ beside it

Pure: a function of what the parity core (`infergate.parity`) measured and decided; the
caller writes the string. The parity core never imports this package.
"""
