"""The installed third-party plugin package (tests/plugins/seqxduce-sort) driven through the CLI."""

from pathlib import Path

from click.testing import CliRunner

from seqxduce.cli import add_plugin_commands

RECIPE = Path(__file__).resolve().parent / "fixtures" / "sort.toml"


def test_third_party_task_trains_decodes_and_evaluates(tmp_path):
    cli = add_plugin_commands()
    runner = CliRunner()
    listed = runner.invoke(cli, ["plugins", "--kind", "task"])
    assert listed.exit_code == 0 and "sort" in listed.output and "seqxduce-sort" in listed.output
    run = tmp_path / "run"
    trained = runner.invoke(cli, ["train", str(RECIPE), "--out", str(run)])
    assert trained.exit_code == 0, trained.output
    decoded = runner.invoke(cli, ["decode", str(run), "--split", "test"])
    assert decoded.exit_code == 0, decoded.output
    assert "accuracy" in decoded.output
    (tmp_path / "h").write_text("1 2 3\n")
    (tmp_path / "r").write_text("1 2 3\n")
    scored = runner.invoke(cli, ["evaluate", str(tmp_path / "h"), str(tmp_path / "r"), "--task", "sort"])
    assert scored.exit_code == 0 and "accuracy = 1.0000" in scored.output


def test_third_party_settings_validate_across_keys():
    result = CliRunner().invoke(add_plugin_commands(), ["recipe", "show", str(RECIPE), "--set", "task.min_len=6"])
    assert result.exit_code != 0
    assert "[task] max_len = 5 is below min_len = 6; raise max_len" in result.output
    assert "Traceback" not in result.output
