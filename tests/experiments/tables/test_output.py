"""What a table preset writes and reads back (gencc.experiments.tables.output)."""

import time

from gencc.experiments.tables.output import table_path, table_section, write_table


def test_a_written_table_reads_back_into_its_section(tmp_path):
    rows = [{"N": 15, "rel_mse": 0.25}, {"N": 20, "rel_mse": 0.125}]
    res = write_table(tmp_path, "toy", rows, time.perf_counter())
    assert res["rows"] == res["points"] == 2 and res["paths"] == [table_path(tmp_path, "toy")]
    assert res["seconds"] >= 0
    seen = []
    lines = table_section(tmp_path, "toy", "A toy table.", lambda r: seen.append(r) or ["| N |"],
                          note=lambda r: f"{len(r)} rows.")
    assert lines[0] == "A toy table." and lines[2].endswith("--out docs`. 2 rows.") and lines[-1] == "| N |"
    assert [int(r["N"]) for r in seen[0]] == [15, 20] and [float(r["rel_mse"]) for r in seen[0]] == [0.25, 0.125]
    assert table_section(tmp_path, "absent", "x", lambda r: ["y"]) == []
    assert table_path(tmp_path, "robust", "main").name == "robust-main.csv"
