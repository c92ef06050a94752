"""Settings of every test session (tests/ and plugins/*/tests): the tokenized-corpus cache
(seqxduce.corpus.token_cache) goes to a folder of the session's own, not the user's ~/.cache, and is removed at
the end."""

import atexit
import os
import shutil
import tempfile

if not os.environ.get("SEQXDUCE_CACHE"):
    _cache = tempfile.mkdtemp(prefix="seqxduce-test-cache-")
    os.environ["SEQXDUCE_CACHE"] = _cache
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
