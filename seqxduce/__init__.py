"""seqxduce: a plugin-based sequence transduction toolkit."""
