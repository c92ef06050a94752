"""Not a package anyone imports: it is here for pytest, which imports each plugin's `__init__.py` while collecting
plugins/X/tests/. Without it pytest would put plugins/ on sys.path and import plugins/sentencepiece/ as the module
`sentencepiece`, shadowing the library of that name; with it the plugin is imported as `plugins.sentencepiece`.
The installed plugins are the packages seqxduce_X (package-dir in pyproject.toml)."""
