"""The API reference (docs/reference, Sphinx + numpydoc + autodoc) builds with warnings as errors.

A docstring that numpydoc or docutils cannot read (a malformed table, an unknown reference, a
section numpydoc does not know) fails this test with Sphinx's message naming the docstring.
"""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_api_reference_builds_without_warnings(tmp_path):
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
           "-d", str(tmp_path / "doctrees"), str(REPO / "docs" / "reference"),
           str(tmp_path / "html")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"API reference build failed ({' '.join(cmd)}):\n{r.stderr}{r.stdout}"
    html = (tmp_path / "html" / "estimators.html").read_text()
    for name in ("GIMC", "GreedyLowRank", "KernelMaxide", "MultiViewMachineClassifier"):
        assert f"ooc_lowrank.{name}" in html, f"{name} is missing from the API reference"
