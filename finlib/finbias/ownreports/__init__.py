"""The user's own reports as they have them: PDF, HTML, text, Markdown and tables with a text column.

`extract` turns one file into page texts (PDF through the library the benchmark chose), `pages` removes
running headers, footers and page numbers and joins hyphenated line ends while keeping line structure,
`meta` finds each report's date and ticker (sidecar CSV, file-name pattern, text) and records which rule
gave it, and `collect` reads a whole folder into the reports table the card runs on plus the list of
files it could not use, each with its reason.
"""
