"""The wheel holds the whole package: pyproject.toml lists its packages by hand (the plugins live under plugins/
with import names of their own), so a new folder of the core or of a plugin must be listed, or a wheel install
fails on its first import while an editable one works."""

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def package_folders() -> dict[str, Path]:
    """Each import name the work tree holds (`seqxduce.corpus`, `seqxduce_parsing`) -> its folder, tests left out."""
    found = {}
    for top, folder in SETUPTOOLS["package-dir"].items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            if "tests" not in parts:
                found[".".join((top, *parts))] = init.parent
    return found


def test_every_package_folder_is_in_the_wheel():
    assert set(package_folders()) - set(SETUPTOOLS["packages"]) == set()
    assert set(SETUPTOOLS["packages"]) - set(package_folders()) == set(), "a listed package with no folder"


def test_every_plugin_folder_has_its_import_name():
    mapped = {Path(folder).name for folder in SETUPTOOLS["package-dir"].values()}
    plugins = {p.name for p in (ROOT / "plugins").iterdir() if (p / "__init__.py").is_file()}
    assert plugins - mapped == set()


def test_every_file_that_is_not_code_is_in_the_package_data():
    data = SETUPTOOLS.get("package-data", {})
    for name, folder in package_folders().items():
        files = {p.name for p in folder.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc")}
        assert files <= set(data.get(name, [])), f"{name}: {files - set(data.get(name, []))} not in package-data"
