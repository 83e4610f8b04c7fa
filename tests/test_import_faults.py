"""The import surface's fault cases (benchmarks/import_faults.py): every broken folder is
refused in one line naming the file at fault, or imported exactly as the intact one."""

from tests.conftest import load_script


def test_every_broken_import_is_refused_clearly_or_imported_exactly(tmp_path, tiny_export):
    faults = load_script("benchmarks/import_faults.py")
    results = faults.run_cases(tmp_path, tiny_export=tiny_export)
    assert len(results) >= 30
    bad = [(name, outcome, line) for name, outcome, line in results
           if outcome not in ("ok", "clear")]
    assert not bad, bad
    assert {outcome for _, outcome, _ in results} == {"ok", "clear"}
