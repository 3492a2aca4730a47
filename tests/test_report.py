"""The generated results tables (README, docs/results.md) match benchmarks/results/."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("bench_report", REPO / "benchmarks" / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def test_committed_tables_match_results_files(capsys):
    rc = report.main(["--check"])
    out = capsys.readouterr().out
    assert rc == 0, f"stale generated tables; run python benchmarks/report.py:\n{out}"


def test_check_sees_a_hand_edited_number():
    text = (REPO / "README.md").read_text()
    start = text.index("<!-- results:summary -->")
    at = text.index(" s per steady iteration", start)  # a generated field (scale_nuswide.json)
    digit = text[at - 1]
    edited = text[:at - 1] + str((int(digit) + 1) % 10) + text[at:]
    assert report.render_file(edited) == text
    assert report.render_file(edited) != edited


def test_template_field_formats_and_ratios():
    d = json.loads((REPO / "benchmarks" / "results" / "scale_disk_gimc.json").read_text())
    got = report.render_template("{{scale_disk_gimc:n_passes}} passes")
    assert got == f"{d['n_passes']} passes"
    got = report.render_template("{{scale_disk_gimc:store_bytes / 1e9|.1f}}")
    assert got == f"{d['store_bytes'] / 1e9:.1f}"


def test_missing_key_names_file_and_key():
    with pytest.raises(report.ReportError, match="no key 'not_a_key'"):
        report.render_template("{{small:not_a_key}}")
    with pytest.raises(report.ReportError, match="no_such_results_file.json"):
        report.render_template("{{no_such_results_file:x}}")
