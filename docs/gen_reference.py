"""Writes the reference pages into the site at build time (mkdocs-gen-files): made from the code,
never committed, so they cannot drift from it (playground/cli/reference.py)."""

import mkdocs_gen_files

from playground.cli.reference import PAGES

for path, make in PAGES.items():
    with mkdocs_gen_files.open(path, "w") as f:
        f.write(make())
