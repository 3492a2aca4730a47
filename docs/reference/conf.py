"""Sphinx configuration of the API reference (built from the numpydoc docstrings).

Build: ``python -m sphinx -W -b html docs/reference docs/reference/_build`` (the default tests
do this with warnings as errors, ``tests/test_docs_reference.py``).
"""

project = "ooc_lowrank"
author = "ooc_lowrank maintainers"
extensions = ["sphinx.ext.autodoc", "numpydoc"]
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
# the reference documents what a user calls; numpydoc's own member tables would repeat autodoc's
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
autodoc_default_options = {"members": False, "inherited-members": False}
autodoc_typehints = "none"
suppress_warnings = []
