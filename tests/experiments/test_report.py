"""results.md and the generated pages: one section per preset present, pages that name their command."""

from __future__ import annotations

from pathlib import Path

from gencc.experiments.analysis import write_csv
from gencc.experiments.markdown import provenance
from gencc.experiments.report import write_results
from gencc.experiments.tables import low_redundancy


def _lowred_table(out: Path) -> None:
    row = {"workload": "digits-cnn", "K": 10, "N": 15, "scheme": "BACC", "sets": 3}
    for c in low_redundancy.COLUMNS:
        row.update({f"{c} rel_mse": 0.01, f"{c} rel_mse_ci": 0.002, f"{c} agreement": 0.99})
    write_csv(out / "tables" / "low-redundancy.csv", [row])


def test_table_preset_section_and_page(tmp_path: Path) -> None:
    _lowred_table(tmp_path)
    text = write_results(tmp_path).read_text()
    body = low_redundancy.section(tmp_path)
    assert "## low-redundancy\n\n" + "\n".join(body) in text
    page = (tmp_path / "generated" / "low-redundancy.md").read_text().splitlines()
    assert page[:2] == [provenance("low-redundancy"), ""] and page[2:] == body
    assert not (tmp_path / "generated" / "parm.md").exists()  # no table, no page


def test_empty_folder_gives_a_header_only(tmp_path: Path) -> None:
    text = write_results(tmp_path).read_text()
    assert text.startswith("# Results") and "## " not in text
    assert not (tmp_path / "generated").exists()
